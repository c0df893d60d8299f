import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NewBatch } from '../../../src/contract/batch.js';
import type { NewJob } from '../../../src/contract/job.js';
import type { InsertOutcome, JobStore } from '../../../src/store/store.js';
import {
  claimOne,
  completed,
  finishOne,
  handlerError,
  insertOne,
  newJob,
  nextId,
  OWNER,
  T0,
} from '../../support/store-fixtures.js';
import { changes, type OpenStore } from './context.js';

const ZERO = { waiting: 0, scheduled: 0, queued: 0, running: 0, retrying: 0, completed: 0, failed: 0, cancelled: 0 };

async function insertBatch(store: JobStore, jobs: NewJob[], batch: NewBatch): Promise<InsertOutcome[]> {
  for (const job of jobs) job.batch = batch.id;
  const result = await store.insert(jobs, batch);
  assert.ok(result.ok, `insert failed: ${JSON.stringify(result)}`);
  return result.outcomes;
}

/** Batches: the row an insert writes with its jobs, counts by status, the finish time, the list filter. */
export function batchesFacet(openStore: OpenStore): void {
  describe('batches', () => {
    it('counts the jobs a batch created by status and is finished when the last of them is terminal', async () => {
      const { store, clock } = await openStore();
      const trace = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
      const batch = { id: nextId(), createdAt: T0, callback: null, trace };
      const first = newJob();
      const outcomes = await insertBatch(store, [first, newJob({ dependsOn: [first.id] })], batch);
      assert.deepEqual(
        outcomes.map((o) => [o.created, o.job.batch]),
        [
          [true, batch.id],
          [true, batch.id],
        ],
      );
      assert.equal((await store.get(first.id))?.batch, batch.id);
      assert.deepEqual(await store.batch(batch.id), {
        id: batch.id,
        total: 2,
        counts: { ...ZERO, queued: 1, waiting: 1 },
        createdAt: T0,
        finishedAt: null,
        callback: null,
        trace,
      });

      clock.set(T0 + 10);
      const attempt = await claimOne(store);
      await finishOne(store, attempt, completed(1));
      assert.deepEqual((await store.batch(batch.id))?.counts, { ...ZERO, completed: 1, queued: 1 });
      assert.equal((await store.batch(batch.id))?.finishedAt, null);

      clock.set(T0 + 20);
      const second = await claimOne(store);
      await finishOne(store, second, { kind: 'failed', error: handlerError(1), retryAt: null });
      assert.deepEqual(await store.batch(batch.id), {
        id: batch.id,
        total: 2,
        counts: { ...ZERO, completed: 1, failed: 1 },
        createdAt: T0,
        finishedAt: T0 + 20,
        callback: null,
        trace,
      });

      // A retry opens the batch again; its end closes it again.
      clock.set(T0 + 30);
      changes(await store.retry(second.id));
      assert.equal((await store.batch(batch.id))?.finishedAt, null);
      changes(await store.cancel(second.id));
      assert.equal((await store.batch(batch.id))?.finishedAt, T0 + 30);
    });

    it('keeps when it finished once its jobs are removed, with a callback or without', async () => {
      const { store, clock } = await openStore();
      for (const callback of [null, { url: 'https://hooks.example.com/b' }]) {
        const batch = { id: nextId(), createdAt: T0, callback };
        const jobs = [newJob(), newJob()];
        await insertBatch(store, jobs, batch);
        clock.set(T0 + 10);
        await finishOne(store, await claimOne(store), completed(1));
        clock.set(T0 + 20);
        await finishOne(store, await claimOne(store), completed(2));
        assert.equal((await store.batch(batch.id))?.finishedAt, T0 + 20);
        // The job that finished last goes first; then the other.
        for (const job of [...jobs].reverse()) {
          assert.equal(await store.remove(job.id as string), 'removed');
          assert.equal((await store.batch(batch.id))?.finishedAt, T0 + 20, `callback ${JSON.stringify(callback)}`);
        }
        assert.deepEqual((await store.batch(batch.id))?.counts, ZERO);
        clock.set(T0);
      }
    });

    it('does not count an item answered by an existing job, which keeps its own batch', async () => {
      const { store } = await openStore();
      const earlier = await insertOne(store, { idempotencyKey: 'k' });
      const live = await insertOne(store, { dedupeKey: 'd' });
      const batch = { id: nextId(), createdAt: T0, callback: null };
      const fresh = newJob();
      const outcomes = await insertBatch(
        store,
        [newJob({ idempotencyKey: 'k' }), newJob({ dedupeKey: 'd' }), fresh],
        batch,
      );
      assert.deepEqual(
        outcomes.map((o) => [o.created, o.job.id, o.job.batch]),
        [
          [false, earlier.id, null],
          [false, live.id, null],
          [true, fresh.id, batch.id],
        ],
      );
      const read = await store.batch(batch.id);
      assert.equal(read?.total, 1);
      assert.deepEqual(read?.counts, { ...ZERO, queued: 1 });
    });

    it('is finished when it is made if none of its jobs is left to run', async () => {
      const { store, clock } = await openStore();
      const parent = await insertOne(store);
      changes(await store.cancel(parent.id));
      clock.set(T0 + 5);
      const replayOnly = { id: nextId(), createdAt: T0 + 5, callback: null };
      await insertBatch(store, [newJob({ dependsOn: [parent.id] })], replayOnly);
      assert.deepEqual(await store.batch(replayOnly.id), {
        id: replayOnly.id,
        total: 1,
        counts: { ...ZERO, failed: 1 },
        createdAt: T0 + 5,
        finishedAt: T0 + 5,
        callback: null,
        trace: null,
      });
    });

    it('lists the jobs of a batch, and knows no batch it did not make', async () => {
      const { store } = await openStore();
      await insertOne(store);
      const batch = { id: nextId(), createdAt: T0, callback: null };
      const jobs = [newJob(), newJob(), newJob()];
      await insertBatch(store, jobs, batch);
      const page = await store.list({ batch: batch.id, limit: 2 });
      assert.deepEqual(
        page.jobs.map((job) => job.id),
        [jobs[2]?.id, jobs[1]?.id],
      );
      const rest = await store.list({ batch: batch.id, limit: 2, cursor: page.nextCursor as string });
      assert.deepEqual(
        rest.jobs.map((job) => job.id),
        [jobs[0]?.id],
      );
      assert.deepEqual((await store.list({ batch: batch.id, statuses: ['running'], limit: 10 })).jobs, []);
      assert.equal(await store.batch(nextId()), null);
      assert.equal(await store.batch('not-a-batch'), null);
      assert.deepEqual((await store.list({ batch: 'not-a-batch', limit: 10 })).jobs, []);
    });

    it('makes one batch.finished delivery with the write that ends its last job, never a second', async () => {
      const { store, clock } = await openStore();
      const HOOK = 'https://hooks.example.com/batch';
      const batch = { id: nextId(), createdAt: T0, callback: { url: HOOK } };
      await insertBatch(store, [newJob(), newJob({ callback: { url: HOOK, events: ['failed'] } })], batch);
      assert.deepEqual((await store.batch(batch.id))?.callback, { url: HOOK });
      const first = await claimOne(store);
      clock.set(T0 + 10);
      await finishOne(store, first, completed(1));
      assert.deepEqual(await store.claimDeliveries(OWNER, 10_000, 10), [], 'one job is left');
      const second = await claimOne(store);
      clock.set(T0 + 20);
      // The last job fails: its own delivery and the batch's are made with that write.
      await finishOne(store, second, { kind: 'failed', error: handlerError(1), retryAt: null });
      const due = await store.claimDeliveries(OWNER, 10_000, 10);
      const ofBatch = due.find((d) => d.event === 'batch.finished');
      assert.ok(ofBatch, JSON.stringify(due));
      assert.deepEqual(due.map((d) => d.event).sort(), ['batch.finished', 'failed']);
      assert.equal(ofBatch.jobId, batch.id);
      assert.equal(ofBatch.url, HOOK);
      assert.equal(ofBatch.attempt, 1);
      assert.equal(ofBatch.job, null);
      assert.deepEqual(ofBatch.batch, {
        id: batch.id,
        total: 2,
        counts: { ...ZERO, completed: 1, failed: 1 },
        createdAt: T0,
        finishedAt: T0 + 20,
        callback: { url: HOOK },
        trace: null,
      });
      for (const delivery of due) {
        assert.equal(
          await store.recordDeliveryAttempt({
            id: delivery.id,
            attempt: delivery.attempt,
            owner: OWNER,
            body: '{}',
            httpStatus: 200,
            error: null,
            outcome: 'delivered',
            retryInMs: 0,
          }),
          true,
        );
      }
      // Opened again by a retry and finished again: no second delivery of the batch.
      changes(await store.retry(second.id));
      changes(await store.cancel(second.id));
      assert.equal((await store.batch(batch.id))?.finishedAt, T0 + 20);
      assert.deepEqual(await store.claimDeliveries(OWNER, 10_000, 10), []);
      assert.equal(await store.nextDeliveryAt(), null);
    });

    it('makes the delivery with the insert of a batch with none of its jobs left to run', async () => {
      const { store } = await openStore();
      const parent = await insertOne(store);
      changes(await store.cancel(parent.id));
      const batch = { id: nextId(), createdAt: T0, callback: { url: 'https://hooks.example.com/b' } };
      await insertBatch(store, [newJob({ dependsOn: [parent.id] })], batch);
      const [due, ...more] = await store.claimDeliveries(OWNER, 10_000, 10);
      assert.equal(more.length, 0);
      assert.equal(due?.event, 'batch.finished');
      assert.deepEqual(due?.batch?.counts, { ...ZERO, failed: 1 });
    });

    it('writes no batch when the insert is refused', async () => {
      const { store } = await openStore(1);
      const batch = { id: nextId(), createdAt: T0, callback: null };
      const jobs = [newJob(), newJob()];
      for (const job of jobs) job.batch = batch.id;
      const result = await store.insert(jobs, batch);
      assert.equal(result.ok, false);
      assert.equal(await store.batch(batch.id), null);
    });
  });
}
