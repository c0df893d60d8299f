import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Job } from '../../../src/contract/job.js';
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
  mustGet,
  newJob,
  OWNER,
  rescueOnce,
  startAttempts,
  T0,
} from '../../support/store-fixtures.js';
import { changes, type OpenStore } from './context.js';

/** A snooze (`ctx.snooze`) as the store writes it: scheduled again, the attempt given back, behind the fence. */
export function snoozeFacet(openStore: OpenStore): void {
  describe('snooze', () => {
    it('schedules the job at runAt, gives its attempt back and counts the snooze, even on its last attempt', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { maxAttempts: 1 });
      const attempt = await claimOne(store);
      await startAttempts(store, [attempt]);
      const seen: Job[] = [];
      const stop = store.subscribe((event) => {
        if (event.kind === 'changed' && event.id === job.id) seen.push(event.job());
      });
      clock.set(T0 + 1);
      assert.deepEqual(await finishOne(store, attempt, { kind: 'snoozed', runAt: T0 + 500 }), {
        status: 'scheduled',
        others: 0,
      });
      stop();
      const snoozed = await mustGet(store, job.id);
      assert.equal(snoozed.status, 'scheduled');
      assert.equal(snoozed.attempts, 0);
      assert.equal(snoozed.snoozes, 1);
      assert.equal(snoozed.runAt, T0 + 500);
      assert.equal(snoozed.finishedAt, null);
      assert.equal(snoozed.error, null);
      assert.deepEqual(
        seen.map((event) => [event.status, event.snoozes, event.attempts]),
        [['scheduled', 1, 0]],
        'the change is published with the job as it now is',
      );
      assert.equal(await store.nextDueAt(), T0 + 500);
      await assertCountsExact(store);

      clock.set(T0 + 499);
      assert.deepEqual(await store.claim(claimRequest(1)), []);
      clock.set(T0 + 500);
      const again = await claimOne(store);
      assert.equal(again.id, job.id);
      assert.equal(again.attempts, 1, 'the snoozed attempt was not counted');
      assert.equal(again.snoozes, 1);
      assert.equal(again.runAt, null);
      assert.deepEqual(await finishOne(store, again, { kind: 'snoozed', runAt: T0 + 500 }), {
        status: 'scheduled',
        others: 0,
      });
      assert.equal((await mustGet(store, job.id)).snoozes, 2);
      const third = await claimOne(store);
      assert.equal(third.attempts, 1);
      assert.ok(await finishOne(store, third, completed('done')));
      const done = await mustGet(store, job.id);
      assert.equal(done.status, 'completed');
      assert.equal(done.snoozes, 2);
      assert.equal(done.attempts, 1);
      await assertCountsExact(store);
    });

    it("refuses a stale attempt's snooze: another owner, another attempt, a cancelled or rescued job", async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store);
      const attempt = await claimOne(store, 'w1');
      const snooze = { kind: 'snoozed', runAt: T0 + 10 } as const;
      assert.equal(await finishOne(store, attempt, snooze, 'w2'), null);
      assert.equal(await finishOne(store, { id: job.id, attempts: 2 }, snooze, 'w1'), null);
      changes(await store.cancel(job.id));
      assert.equal(await finishOne(store, attempt, snooze, 'w1'), null);
      const cancelled = await mustGet(store, job.id);
      assert.equal(cancelled.status, 'cancelled');
      assert.equal(cancelled.snoozes, 0);

      const rescued = await insertOne(store, { maxAttempts: 3 });
      const lost = await claimOne(store, OWNER, 100);
      assert.equal(lost.id, rescued.id);
      await startAttempts(store, [lost]);
      clock.advance(1000);
      assert.equal(await rescueOnce(store), 1);
      assert.equal(await finishOne(store, lost, snooze), null);
      const after = await mustGet(store, rescued.id);
      assert.equal(after.status, 'retrying');
      assert.equal(after.attempts, 1);
      assert.equal(after.snoozes, 0);
      await assertCountsExact(store);
    });

    it('leaves dependents waiting: a snoozed job has not finished', async () => {
      const { store, clock } = await openStore();
      const parent = await insertOne(store);
      const child = await insertOne(store, { dependsOn: [parent.id] });
      const attempt = await claimOne(store);
      assert.deepEqual(await finishOne(store, attempt, { kind: 'snoozed', runAt: T0 }), {
        status: 'scheduled',
        others: 0,
      });
      assert.equal((await mustGet(store, child.id)).status, 'waiting');
      clock.set(T0 + 1);
      const again = await claimOne(store);
      assert.equal(again.id, parent.id);
      assert.deepEqual(await finishOne(store, again, completed(1)), { status: 'completed', others: 1 });
      assert.equal((await mustGet(store, child.id)).status, 'queued');
      await assertCountsExact(store);
    });

    it('answers the jobs of one call each on its own (a micro-batch where one job snoozes)', async () => {
      const { store } = await openStore();
      await insertOk(store, [newJob(), newJob(), newJob()]);
      const [a, b, c] = await claimJobs(store, 3);
      assert.ok(a && b && c);
      const answers = await store.finish([
        { id: a.id, attempt: 1, owner: OWNER, outcome: completed('a') },
        { id: b.id, attempt: 1, owner: OWNER, outcome: { kind: 'snoozed', runAt: T0 + 50 } },
        { id: c.id, attempt: 1, owner: OWNER, outcome: { kind: 'failed', error: handlerError(1), retryAt: T0 + 9 } },
      ]);
      assert.deepEqual(answers, [
        { status: 'completed', others: 0 },
        { status: 'scheduled', others: 0 },
        { status: 'retrying', others: 0 },
      ]);
      const snoozed = await mustGet(store, b.id);
      assert.equal(snoozed.snoozes, 1);
      assert.equal(snoozed.attempts, 0);
      assert.equal((await mustGet(store, c.id)).snoozes, 0);
      await assertCountsExact(store);
    });

    it('a retry of a failed job starts its snoozes again from 0', async () => {
      const { store } = await openStore();
      const job = await insertOne(store, { maxAttempts: 1 });
      const first = await claimOne(store);
      assert.ok(await finishOne(store, first, { kind: 'snoozed', runAt: T0 }));
      const second = await claimOne(store);
      assert.ok(await finishOne(store, second, { kind: 'failed', error: handlerError(1), retryAt: null }));
      assert.equal((await mustGet(store, job.id)).snoozes, 1);
      const retried = changes(await store.retry(job.id)).job;
      assert.equal(retried.snoozes, 0);
      assert.equal((await mustGet(store, job.id)).snoozes, 0);
    });
  });
}
