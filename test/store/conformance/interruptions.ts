import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  assertCountsExact,
  claimOneUnstarted,
  finishOne,
  handlerError,
  insertOne,
  MAX_INTERRUPTIONS,
  mustGet,
  rescueOnce,
  startAttempts,
  T0,
} from '../../support/store-fixtures.js';
import { changes, type OpenStore } from './context.js';

/**
 * Interruptions: every rescue of an attempt (its server died or stalled while it held it)
 * counts on the job, whether the attempt counted or was given back; the rescue that makes
 * KILN_MAX_INTERRUPTIONS fails the job (`too_many_interruptions`), whatever attempts it
 * has left. The store counts, the rescuer's retry policy decides.
 */
export function interruptionsFacet(openStore: OpenStore): void {
  describe('interruptions', () => {
    it('counts every rescue, started or not, and fails the job at the limit whatever attempts it has left', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 10 });
      assert.equal(job.interruptions, 0);
      let now = T0;

      // Server 1 dies before the start of its attempt is recorded: given back, uncounted, interrupted once.
      const first = await claimOneUnstarted(store, 'server-1', 100);
      now += 101;
      clock.set(now);
      const [expired] = await store.expiredLeases(10);
      assert.deepEqual([expired?.interruptions, expired?.interruptedBy], [0, []]);
      assert.equal(await rescueOnce(store), 1);
      const given = await mustGet(store, job.id);
      assert.deepEqual([given.status, given.attempts, given.interruptions], ['queued', 0, 1]);
      assert.equal(given.error, null);

      // Server 2 dies after its start was recorded: retried, counted, interrupted twice.
      const second = await claimOneUnstarted(store, 'server-2', 100);
      assert.equal(second.id, first.id);
      await startAttempts(store, [second], 'server-2');
      now += 101;
      clock.set(now);
      const [again] = await store.expiredLeases(10);
      assert.deepEqual([again?.interruptions, again?.interruptedBy], [1, ['server-1']]);
      assert.equal(await rescueOnce(store), 1);
      const retried = await mustGet(store, job.id);
      assert.deepEqual([retried.status, retried.attempts, retried.interruptions], ['retrying', 1, 2]);
      assert.equal(retried.error?.code, 'interrupted');

      // Server 3 dies too, before the start: the third interruption stops the job.
      now = (retried.runAt ?? now) + 1;
      clock.set(now);
      const third = await claimOneUnstarted(store, 'server-3', 100);
      assert.equal(third.attempts, 2);
      now += 101;
      clock.set(now);
      const logged: object[] = [];
      assert.equal(await rescueOnce(store, logged), 1);
      const stopped = await mustGet(store, job.id);
      assert.equal(stopped.status, 'failed');
      assert.equal(stopped.interruptions, MAX_INTERRUPTIONS);
      assert.equal(stopped.attempts, 2);
      assert.equal(stopped.error?.code, 'too_many_interruptions');
      assert.equal(stopped.error?.attempt, 2);
      assert.match(stopped.error?.message ?? '', /server-1, server-2, server-3/);
      assert.equal(stopped.finishedAt, now);
      assert.deepEqual(
        logged.map((fields) => ({ ...fields })),
        [{ job: job.id, type: job.type, interruptions: 3, servers: ['server-1', 'server-2', 'server-3'] }],
        'logged once, with the job and the servers it took down',
      );
      const more: object[] = [];
      assert.equal(await rescueOnce(store, more), 0);
      assert.deepEqual(more, []);
      await assertCountsExact(store);
    });

    it("counts no interruption for the owner's own outcomes, and a retry by hand counts from zero again", async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 1 });
      const attempt = await claimOneUnstarted(store, 'server-1', 100);
      await startAttempts(store, [attempt], 'server-1');
      clock.set(T0 + 1);
      assert.ok(await finishOne(store, attempt, { kind: 'failed', error: handlerError(1), retryAt: null }, 'server-1'));
      assert.equal((await mustGet(store, job.id)).interruptions, 0);

      changes(await store.retry(job.id));
      const rerun = await claimOneUnstarted(store, 'server-2', 100);
      clock.set(T0 + 200);
      assert.equal(await rescueOnce(store), 1);
      const interrupted = await mustGet(store, job.id);
      assert.deepEqual([interrupted.status, interrupted.interruptions], ['queued', 1]);
      assert.equal(rerun.id, job.id);

      const last = await claimOneUnstarted(store, 'server-3', 100);
      await startAttempts(store, [last], 'server-3');
      clock.set(T0 + 201);
      assert.ok(await finishOne(store, last, { kind: 'failed', error: handlerError(1), retryAt: null }, 'server-3'));
      changes(await store.retry(job.id));
      const reset = await mustGet(store, job.id);
      assert.deepEqual([reset.status, reset.attempts, reset.interruptions], ['queued', 0, 0]);
      clock.set(T0 + 202);
      const after = await claimOneUnstarted(store, 'server-4', 100);
      clock.set(T0 + 400);
      assert.equal(await rescueOnce(store), 1);
      const [listed] = [await mustGet(store, job.id)];
      assert.equal(listed.interruptions, 1, 'the servers before the retry are forgotten too');
      const next = await claimOneUnstarted(store, 'server-5', 100);
      assert.equal(next.id, after.id);
      clock.set(T0 + 600);
      const [expired] = await store.expiredLeases(10);
      assert.deepEqual(expired?.interruptedBy, ['server-4']);
    });
  });
}
