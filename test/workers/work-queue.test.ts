import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { WorkQueue, WorkQueueReader } from '../../src/workers/work-queue.js';

/** Threads waiting on the queue's tail, counted by waking them all (Atomics.notify answers how many it woke). */
function wakeAllWaiting(queue: WorkQueue): number {
  return Atomics.notify(new Int32Array(queue.buffers.control), 0);
}

describe('WorkQueue', () => {
  it('wakes one waiting thread per message it publishes', async () => {
    const queue = new WorkQueue(4, 3);
    const readers = [0, 1, 2].map(() => new WorkQueueReader(queue.buffers));
    const waits = readers.map((reader) => reader.published());
    assert.equal(queue.dryCount, 3, 'each waiting thread counted itself dry');
    queue.publish(0, '"one"', false);
    assert.equal(wakeAllWaiting(queue), 2, 'the other two still wait');
    await Promise.all(waits);
  });

  it('wakes waiting threads again for a message none took over a beat', async () => {
    const queue = new WorkQueue(4, 2);
    const lost = new WorkQueueReader(queue.buffers);
    const waiting = new WorkQueueReader(queue.buffers);
    const lostWait = lost.published();
    const wait = waiting.published();
    // The one wake goes to the first waiter, a thread that never takes the message (one
    // being terminated, say).
    queue.publish(0, '"kept"', false);
    await lostWait;
    assert.equal(queue.rewake(), 0, 'the first beat only notes where the head is');
    assert.equal(queue.rewake(), 1, 'the next, the head unmoved, wakes the thread still waiting');
    await wait;
    const taken = waiting.take(true, () => true);
    assert.ok(taken !== null && taken !== 'isolated');
    assert.equal(taken.text, '"kept"');
    assert.equal(queue.rewake(), 0, 'nothing waits any more');
  });

  it('leaves waiting threads alone while the head moves', async () => {
    const queue = new WorkQueue(4, 2);
    const reader = new WorkQueueReader(queue.buffers);
    const idle = new WorkQueueReader(queue.buffers);
    const first = idle.published();
    queue.publish(0, '"a"', false);
    await first;
    queue.publish(1, '"b"', false);
    const second = idle.published(); // a message waits: no wait at all
    await second;
    assert.equal(queue.rewake(), 0);
    assert.notEqual(
      reader.take(true, () => true),
      null,
    );
    assert.equal(queue.rewake(), 0, 'the head moved since the last beat');
  });
});
