import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { batchCallbackBody, batchOf, newBatchRow } from '../../../src/store/core/batches.js';

describe('batch rows', () => {
  it('counts the jobs an insert created, those not terminal remaining; none remaining is finished at once', () => {
    const batch = { id: 'b1', createdAt: 10, callback: { url: 'https://example.com/b' } };
    assert.deepEqual(newBatchRow(batch, ['queued', 'waiting', 'failed'], 20), {
      id: 'b1',
      total: 3,
      remaining: 2,
      created_at: 10,
      finished_at: null,
      callback: '{"url":"https://example.com/b"}',
      trace: null,
    });
    assert.deepEqual(newBatchRow({ ...batch, callback: null }, ['failed'], 20), {
      id: 'b1',
      total: 1,
      remaining: 0,
      created_at: 10,
      finished_at: 20,
      callback: null,
      trace: null,
    });
    assert.equal(newBatchRow(batch, [], 20).finished_at, 20);
  });

  it('lists every status in the counts, zeros included, from counts read as numbers or as text', () => {
    const row = { id: 'b1', total: 3, remaining: 1, created_at: 10, finished_at: null, callback: null, trace: null };
    assert.deepEqual(
      batchOf(row, [
        { status: 'completed', n: '2', last: '40' },
        { status: 'running', n: 1, last: null },
      ]),
      {
        id: 'b1',
        total: 3,
        counts: { waiting: 0, scheduled: 0, queued: 0, running: 1, retrying: 0, completed: 2, failed: 0, cancelled: 0 },
        createdAt: 10,
        finishedAt: null,
        callback: null,
        trace: null,
      },
    );
  });

  it('is finished once no job is left to run, at the latest finish of its jobs and of the row', () => {
    const row = { id: 'b1', total: 3, remaining: 3, created_at: 10, finished_at: null, callback: null, trace: null };
    const done = [
      { status: 'completed' as const, n: 2, last: '40' },
      { status: 'failed' as const, n: 1, last: 55 },
    ];
    assert.equal(batchOf(row, done).finishedAt, 55);
    // The row holds the latest finish of jobs since deleted, or the store's own count's.
    assert.equal(batchOf({ ...row, finished_at: 70 }, done).finishedAt, 70);
    assert.equal(batchOf({ ...row, finished_at: 30 }, done).finishedAt, 55);
    // Every job deleted: the row's time stands.
    assert.equal(batchOf({ ...row, finished_at: 70 }, []).finishedAt, 70);
    // One job left to run: not finished, whatever the row says.
    assert.equal(
      batchOf({ ...row, finished_at: 70 }, [...done, { status: 'retrying', n: 1, last: null }]).finishedAt,
      null,
    );
  });

  it('makes the body of a batch callback: the event and the batch', () => {
    assert.equal(batchCallbackBody({ id: 'b1' }), '{"event":"batch.finished","batch":{"id":"b1"}}');
  });
});
