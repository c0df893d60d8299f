import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { JobWire } from '../../../src/store/core/rows.js';
import { FinishedReads } from '../../../src/store/sqlite/finished-reads.js';

function wire(id: string, status: JobWire['status']): JobWire {
  return { id, status } as JobWire;
}

/** A read held until the test lets it answer. */
function heldRead(answer: JobWire | null): { read: () => Promise<JobWire | null>; answer: () => void } {
  let release: () => void = () => {};
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { read: () => gate.then(() => answer), answer: () => release() };
}

describe('the reads of finished jobs kept on the main thread', () => {
  it('keeps a finished job read, and never one still pending', async () => {
    const reads = new FinishedReads();
    await reads.read('a', async () => wire('a', 'completed'));
    await reads.read('b', async () => wire('b', 'queued'));
    assert.equal(reads.get('a')?.status, 'completed');
    assert.equal(reads.get('b'), undefined);
  });

  it('forgets a job that changes, and does not keep a read that was in flight while it changed', async () => {
    const reads = new FinishedReads();
    await reads.read('a', async () => wire('a', 'completed'));
    reads.changed('a');
    assert.equal(reads.get('a'), undefined, 'a retry or a removal forgets it');
    const held = heldRead(wire('a', 'completed'));
    const reading = reads.read('a', held.read);
    reads.changed('a');
    held.answer();
    assert.equal((await reading)?.status, 'completed', 'the read is answered as it was read');
    assert.equal(reads.get('a'), undefined, 'but not kept: it may be older than the change');
  });

  it('forgets every job on a purge, reads in flight included', async () => {
    const reads = new FinishedReads();
    await reads.read('a', async () => wire('a', 'failed'));
    const held = heldRead(wire('b', 'cancelled'));
    const reading = reads.read('b', held.read);
    reads.clear();
    held.answer();
    await reading;
    assert.equal(reads.get('a'), undefined);
    assert.equal(reads.get('b'), undefined);
  });
});
