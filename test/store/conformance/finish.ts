import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { JobError } from '../../../src/contract/job.js';
import {
  assertCountsExact,
  claimJobs,
  claimOne,
  claimRequest,
  completed,
  finishOne,
  handlerError,
  insertOk,
  insertOne,
  LEASE_MS,
  mustGet,
  newJob,
  OWNER,
  T0,
} from '../../support/store-fixtures.js';
import { changes, type OpenStore } from './context.js';

/** Finish: what an attempt's outcome makes of its job, behind the fence. */
export function finishFacet(openStore: OpenStore): void {
  describe('finish', () => {
    it('completes a job: result, finishedAt, lease gone', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store);
      const attempt = await claimOne(store);
      clock.set(T0 + 9);
      assert.deepEqual(await finishOne(store, attempt, completed({ ok: 1 })), { status: 'completed', others: 0 });
      const done = await mustGet(store, job.id);
      assert.equal(done.status, 'completed');
      assert.deepEqual(done.result, { ok: 1 });
      assert.equal(done.finishedAt, T0 + 9);
      assert.equal(done.attempts, 1);
      assert.equal(done.error, null);
      assert.deepEqual(await store.heartbeat(OWNER, [job.id], LEASE_MS), [job.id]);
      clock.advance(LEASE_MS * 2);
      assert.deepEqual(await store.expiredLeases(10), []);
      await assertCountsExact(store);
    });

    it('refuses an outcome from an owner, attempt or job that no longer holds the lease', async () => {
      const { store } = await openStore();
      const job = await insertOne(store);
      const attempt = await claimOne(store, 'w1');
      const ok = completed(1);
      assert.equal(await finishOne(store, attempt, ok, 'w2'), null);
      assert.equal(await finishOne(store, { id: job.id, attempts: 2 }, ok, 'w1'), null);
      assert.equal(await finishOne(store, { id: 'missing', attempts: 1 }, ok, 'w1'), null);
      changes(await store.cancel(job.id));
      assert.equal(await finishOne(store, attempt, ok, 'w1'), null);
      assert.equal((await mustGet(store, job.id)).status, 'cancelled');

      await insertOne(store);
      const other = await claimOne(store, 'w1');
      assert.ok(await finishOne(store, other, ok, 'w1'));
      assert.equal(await finishOne(store, other, ok, 'w1'), null);
      await assertCountsExact(store);
    });

    it('answers each item of one call on its own', async () => {
      const { store } = await openStore();
      await insertOk(store, [newJob(), newJob(), newJob({ maxAttempts: 1 })]);
      const [a, b, c] = await claimJobs(store, 3);
      assert.ok(a && b && c);
      const answers = await store.finish([
        { id: a.id, attempt: 1, owner: OWNER, outcome: completed('a') },
        { id: b.id, attempt: 1, owner: 'someone-else', outcome: completed('b') },
        { id: c.id, attempt: 1, owner: OWNER, outcome: { kind: 'failed', error: handlerError(1), retryAt: null } },
        { id: 'missing', attempt: 1, owner: OWNER, outcome: completed('x') },
      ]);
      assert.deepEqual(answers, [{ status: 'completed', others: 0 }, null, { status: 'failed', others: 0 }, null]);
      assert.equal((await mustGet(store, b.id)).status, 'running');
      await assertCountsExact(store);
    });

    it('retries a failed attempt at retryAt, and counts the attempts', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 3 });
      const attempt = await claimOne(store);
      clock.set(T0 + 1);
      const error = handlerError(1);
      const answer = await finishOne(store, attempt, { kind: 'failed', error, retryAt: T0 + 500 });
      assert.deepEqual(answer, { status: 'retrying', others: 0 });
      const failed = await mustGet(store, job.id);
      assert.equal(failed.status, 'retrying');
      assert.equal(failed.runAt, T0 + 500);
      assert.deepEqual(failed.error, error);
      assert.equal(failed.attempts, 1);
      assert.equal(failed.finishedAt, null);
      assert.equal(await store.nextDueAt(), T0 + 500);
      await assertCountsExact(store);

      clock.set(T0 + 499);
      assert.deepEqual(await store.claim(claimRequest(1)), []);
      clock.set(T0 + 500);
      const again = await claimOne(store);
      assert.equal(again.id, job.id);
      assert.equal(again.attempts, 2);
      assert.equal(again.runAt, null);
      assert.deepEqual(again.error, error);
      await assertCountsExact(store);
    });

    it('fails a job for good when retryAt is null', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store);
      const attempt = await claimOne(store);
      clock.set(T0 + 3);
      const error: JobError = { code: 'timeout', message: 'too slow', attempt: 1 };
      assert.deepEqual(await finishOne(store, attempt, { kind: 'failed', error, retryAt: null }), {
        status: 'failed',
        others: 0,
      });
      const failed = await mustGet(store, job.id);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.finishedAt, T0 + 3);
      assert.equal(failed.runAt, null);
      assert.deepEqual(failed.error, error);
      assert.deepEqual(await store.claim(claimRequest(1)), []);
      await assertCountsExact(store);
    });

    it('gives a released job its attempt back', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 1 });
      const attempt = await claimOne(store);
      clock.set(T0 + 1);
      const error: JobError = { code: 'interrupted', message: 'shutting down', attempt: 1 };
      assert.deepEqual(await finishOne(store, attempt, { kind: 'released', error, retryAt: T0 + 10 }), {
        status: 'retrying',
        others: 0,
      });
      const released = await mustGet(store, job.id);
      assert.equal(released.status, 'retrying');
      assert.equal(released.attempts, 0);
      assert.equal(released.runAt, T0 + 10);
      assert.deepEqual(released.error, error);
      clock.set(T0 + 10);
      const again = await claimOne(store);
      assert.equal(again.attempts, 1);
      await assertCountsExact(store);
    });

    it('releases a dependent when its last dependency completes', async () => {
      const { store, clock } = await openStore();
      const p1 = await insertOne(store);
      const p2 = await insertOne(store);
      const child = await insertOne(store, { dependsOn: [p1.id, p2.id] });
      const delayed = await insertOne(store, { dependsOn: [p1.id], runAt: T0 + 10_000 });
      const [a1, a2] = await claimJobs(store, 2);
      assert.ok(a1 && a2);
      clock.set(T0 + 5);
      assert.deepEqual(await finishOne(store, a1, completed(1)), { status: 'completed', others: 1 });
      assert.equal((await mustGet(store, delayed.id)).status, 'scheduled');
      assert.equal((await mustGet(store, child.id)).status, 'waiting');
      await assertCountsExact(store);
      clock.set(T0 + 6);
      assert.deepEqual(await finishOne(store, a2, completed(2)), { status: 'completed', others: 1 });
      const released = await mustGet(store, child.id);
      assert.equal(released.status, 'queued');
      assert.equal(released.readyAt, T0 + 6);
      assert.equal(await store.nextDueAt(), T0 + 10_000);
      await assertCountsExact(store);
      const claimed = await claimOne(store);
      assert.equal(claimed.id, child.id);
      assert.deepEqual(
        claimed.parents.map((p) => [p.id, p.result]),
        [
          [p1.id, 1],
          [p2.id, 2],
        ],
      );
    });

    it('fails the dependents of a failed job, transitively', async () => {
      const { store, clock } = await openStore();
      const a = await insertOne(store);
      const b = await insertOne(store, { dependsOn: [a.id] });
      const c = await insertOne(store, { dependsOn: [b.id] });
      const done = await insertOne(store, { priority: 0 });
      const d = await insertOne(store, { dependsOn: [done.id, a.id] });
      const attempt = await claimOne(store);
      assert.equal(attempt.id, a.id);
      clock.set(T0 + 1);
      const answer = await finishOne(store, attempt, { kind: 'failed', error: handlerError(1), retryAt: null });
      assert.deepEqual(answer, { status: 'failed', others: 3 });
      for (const id of [b.id, c.id, d.id]) {
        const job = await mustGet(store, id);
        assert.equal(job.status, 'failed');
        assert.equal(job.error?.code, 'dependency_failed');
        assert.equal(job.error?.attempt, 0);
        assert.equal(job.finishedAt, T0 + 1);
      }
      assert.match((await mustGet(store, c.id)).error?.message ?? '', new RegExp(b.id));
      assert.equal((await mustGet(store, done.id)).status, 'queued');
      await assertCountsExact(store);
    });

    it('does not fail dependents on a retryable failure', async () => {
      const { store } = await openStore();
      const a = await insertOne(store);
      const b = await insertOne(store, { dependsOn: [a.id] });
      const attempt = await claimOne(store);
      const answer = await finishOne(store, attempt, { kind: 'failed', error: handlerError(1), retryAt: T0 + 1 });
      assert.deepEqual(answer, { status: 'retrying', others: 0 });
      assert.equal((await mustGet(store, b.id)).status, 'waiting');
    });
  });
}
