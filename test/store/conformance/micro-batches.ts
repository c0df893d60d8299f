import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type ClaimRequest } from '../../../src/store/store.js';
import {
  newJob,
  insertOk,
  insertOne,
  mustGet,
  claimRequest,
  claimOne,
  completed,
  finishOne,
  assertCountsExact,
} from '../../support/store-fixtures.js';
import type { OpenStore } from './context.js';

/** Claiming micro-batches of jobs. */
export function microBatchesFacet(openStore: OpenStore): void {
  describe('claim: micro-batches', () => {
    const micro = (
      overrides: Partial<NonNullable<ClaimRequest['micro']>> = {},
    ): NonNullable<ClaimRequest['micro']> => ({
      costs: new Map([['tiny', 0.1]]),
      budgetMs: 2,
      maxJobs: 100,
      solo: new Set(),
      ...overrides,
    });

    it('grows a batch of tiny jobs with the next best, and stops at the first that is not tiny', async () => {
      const { store } = await openStore();
      const [t1, t2, t3, big, t4, t5] = await insertOk(store, [
        newJob({ type: 'tiny' }),
        newJob({ type: 'tiny' }),
        newJob({ type: 'tiny' }),
        newJob({ type: 'big' }),
        newJob({ type: 'tiny' }),
        newJob({ type: 'tiny' }),
      ]);
      assert.ok(t1 && t2 && t3 && big && t4 && t5);
      const claimed = await store.claim(claimRequest(2, { micro: micro() }));
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [[t1.id, t2.id, t3.id], [big.id]],
      );
      for (const job of claimed.flat()) {
        assert.equal(job.status, 'running');
        assert.equal(job.attempts, 1);
        // Claimed, not started: a reader sees it as before its claim.
        const seen = await mustGet(store, job.id);
        assert.equal(seen.status, 'queued');
        assert.equal(seen.attempts, 0);
      }
      // The job that ended the batch was first in line for the next one; the rest wait.
      const rest = await store.claim(claimRequest(5, { micro: micro() }));
      assert.deepEqual(
        rest.map((batch) => batch.map((j) => j.id)),
        [[t4.id, t5.id]],
      );
      await assertCountsExact(store);
    });

    it('keeps priority order across batches: a better job that is not tiny stops the batch', async () => {
      const { store } = await openStore();
      const t1 = await insertOne(store, { type: 'tiny', priority: 9 });
      const big = await insertOne(store, { type: 'big', priority: 7 });
      const t2 = await insertOne(store, { type: 'tiny', priority: 5 });
      const claimed = await store.claim(claimRequest(3, { micro: micro() }));
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [[t1.id], [big.id], [t2.id]],
      );
    });

    it('starts a batch with a job that is not tiny and adds nothing to it', async () => {
      const { store } = await openStore();
      const [big, t1, t2] = await insertOk(store, [
        newJob({ type: 'big' }),
        newJob({ type: 'tiny' }),
        newJob({ type: 'tiny' }),
      ]);
      const claimed = await store.claim(claimRequest(1, { micro: micro() }));
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [[big?.id]],
      );
      const next = await store.claim(claimRequest(1, { micro: micro() }));
      assert.deepEqual(
        next.map((batch) => batch.map((j) => j.id)),
        [[t1?.id, t2?.id]],
      );
    });

    it('stops a batch at maxJobs', async () => {
      const { store } = await openStore();
      const jobs = await insertOk(
        store,
        Array.from({ length: 5 }, () => newJob({ type: 'tiny' })),
      );
      const ids = jobs.map((j) => j.id);
      const claimed = await store.claim(claimRequest(10, { micro: micro({ maxJobs: 2 }) }));
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [ids.slice(0, 2), ids.slice(2, 4), ids.slice(4)],
      );
    });

    it('stops a batch once its expected time reaches the budget', async () => {
      const { store } = await openStore();
      const jobs = await insertOk(
        store,
        Array.from({ length: 10 }, (_, i) => newJob({ type: i < 6 ? 'tiny' : 'small' })),
      );
      const ids = jobs.map((j) => j.id);
      const costs = new Map([
        ['tiny', 0.5],
        ['small', 1],
      ]);
      const claimed = await store.claim(claimRequest(10, { micro: micro({ costs, budgetMs: 2 }) }));
      // 4 × 0.5 ms, then 2 × 0.5 + 1 ms, then 2 × 1 ms: each batch's expected time is the budget.
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [ids.slice(0, 4), ids.slice(4, 7), ids.slice(7, 9), ids.slice(9)],
      );
    });

    it('runs a solo job alone, and a solo job ends the batch before it', async () => {
      const { store } = await openStore();
      const [t1, alone, t2, t3] = await insertOk(store, [
        newJob({ type: 'tiny' }),
        newJob({ type: 'tiny' }),
        newJob({ type: 'tiny' }),
        newJob({ type: 'tiny' }),
      ]);
      assert.ok(t1 && alone && t2 && t3);
      const claimed = await store.claim(claimRequest(3, { micro: micro({ solo: new Set([alone.id]) }) }));
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [[t1.id], [alone.id], [t2.id, t3.id]],
      );
    });

    it('hands each job of a batch its own parents', async () => {
      const { store } = await openStore();
      const parent = await insertOne(store, { type: 'big' });
      const [a, b] = await insertOk(store, [
        newJob({ type: 'tiny', dependsOn: [parent.id] }),
        newJob({ type: 'tiny' }),
      ]);
      assert.ok(a && b);
      assert.ok(await finishOne(store, await claimOne(store), completed('p')));
      const [batch] = await store.claim(claimRequest(1, { micro: micro() }));
      // `a` became ready when its parent completed, after `b`.
      assert.deepEqual(
        batch?.map((j) => [j.id, j.parents]),
        [
          [b.id, []],
          [a.id, [{ id: parent.id, type: 'big', result: 'p' }]],
        ],
      );
    });
  });
}
