import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ClaimedJob } from '../../../src/store/store.js';
import type { Job, JobStatus, JobSummary } from '../../../src/contract/job.js';
import {
  allJobs,
  assertCountsExact,
  claimJobs,
  claimOne,
  completed,
  finishOne,
  handlerError,
  insertOk,
  insertOne,
  LEASE_MS,
  mustGet,
  newJob,
  rescueOnce,
  T0,
} from '../../support/store-fixtures.js';
import { changes, type OpenStore } from './context.js';

/** Reads: listing jobs and counting them. */
export function readsFacet(openStore: OpenStore): void {
  describe('list', () => {
    it('pages newest first with a cursor, without payload or result', async () => {
      const { store } = await openStore();
      const jobs = await insertOk(
        store,
        Array.from({ length: 7 }, () => newJob()),
      );
      const ids = jobs.map((j) => j.id).reverse();
      const seen: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      for (;;) {
        const page = await store.list({ limit: 3, ...(cursor === undefined ? {} : { cursor }) });
        pages++;
        for (const item of page.jobs) {
          assert.equal('payload' in item, false);
          assert.equal('result' in item, false);
          assert.equal('payloadText' in item, false);
          seen.push(item.id);
        }
        if (page.nextCursor === null) break;
        cursor = page.nextCursor;
      }
      assert.equal(pages, 3);
      assert.deepEqual(seen, ids);
      assert.equal((await store.list({ limit: 7 })).nextCursor, null);
      assert.deepEqual(await store.list({ limit: 0 }), { jobs: [], nextCursor: null });
    });

    it('filters by statuses and type across pages', async () => {
      const { store } = await openStore();
      const made: Job[] = [];
      for (let i = 0; i < 12; i++) {
        made.push(await insertOne(store, { type: i % 2 === 0 ? 'test.even' : 'test.odd' }));
      }
      for (const job of made.filter((_, i) => i % 3 === 0)) changes(await store.cancel(job.id));
      await claimJobs(store, 2);
      const all = await allJobs(store);
      const expect = (pred: (j: JobSummary) => boolean) =>
        all
          .filter(pred)
          .map((j) => j.id)
          .sort()
          .reverse();
      const collect = async (filter: { statuses?: JobStatus[]; type?: string }) => {
        const ids: string[] = [];
        let cursor: string | undefined;
        for (;;) {
          const page = await store.list({ ...filter, limit: 2, ...(cursor === undefined ? {} : { cursor }) });
          assert.ok(page.jobs.length <= 2);
          ids.push(...page.jobs.map((j) => j.id));
          if (page.nextCursor === null) return ids;
          cursor = page.nextCursor;
        }
      };
      const queued = expect((j) => j.status === 'queued');
      assert.equal(queued.length, 6);
      assert.deepEqual(await collect({ statuses: ['queued'] }), queued);
      assert.deepEqual(
        await collect({ statuses: ['cancelled', 'running'] }),
        expect((j) => j.status === 'cancelled' || j.status === 'running'),
      );
      assert.deepEqual(
        await collect({ type: 'test.odd' }),
        expect((j) => j.type === 'test.odd'),
      );
      assert.deepEqual(
        await collect({ type: 'test.even', statuses: ['queued', 'cancelled'] }),
        expect((j) => j.type === 'test.even' && (j.status === 'queued' || j.status === 'cancelled')),
      );
      assert.deepEqual(
        await collect({ statuses: [] }),
        expect(() => true),
      );
      assert.deepEqual(await collect({ type: 'test.none' }), []);
    });

    it('rejects a cursor it did not hand out', async () => {
      const { store } = await openStore();
      await insertOne(store);
      for (const cursor of ['!!not a cursor!!', '', 'a b']) {
        await assert.rejects(store.list({ limit: 5, cursor }), { name: 'StoreError', code: 'invalid_cursor' });
      }
    });
  });

  describe('counts', () => {
    it('stays exact through every kind of transition', async () => {
      const { store, clock } = await openStore();
      const check = () => assertCountsExact(store);
      await check();
      const jobs = await insertOk(store, [
        newJob({ priority: 9 }),
        newJob({ priority: 2 }),
        newJob({ priority: 2, runAt: T0 + 100 }),
        newJob({ priority: 5, maxAttempts: 1 }),
      ]);
      const [p9, p2, delayed, once] = jobs as [Job, Job, Job, Job];
      const waiting = await insertOne(store, { dependsOn: [p9.id] });
      await check();
      assert.equal((await store.counts()).oldestQueuedReadyAt, T0);
      clock.set(T0 + 1);
      const first = await claimOne(store);
      assert.equal(first.id, p9.id);
      await check();
      clock.set(T0 + 2);
      await finishOne(store, first, completed(1));
      await check();
      assert.equal((await mustGet(store, waiting.id)).status, 'queued');
      clock.set(T0 + 3);
      changes(await store.cancel(p2.id));
      await check();
      clock.set(T0 + 100);
      const claimed = await claimJobs(store, 10);
      assert.deepEqual(claimed.map((j) => j.id).sort(), [delayed.id, once.id, waiting.id].sort());
      await check();
      clock.set(T0 + 101);
      const byId = new Map(claimed.map((j) => [j.id, j]));
      const error = handlerError(1);
      await finishOne(store, byId.get(delayed.id) as ClaimedJob, { kind: 'failed', error, retryAt: T0 + 200 });
      await finishOne(store, byId.get(once.id) as ClaimedJob, { kind: 'failed', error, retryAt: null });
      await finishOne(store, byId.get(waiting.id) as ClaimedJob, { kind: 'released', error, retryAt: T0 + 150 });
      await check();
      clock.set(T0 + 102);
      changes(await store.retry(once.id));
      changes(await store.retry(p2.id));
      await check();
      assert.equal((await store.counts()).oldestQueuedReadyAt, T0 + 102);
      assert.equal(await store.remove(p9.id), 'removed');
      await check();
      clock.set(T0 + 300);
      assert.equal((await claimJobs(store, 10)).length, 4);
      await check();
      const counts = await store.counts();
      assert.equal(counts.byStatus.running, 4);
      assert.equal(counts.pending, 0);
      assert.equal(counts.oldestQueuedReadyAt, null);
      clock.set(T0 + 300 + LEASE_MS + 1);
      assert.equal(await rescueOnce(store), 4);
      await check();
      assert.equal(await store.purge('completed', 0, 100), 0);
      assert.equal(await store.purge('cancelled', 0, 100), 0);
      await check();
    });
  });
}
