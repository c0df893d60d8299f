import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type DeliveryAttempt, type DueDelivery } from '../../../src/store/store.js';
import {
  T0,
  OWNER,
  nextId,
  insertOne,
  mustGet,
  claimJobs,
  claimOne,
  completed,
  handlerError,
  finishOne,
} from '../../support/store-fixtures.js';
import { type OpenStore, changes } from './context.js';

/** Callback deliveries. */
export function deliveriesFacet(openStore: OpenStore): void {
  describe('callback deliveries', () => {
    const HOOK = 'https://hooks.example.com/kiln';
    const attemptOf = (
      delivery: DueDelivery,
      outcome: DeliveryAttempt['outcome'],
      overrides: Partial<DeliveryAttempt> = {},
    ): DeliveryAttempt => ({
      id: delivery.id,
      attempt: delivery.attempt,
      owner: OWNER,
      body: '{"sent":true}',
      httpStatus: outcome === 'delivered' ? 200 : 500,
      error: outcome === 'delivered' ? null : 'the receiver answered 500',
      outcome,
      retryInMs: 1000,
      ...overrides,
    });

    it('stores a delivery with the finish that makes the job terminal, and leases it once', async () => {
      const { store, clock } = await openStore();
      let announced = 0;
      const stop = store.subscribe((event) => {
        if (event.kind === 'deliveries') announced++;
      });
      const job = await insertOne(store, { callback: { url: HOOK } });
      assert.deepEqual(job.callback, { url: HOOK });
      assert.deepEqual((await mustGet(store, job.id)).callback, { url: HOOK });
      assert.deepEqual(await store.deliveries(job.id), []);
      assert.equal(await store.nextDeliveryAt(), null);
      const claimed = await claimOne(store);
      clock.set(T0 + 50);
      await finishOne(store, claimed, completed({ ok: 1 }));
      assert.equal(await store.nextDeliveryAt(), T0 + 50);
      const [due, ...more] = await store.claimDeliveries(OWNER, 10_000, 10);
      assert.ok(due);
      assert.equal(more.length, 0);
      assert.equal(due.jobId, job.id);
      assert.equal(due.event, 'completed');
      assert.equal(due.attempt, 1);
      assert.equal(due.url, HOOK);
      assert.equal(due.body, null);
      assert.equal(due.job?.status, 'completed');
      assert.deepEqual(due.job?.result, { ok: 1 });
      assert.match(due.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      // Leased: nobody else gets it until the lease runs out.
      assert.deepEqual(await store.claimDeliveries('owner-2', 10_000, 10), []);
      assert.equal(await store.nextDeliveryAt(), T0 + 50 + 10_000);
      assert.deepEqual(await store.deliveries(job.id), [
        { id: due.id, event: 'completed', attempt: 1, status: 'pending', httpStatus: null, error: null, at: T0 + 50 },
      ]);
      stop();
      // The store thread or the database announces it, possibly after the write answered.
      if (announced === 0) {
        await new Promise<void>((resolve) => {
          const off = store.subscribe((event) => {
            if (event.kind === 'deliveries') {
              off();
              resolve();
            }
          });
        });
      }
    });

    it('records attempts: a retry is due again after its delay with the same body; a 2xx ends it delivered', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { callback: { url: HOOK } });
      await finishOne(store, await claimOne(store), { kind: 'failed', error: handlerError(1), retryAt: null });
      const [first] = await store.claimDeliveries(OWNER, 10_000, 10);
      assert.ok(first);
      assert.equal(first.event, 'failed');
      clock.set(T0 + 100);
      // The fence: another owner, or another attempt, is refused.
      assert.equal(await store.recordDeliveryAttempt(attemptOf(first, 'retry', { owner: 'owner-2' })), false);
      assert.equal(await store.recordDeliveryAttempt(attemptOf(first, 'retry', { attempt: 2 })), false);
      assert.equal(await store.recordDeliveryAttempt(attemptOf(first, 'retry')), true);
      assert.equal(await store.recordDeliveryAttempt(attemptOf(first, 'retry')), false);
      assert.equal(await store.nextDeliveryAt(), T0 + 1100);
      assert.deepEqual(await store.claimDeliveries(OWNER, 10_000, 10), [], 'not due yet');
      clock.set(T0 + 1100);
      const [second] = await store.claimDeliveries('owner-2', 10_000, 10);
      assert.ok(second);
      assert.equal(second.id, first.id);
      assert.equal(second.attempt, 2);
      assert.equal(second.body, '{"sent":true}');
      assert.equal(second.job, null);
      clock.set(T0 + 1200);
      assert.equal(await store.recordDeliveryAttempt(attemptOf(second, 'delivered', { owner: 'owner-2' })), true);
      assert.equal(await store.nextDeliveryAt(), null);
      assert.deepEqual(await store.claimDeliveries(OWNER, 10_000, 10), []);
      assert.deepEqual(await store.deliveries(job.id), [
        {
          id: first.id,
          event: 'failed',
          attempt: 1,
          status: 'failed',
          httpStatus: 500,
          error: 'the receiver answered 500',
          at: T0 + 100,
        },
        {
          id: first.id,
          event: 'failed',
          attempt: 2,
          status: 'delivered',
          httpStatus: 200,
          error: null,
          at: T0 + 1200,
        },
      ]);
    });

    it('gives a delivery whose lease ran out to the next caller', async () => {
      const { store, clock } = await openStore();
      await insertOne(store, { callback: { url: HOOK } });
      await finishOne(store, await claimOne(store), completed(1));
      const [leased] = await store.claimDeliveries(OWNER, 5000, 10);
      assert.ok(leased);
      clock.set(T0 + 5000);
      const [taken] = await store.claimDeliveries('owner-2', 5000, 10);
      assert.equal(taken?.id, leased.id);
      assert.equal(taken?.attempt, 1);
      // The first owner's late answer is refused: the delivery is another's now.
      assert.equal(await store.recordDeliveryAttempt(attemptOf(leased, 'delivered')), false);
      assert.equal(
        await store.recordDeliveryAttempt(attemptOf(taken as DueDelivery, 'failed', { owner: 'owner-2' })),
        true,
      );
      assert.equal(await store.nextDeliveryAt(), null);
    });

    it('makes deliveries on cancel and dependency_failed, only for the events the callback lists', async () => {
      const { store } = await openStore();
      const parent = await insertOne(store, { runAt: T0 + 60_000, callback: { url: HOOK, events: ['cancelled'] } });
      const child = await insertOne(store, { dependsOn: [parent.id], callback: { url: HOOK } });
      const onlyCompleted = await insertOne(store, {
        dependsOn: [parent.id],
        callback: { url: HOOK, events: ['completed'] },
      });
      const plain = await insertOne(store, { dependsOn: [parent.id] });
      changes(await store.cancel(parent.id));
      assert.equal((await mustGet(store, plain.id)).status, 'failed');
      const due = await store.claimDeliveries(OWNER, 10_000, 10);
      assert.deepEqual(
        due.map((d) => [d.jobId, d.event]).sort(),
        [
          [parent.id, 'cancelled'],
          [child.id, 'failed'],
        ].sort(),
      );
      assert.deepEqual(await store.deliveries(onlyCompleted.id), []);
      // A job inserted after its dependency failed is failed at once: a delivery too.
      const late = await insertOne(store, { dependsOn: [parent.id], callback: { url: HOOK } });
      assert.equal(late.status, 'failed');
      const [lateDue] = await store.claimDeliveries(OWNER, 10_000, 10);
      assert.equal(lateDue?.jobId, late.id);
      assert.equal(lateDue?.event, 'failed');
    });

    it('takes the deliveries away with the job (remove and purge); null for an unknown job', async () => {
      const { store, clock } = await openStore();
      const removed = await insertOne(store, { callback: { url: HOOK } });
      const purged = await insertOne(store, { callback: { url: HOOK } });
      const [a, b] = await claimJobs(store, 2);
      assert.ok(a && b);
      await finishOne(store, a, completed(1));
      await finishOne(store, b, completed(2));
      const due = await store.claimDeliveries(OWNER, 10_000, 10);
      assert.equal(due.length, 2);
      for (const delivery of due) {
        assert.equal(await store.recordDeliveryAttempt(attemptOf(delivery, 'retry')), true);
      }
      assert.equal((await store.deliveries(removed.id))?.length, 2);
      assert.equal(await store.remove(removed.id), 'removed');
      assert.equal(await store.deliveries(removed.id), null);
      clock.set(T0 + 10_000);
      assert.equal(await store.purge('completed', 1000, 100), 1);
      assert.equal(await store.deliveries(purged.id), null);
      assert.equal(await store.nextDeliveryAt(), null);
      assert.deepEqual(await store.claimDeliveries(OWNER, 10_000, 10), []);
      assert.equal(await store.deliveries(nextId()), null);
    });
  });
}
