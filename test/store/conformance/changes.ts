import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  T0,
  OWNER,
  LEASE_MS,
  newJob,
  insertOk,
  insertOne,
  mustGet,
  claimRequest,
  claimJobs,
  claimOne,
  completed,
  handlerError,
  finishOne,
  assertCountsExact,
} from '../../support/store-fixtures.js';
import { type OpenStore, changes, invalid } from './context.js';

/** Changes a client asks for (cancel, retry, remove) and purging finished jobs. */
export function changesFacet(openStore: OpenStore): void {
  describe('cancel, retry, remove', () => {
    it('cancels a queued job and never hands it out', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store);
      clock.set(T0 + 4);
      const result = changes(await store.cancel(job.id));
      assert.equal(result.job.status, 'cancelled');
      assert.deepEqual(result.job.error, { code: 'cancelled', message: 'cancelled by request', attempt: 0 });
      assert.equal(result.job.finishedAt, T0 + 4);
      assert.deepEqual(result.others, []);
      assert.deepEqual(await store.get(job.id), result.job);
      assert.deepEqual(await store.claim(claimRequest(5)), []);
      await assertCountsExact(store);
    });

    it('cancels a running job (its attempt number in the error) and a scheduled one', async () => {
      const { store, clock } = await openStore();
      const running = await insertOne(store);
      const scheduled = await insertOne(store, { runAt: T0 + 100 });
      const attempt = await claimOne(store);
      const r = changes(await store.cancel(running.id));
      assert.equal(r.job.status, 'cancelled');
      assert.equal(r.job.error?.attempt, 1);
      assert.equal(await finishOne(store, attempt, completed(1)), null);
      assert.deepEqual(await store.heartbeat(OWNER, [running.id], LEASE_MS), [running.id]);
      changes(await store.cancel(scheduled.id));
      assert.equal(await store.nextDueAt(), null);
      clock.set(T0 + 1000);
      assert.deepEqual(await store.claim(claimRequest(5)), []);
      await assertCountsExact(store);
    });

    it('cancels a retrying job, failing its waiting dependent', async () => {
      const { store } = await openStore();
      const parent = await insertOne(store);
      const waiting = await insertOne(store, { dependsOn: [parent.id] });
      const attempt = await claimOne(store);
      await finishOne(store, attempt, { kind: 'failed', error: handlerError(1), retryAt: T0 + 100 });
      assert.equal((await mustGet(store, parent.id)).status, 'retrying');
      const cancelled = changes(await store.cancel(parent.id));
      assert.equal(cancelled.job.status, 'cancelled');
      assert.deepEqual(
        cancelled.others.map((j) => [j.id, j.status]),
        [[waiting.id, 'failed']],
      );
      assert.equal(await store.nextDueAt(), null);
      await assertCountsExact(store);
    });

    it('fails the dependents of a cancelled job, transitively', async () => {
      const { store } = await openStore();
      const a = await insertOne(store);
      const b = await insertOne(store, { dependsOn: [a.id] });
      const c = await insertOne(store, { dependsOn: [b.id] });
      const result = changes(await store.cancel(a.id));
      assert.deepEqual(
        result.others.map((j) => [j.id, j.status, j.error?.code]),
        [
          [b.id, 'failed', 'dependency_failed'],
          [c.id, 'failed', 'dependency_failed'],
        ],
      );
      assert.match(result.others[0]?.error?.message ?? '', /cancelled/);
      assert.match(result.others[1]?.error?.message ?? '', new RegExp(`${b.id} failed`));
      await assertCountsExact(store);
    });

    it('refuses to cancel a finished job and answers null for a missing one', async () => {
      const { store } = await openStore();
      const job = await insertOne(store);
      await finishOne(store, await claimOne(store), completed(null));
      const refused = invalid(await store.cancel(job.id));
      assert.equal(refused.status, 'completed');
      assert.match(refused.message, /job is completed; only a job that is not finished can be cancelled/);
      assert.equal(await store.cancel('missing'), null);
      assert.equal((await mustGet(store, job.id)).status, 'completed');
    });

    it('retries a failed job with a fresh attempt budget, keeping the error', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 1 });
      const attempt = await claimOne(store);
      const error = handlerError(1);
      await finishOne(store, attempt, { kind: 'failed', error, retryAt: null });
      clock.set(T0 + 50);
      const retried = changes(await store.retry(job.id));
      assert.equal(retried.job.status, 'queued');
      assert.equal(retried.job.attempts, 0);
      assert.deepEqual(retried.job.error, error);
      assert.equal(retried.job.finishedAt, null);
      assert.equal(retried.job.result, null);
      assert.equal(retried.job.readyAt, T0 + 50);
      assert.deepEqual(await store.get(job.id), retried.job);
      await assertCountsExact(store);
      const again = await claimOne(store);
      assert.equal(again.id, job.id);
      assert.equal(again.attempts, 1);
    });

    it('retries a cancelled job into waiting when its dependencies are not all completed', async () => {
      const { store } = await openStore();
      const parent = await insertOne(store);
      const child = await insertOne(store, { dependsOn: [parent.id] });
      changes(await store.cancel(child.id));
      assert.equal(changes(await store.retry(child.id)).job.status, 'waiting');
      const attempt = await claimOne(store);
      assert.equal(attempt.id, parent.id);
      assert.deepEqual(await finishOne(store, attempt, completed(1)), { status: 'completed', others: 1 });
      assert.equal((await mustGet(store, child.id)).status, 'queued');
      await assertCountsExact(store);
      const claimed = await claimOne(store);
      assert.deepEqual(claimed.parents, [{ id: parent.id, type: 'test.echo', result: 1 }]);
    });

    it('refuses to retry a job that is not failed or cancelled, or whose dependency is gone or failed', async () => {
      const { store } = await openStore();
      const queued = await insertOne(store);
      assert.equal(invalid(await store.retry(queued.id)).status, 'queued');
      const attempt = await claimOne(store);
      assert.equal(invalid(await store.retry(queued.id)).status, 'running');
      await finishOne(store, attempt, completed(1));
      assert.match(invalid(await store.retry(queued.id)).message, /completed/);
      assert.equal(await store.retry('missing'), null);

      const parent = await insertOne(store);
      const child = await insertOne(store, { dependsOn: [parent.id] });
      changes(await store.cancel(parent.id));
      assert.equal((await mustGet(store, child.id)).status, 'failed');
      const parentCancelled = invalid(await store.retry(child.id));
      assert.match(parentCancelled.message, new RegExp(`${parent.id} is cancelled`));
      assert.equal(await store.remove(parent.id), 'removed');
      const gone = invalid(await store.retry(child.id));
      assert.equal(gone.status, 'failed');
      assert.match(gone.message, new RegExp(parent.id));
      await assertCountsExact(store);
    });

    it('does not hand out a cancelled-then-retried job twice or out of order', async () => {
      const { store, clock } = await openStore();
      const a = await insertOne(store);
      clock.set(T0 + 1);
      const b = await insertOne(store);
      clock.set(T0 + 2);
      changes(await store.cancel(a.id));
      clock.set(T0 + 3);
      changes(await store.retry(a.id));
      const claimed = await claimJobs(store, 10);
      assert.deepEqual(
        claimed.map((j) => j.id),
        [b.id, a.id],
      );
      await assertCountsExact(store);
    });

    it('removes a finished job and refuses to remove one that is not', async () => {
      const { store } = await openStore();
      const job = await insertOne(store);
      assert.equal(invalid(await store.remove(job.id)).status, 'queued');
      await claimOne(store);
      assert.equal(invalid(await store.remove(job.id)).status, 'running');
      changes(await store.cancel(job.id));
      assert.equal(await store.remove(job.id), 'removed');
      assert.equal(await store.get(job.id), null);
      assert.equal(await store.remove(job.id), null);
      await assertCountsExact(store);
    });

    it('gives a dependent whose completed parent was removed a null result for it', async () => {
      const { store } = await openStore();
      const parent = await insertOne(store, { type: 'test.parent' });
      const other = await insertOne(store);
      const child = await insertOne(store, { dependsOn: [parent.id, other.id] });
      const [p, o] = await claimJobs(store, 2);
      assert.ok(p && o);
      await finishOne(store, p, completed('gone soon'));
      assert.equal(await store.remove(parent.id), 'removed');
      await finishOne(store, o, completed('kept'));
      const claimed = await claimOne(store);
      assert.equal(claimed.id, child.id);
      assert.deepEqual(claimed.parents, [
        { id: parent.id, type: '', result: null },
        { id: other.id, type: 'test.echo', result: 'kept' },
      ]);
    });
  });

  describe('purge', () => {
    it('deletes finished jobs of one status that finished more than ageMs ago', async () => {
      const { store, clock } = await openStore();
      const old = await insertOne(store);
      const recent = await insertOne(store);
      const failed = await insertOne(store);
      const live = await insertOne(store);
      const [a, b, c] = await claimJobs(store, 3);
      assert.ok(a && b && c);
      clock.set(T0 + 10);
      await finishOne(store, a, completed(1));
      await finishOne(store, c, { kind: 'failed', error: handlerError(1), retryAt: null });
      clock.set(T0 + 1000);
      await finishOne(store, b, completed(1));
      clock.set(T0 + 1500);
      assert.equal(await store.purge('completed', 1000, 100), 1);
      assert.equal(await store.get(old.id), null);
      assert.ok(await store.get(recent.id));
      assert.ok(await store.get(failed.id));
      assert.ok(await store.get(live.id));
      assert.equal(await store.purge('cancelled', 1000, 100), 0);
      assert.equal(await store.purge('failed', 1000, 100), 1);
      assert.equal(await store.purge('failed', 1000, 100), 0);
      assert.equal(await store.purge('completed', 1000, 100), 0);
      assert.equal(await store.purge('completed', 0, 100), 1);
      assert.equal((await mustGet(store, live.id)).status, 'queued');
      await assertCountsExact(store);
    });

    it('purges in chunks of at most `limit`', async () => {
      const { store, clock } = await openStore();
      await insertOk(
        store,
        Array.from({ length: 2300 }, () => newJob()),
      );
      const claimed = await claimJobs(store, 2300);
      assert.equal(claimed.length, 2300);
      clock.set(T0 + 1);
      const answers = await store.finish(
        claimed.map((j) => ({ id: j.id, attempt: j.attempts, owner: OWNER, outcome: completed(j.id) })),
      );
      assert.equal(answers.filter((a) => a?.status === 'completed').length, 2300);
      clock.set(T0 + 2);
      const chunks: number[] = [];
      for (;;) {
        const purged = await store.purge('completed', 0, 1000);
        chunks.push(purged);
        if (purged === 0) break;
      }
      assert.deepEqual(chunks, [1000, 1000, 300, 0]);
      assert.equal((await store.counts()).byStatus.completed, 0);
      assert.deepEqual((await store.list({ limit: 10 })).jobs, []);
      await assertCountsExact(store);
    });
  });
}
