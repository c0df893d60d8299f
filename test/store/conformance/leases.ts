import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  assertCountsExact,
  claimJobs,
  claimOne,
  claimOneUnstarted,
  claimUnstarted,
  completed,
  finishOne,
  handlerError,
  insertOk,
  insertOne,
  mustGet,
  newJob,
  recordEvents,
  MAX_INTERRUPTIONS,
  rescueOnce,
  startAttempts,
  T0,
} from '../../support/store-fixtures.js';
import { changed, type OpenStore } from './context.js';
import { decideExpired } from '../../../src/scheduler/dispatch/retry-policy.js';

/** Leases: expiry, extension and rescue, and attempts that never started. */
export function leasesFacet(openStore: OpenStore): void {
  describe('leases', () => {
    it('extends held leases and answers the ids no longer held', async () => {
      const { store, clock } = await openStore();
      const a = await insertOne(store);
      const b = await insertOne(store);
      const [ca, cb] = await claimJobs(store, 2, 'w1', 100);
      assert.ok(ca && cb);
      clock.set(T0 + 50);
      assert.deepEqual(await store.heartbeat('w1', [a.id, b.id], 10_000), []);
      clock.set(T0 + 5000);
      assert.deepEqual(await store.expiredLeases(10), []);
      assert.ok(await finishOne(store, cb, completed(1), 'w1'));
      assert.deepEqual(await store.heartbeat('w1', [a.id, b.id, 'missing'], 10_000), [b.id, 'missing']);
      assert.deepEqual(await store.heartbeat('w2', [a.id], 10_000), [a.id]);
      assert.deepEqual(await store.heartbeat('w1', [], 10_000), []);
      clock.set(T0 + 15_000);
      assert.deepEqual(await store.expiredLeases(10), []);
      clock.set(T0 + 15_001);
      assert.deepEqual(
        (await store.expiredLeases(10)).map((e) => e.id),
        [a.id],
      );
    });

    it('lists expired attempts as the rescuer needs them, at most `limit`', async () => {
      const { store, clock } = await openStore();
      const backoff = { initialMs: 7, factor: 3, maxMs: 70, jitter: 'equal' } as const;
      const jobs = await insertOk(store, [newJob({ type: 'test.a', maxAttempts: 4, backoff }), newJob(), newJob()]);
      await claimUnstarted(store, 3, 'dead', 100);
      clock.set(T0 + 101);
      const expired = await store.expiredLeases(10);
      assert.deepEqual(expired.map((e) => e.id).sort(), jobs.map((j) => j.id).sort());
      assert.deepEqual(
        expired.find((e) => e.id === jobs[0]?.id),
        {
          id: jobs[0]?.id,
          type: 'test.a',
          owner: 'dead',
          attempt: 1,
          started: false,
          maxAttempts: 4,
          backoff,
          interruptions: 0,
          interruptedBy: [],
        },
      );
      assert.equal((await store.expiredLeases(2)).length, 2);
    });

    it('records progress for the lease holder only, publishes it, and keeps it with the result', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store);
      const events = recordEvents(store);
      const first = await claimOne(store, 'w1');
      store.progress(job.id, 1, 'w1', { percent: 40, message: 'step 2' });
      assert.deepEqual((await mustGet(store, job.id)).progress, { percent: 40, message: 'step 2' });
      store.progress(job.id, 1, 'w2', { percent: 50, message: null });
      store.progress(job.id, 2, 'w1', { percent: 55, message: null });
      assert.deepEqual((await mustGet(store, job.id)).progress, { percent: 40, message: 'step 2' });
      assert.deepEqual(
        events.seen.filter((e) => e.kind === 'progress'),
        [{ kind: 'progress', id: job.id, attempt: 1, percent: 40 }],
      );

      clock.set(T0 + 1);
      await finishOne(store, first, { kind: 'failed', error: handlerError(1), retryAt: T0 + 1 }, 'w1');
      store.progress(job.id, 1, 'w1', { percent: 60, message: null });
      assert.equal(events.seen.filter((e) => e.kind === 'progress').length, 1);
      const again = await claimOne(store, 'w1');
      assert.equal(again.attempts, 2);
      assert.equal(again.progress, null);
      assert.equal((await mustGet(store, job.id)).progress, null);
      store.progress(job.id, 2, 'w1', { percent: 90, message: 'almost' });
      await finishOne(store, again, completed('r'), 'w1');
      const done = await mustGet(store, job.id);
      assert.equal(done.status, 'completed');
      assert.deepEqual(done.progress, { percent: 90, message: 'almost' });
      events.stop();
    });

    it('rescues an expired lease: retrying as interrupted at now + backoff; a live one is left alone', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { backoff: { initialMs: 100, factor: 2, maxMs: 1000, jitter: 'none' } });
      const healthy = await insertOne(store);
      const dead = await claimOne(store, 'dead', 100);
      await startAttempts(store, [dead], 'dead');
      await claimOne(store, 'alive', 10_000);
      clock.set(T0 + 100);
      assert.equal(await rescueOnce(store), 0);
      clock.set(T0 + 101);
      assert.equal(await rescueOnce(store), 1);
      const rescued = await mustGet(store, job.id);
      assert.equal(rescued.status, 'retrying');
      assert.equal(rescued.error?.code, 'interrupted');
      assert.equal(rescued.error?.attempt, 1);
      assert.equal(rescued.attempts, 1);
      assert.equal(rescued.runAt, T0 + 101 + 100);
      assert.equal(await store.nextDueAt(), T0 + 201);
      assert.equal((await mustGet(store, healthy.id)).status, 'running');
      assert.equal(await finishOne(store, dead, completed(1), 'dead'), null);
      assert.equal(await rescueOnce(store), 0);
      await assertCountsExact(store);
      clock.set(T0 + 201);
      const again = await claimOne(store, 'alive');
      assert.equal(again.id, job.id);
      assert.equal(again.attempts, 2);
    });

    it('fails a job whose expired lease was on its last attempt, and its dependents', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 1 });
      const child = await insertOne(store, { dependsOn: [job.id] });
      const grandchild = await insertOne(store, { dependsOn: [child.id] });
      await startAttempts(store, [await claimOne(store, 'dead', 100)], 'dead');
      clock.set(T0 + 500);
      assert.equal(await rescueOnce(store), 1);
      const failed = await mustGet(store, job.id);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error?.code, 'interrupted');
      assert.equal(failed.finishedAt, T0 + 500);
      for (const id of [child.id, grandchild.id]) {
        const dependent = await mustGet(store, id);
        assert.equal(dependent.status, 'failed');
        assert.equal(dependent.error?.code, 'dependency_failed');
      }
      await assertCountsExact(store);
    });

    it('fences every attempt: an outcome of attempt 1 after a rescue and a new claim changes nothing', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 3 });
      const claimed = await claimOne(store, 'w', 100);
      await startAttempts(store, [claimed], 'w');
      const first = { id: claimed.id, attempts: claimed.attempts };
      assert.equal(first.attempts, 1);
      clock.set(T0 + 101);
      assert.equal(await rescueOnce(store), 1);
      const rescued = await mustGet(store, job.id);
      assert.ok(rescued.runAt !== null);
      clock.set(rescued.runAt);
      // The same owner claims it again: only the attempt number tells the two apart.
      const second = await claimOne(store, 'w', 100);
      assert.equal(second.id, job.id);
      assert.equal(second.attempts, 2);
      assert.equal(await finishOne(store, first, completed('late'), 'w'), null);
      assert.equal(await finishOne(store, first, { kind: 'failed', error: handlerError(1), retryAt: null }, 'w'), null);
      store.progress(job.id, 1, 'w', { percent: 99, message: null });
      const running = await mustGet(store, job.id);
      assert.equal(running.status, 'running');
      assert.equal(running.attempts, 2);
      assert.equal(running.progress, null);
      assert.deepEqual(await finishOne(store, second, completed('on time'), 'w'), { status: 'completed', others: 0 });
      assert.equal((await mustGet(store, job.id)).result, 'on time');
      await assertCountsExact(store);
    });

    it('hands out a claimed job that stays a record of its attempt, whatever happens to the job later', async () => {
      const { store, clock } = await openStore();
      await insertOne(store, { maxAttempts: 3 });
      const first = await claimOne(store, 'w', 100);
      await startAttempts(store, [first], 'w');
      const asClaimed = structuredClone(first);
      store.progress(first.id, 1, 'w', { percent: 50, message: null });
      clock.set(T0 + 101);
      assert.equal(await rescueOnce(store), 1);
      clock.set((await mustGet(store, first.id)).runAt ?? 0);
      const second = await claimOne(store, 'w', 100);
      assert.equal(second.attempts, 2);
      // A caller that fences its outcome with `first.attempts` must still name attempt 1.
      assert.deepEqual(first, asClaimed);
      assert.equal(await finishOne(store, first, completed('late'), 'w'), null);
    });

    it('fences a rescue on the lease having run out: a heartbeat that renewed it first wins', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store);
      const attempt = await claimOne(store, 'w', 100);
      await startAttempts(store, [attempt], 'w');
      clock.set(T0 + 150);
      const [expired] = await store.expiredLeases(10);
      assert.ok(expired);
      assert.equal(expired.id, job.id);
      // The owner was only slow: its heartbeat lands before the rescuer's finish.
      assert.deepEqual(await store.heartbeat('w', [job.id], 1000), []);
      const rescue = decideExpired(expired, store.now(), () => 0.5, MAX_INTERRUPTIONS);
      assert.equal(await finishOne(store, attempt, rescue, 'w', true), null);
      assert.equal(await finishOne(store, attempt, completed('x'), 'w', true), null);
      assert.equal((await mustGet(store, job.id)).status, 'running');
      assert.equal(await rescueOnce(store), 0);
      clock.set(T0 + 1151);
      assert.deepEqual(await finishOne(store, attempt, rescue, 'w', true), { status: 'retrying', others: 0 });
      assert.equal(await finishOne(store, attempt, completed('too late'), 'w'), null);
      await assertCountsExact(store);
    });
  });

  describe('leases: attempts that never started', () => {
    it('gives back a rescued attempt whose start was never recorded: queued as before its claim', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 2 });
      clock.set(T0 + 5);
      const first = await claimOneUnstarted(store, 'w', 100);
      clock.set(T0 + 6);
      await startAttempts(store, [first], 'w');
      clock.set(T0 + 10);
      await finishOne(store, first, { kind: 'failed', error: handlerError(1), retryAt: T0 + 20 }, 'w');
      clock.set(T0 + 20);
      // The last attempt is claimed ahead of a busy thread, and its server dies before starting it.
      const second = await claimOneUnstarted(store, 'dead', 100);
      assert.equal(second.attempts, 2);
      clock.set(T0 + 121);
      assert.deepEqual(
        (await store.expiredLeases(10)).map((e) => [e.id, e.attempt, e.started]),
        [[job.id, 2, false]],
      );
      const events = recordEvents(store);
      assert.equal(await rescueOnce(store), 1);
      assert.deepEqual(events.seen, [changed(job.id, 'queued')]);
      events.stop();
      const back = await mustGet(store, job.id);
      assert.equal(back.status, 'queued');
      assert.equal(back.attempts, 1);
      assert.equal(back.startedAt, T0 + 6);
      assert.deepEqual(back.error, handlerError(1));
      assert.equal(back.runAt, null);
      assert.equal(await finishOne(store, second, completed('late'), 'dead'), null);
      await assertCountsExact(store);
      const third = await claimOne(store, 'w');
      assert.equal(third.id, job.id);
      assert.equal(third.attempts, 2);
      await finishOne(store, third, completed('done'), 'w');
      assert.equal((await mustGet(store, job.id)).status, 'completed');
    });

    it('counts a rescued attempt whose start was recorded; a start of another owner or attempt is not one', async () => {
      const { store, clock } = await openStore();
      const [started, unstarted] = await insertOk(store, [newJob({ maxAttempts: 1 }), newJob({ maxAttempts: 1 })]);
      assert.ok(started && unstarted);
      const [a, b] = await claimUnstarted(store, 2, 'dead', 100);
      assert.equal(a?.id, started.id);
      assert.ok(a && b);
      clock.set(T0 + 3);
      await startAttempts(store, [a], 'dead');
      await startAttempts(store, [b], 'other');
      await startAttempts(store, [{ id: b.id, attempts: 2 }], 'dead');
      assert.equal((await mustGet(store, a.id)).startedAt, T0 + 3);
      // Its start is not recorded: shown as before its claim.
      assert.equal((await mustGet(store, b.id)).startedAt, null);
      clock.set(T0 + 101);
      assert.equal(await rescueOnce(store), 2);
      const failed = await mustGet(store, started.id);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error?.code, 'interrupted');
      assert.equal(failed.attempts, 1);
      const back = await mustGet(store, unstarted.id);
      assert.equal(back.status, 'queued');
      assert.equal(back.attempts, 0);
      assert.equal(back.startedAt, null);
      assert.equal(back.error, null);
      await assertCountsExact(store);
    });

    it('counts an attempt whose start is recorded between the rescuer reading it and giving it back', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 3 });
      const attempt = await claimOneUnstarted(store, 'slow', 100);
      clock.set(T0 + 101);
      const [expired] = await store.expiredLeases(10);
      assert.ok(expired);
      assert.equal(expired.started, false);
      // The owner was only slow: its thread started the attempt, and the start is stored first.
      await startAttempts(store, [attempt], 'slow');
      const giveBack = decideExpired(expired, store.now(), () => 0.5, MAX_INTERRUPTIONS);
      assert.deepEqual(giveBack, { kind: 'unstarted' });
      assert.equal(await finishOne(store, attempt, giveBack, 'slow', true), null);
      assert.equal((await mustGet(store, job.id)).status, 'running');
      assert.equal(await rescueOnce(store), 1);
      const rescued = await mustGet(store, job.id);
      assert.equal(rescued.status, 'retrying');
      assert.equal(rescued.attempts, 1);
      assert.equal(rescued.error?.code, 'interrupted');
    });
  });
}
