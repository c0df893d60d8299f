import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { JobStore } from '../../../src/store/store.js';
import { SqliteStore } from '../../../src/store/sqlite/store.js';
import { WorkerPool } from '../../../src/workers/pool.js';
import { fixtureTasksDir } from '../../support/paths.js';
import { insertOk, mustGet, newJob } from '../../support/store-fixtures.js';
import { loadTasks, type TaskRegistry } from '../../../src/workers/registry.js';
import { holdFirstClaim, signal, testDispatcher } from '../../support/held-claim.js';

describe('Dispatcher.stop', () => {
  let registry: TaskRegistry;
  let pool: WorkerPool;

  before(async () => {
    registry = await loadTasks({ tasksDir: fixtureTasksDir });
    pool = new WorkerPool({ threads: 1, maxMemoryMb: 64, registry, onProgress() {} });
  });

  after(() => pool.close());

  it('waits for a claim in flight and gives its jobs back before it resolves (the store closes next)', async () => {
    const real = await SqliteStore.open(':memory:', { capacity: 100, synchronous: 'normal' });
    // The claim takes the job in the store, then its answer is held until stop() has begun.
    const { store, claimed, answer, released } = holdFirstClaim(real);
    try {
      const dispatcher = testDispatcher(store, pool, 1);
      await dispatcher.start();
      const [job] = await insertOk(real, [newJob({ type: 'test.quick' })]);
      assert.ok(job);
      dispatcher.pump();
      await claimed;
      // Claimed, not started: a reader sees it queued, as before its claim.
      const held = await mustGet(real, job.id);
      assert.equal(held.status, 'queued');
      assert.equal(held.attempts, 0);

      const stopped = dispatcher.stop(1000);
      answer();
      await stopped;
      // Before the fix stop() resolved at once; the jobs went back later, to a store by
      // then closed, and the outcome written instead was retried on a timer for ever.
      assert.deepEqual(released, [job.id], 'the claimed job went back before stop() resolved');
      const back = await mustGet(real, job.id);
      assert.equal(back.status, 'queued');
      assert.equal(back.attempts, 0, 'its attempt is not counted');
    } finally {
      await real.close();
    }
  });

  it('waits for a rewrite of outcomes in flight, and schedules none after its last try', async () => {
    const real = await SqliteStore.open(':memory:', { capacity: 100, synchronous: 'normal' });
    const rewriting = signal();
    const answer = signal();
    let finishes = 0;
    // The first write of the outcome fails; the rewrite (the dispatcher's back-off timer)
    // is held until stop() has begun, then fails too; stop()'s last try gets through.
    const store = new Proxy(real, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property, target);
        if (property === 'finish') {
          return async (items: Parameters<JobStore['finish']>[0]) => {
            finishes += 1;
            if (finishes === 1) throw new Error('the store cannot write now');
            if (finishes === 2) {
              rewriting.resolve();
              await answer.promise;
              throw new Error('the store cannot write now');
            }
            return target.finish(items);
          };
        }
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    try {
      const dispatcher = testDispatcher(store, pool, 1);
      await dispatcher.start();
      const [job] = await insertOk(real, [newJob({ type: 'test.quick' })]);
      assert.ok(job);
      dispatcher.pump();
      await rewriting.promise;

      const stopped = dispatcher.stop(1000);
      answer.resolve();
      await stopped;
      // Before the fix stop() did not wait for the rewrite, which failed after it and
      // armed a timer that went on rewriting to the closed store, keeping the process alive.
      assert.equal(finishes, 3, 'the rewrite failed, then stop() tried once more');
      assert.equal((await mustGet(real, job.id)).status, 'completed');
    } finally {
      await real.close();
    }
  });
});
