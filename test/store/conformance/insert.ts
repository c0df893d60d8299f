import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Job } from '../../../src/contract/job.js';
import {
  assertCountsExact,
  claimOne,
  claimRequest,
  completed,
  finishOne,
  insertOk,
  insertOne,
  mustGet,
  newJob,
  T0,
} from '../../support/store-fixtures.js';
import { changes, type OpenStore } from './context.js';
import { type InvalidState, isInvalidState } from '../../../src/store/store.js';

/** Insert: the fields a new job gets, runAt, idempotency keys, capacity, dependencies and dedupe; get and getMany read it back. */
export function insertFacet(openStore: OpenStore): void {
  describe('insert', () => {
    it('creates a queued job with every field set, ready at the store clock', async () => {
      const { store, clock } = await openStore();
      clock.set(T0 + 5);
      assert.equal(store.now(), T0 + 5);
      const trace = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 vendor=abc';
      const input = newJob({
        priority: 7,
        payload: { a: [1, 2] },
        metadata: { team: 'x' },
        idempotencyKey: 'k1',
        trace,
      });
      const [job] = await insertOk(store, [input]);
      assert.deepEqual(job, {
        id: input.id,
        type: 'test.echo',
        status: 'queued',
        priority: 7,
        payload: { a: [1, 2] },
        result: null,
        error: null,
        attempts: 0,
        maxAttempts: 3,
        snoozes: 0,
        interruptions: 0,
        timeoutMs: 1000,
        backoff: { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 'none' },
        progress: null,
        idempotencyKey: 'k1',
        dependsOn: [],
        metadata: { team: 'x' },
        group: null,
        callback: null,
        runAt: null,
        createdAt: T0,
        startedAt: null,
        finishedAt: null,
        readyAt: T0 + 5,
        schedule: null,
        batch: null,
        trace,
      });
      assert.deepEqual(await store.get(input.id), job);
      const [claimed] = (await store.claim(claimRequest(1))).flat();
      assert.equal(claimed?.trace, trace, 'a claim hands the trace context to the attempt');
      assert.equal(await store.get('missing'), null);
    });

    it('takes a job id as written: in another case it names no job', async () => {
      const { store } = await openStore();
      const job = await insertOne(store, { id: '0198f0a2-7c3e-7b1d-9e4f-a1b2c3d4e5f6' });
      assert.equal((await store.get(job.id))?.id, job.id);
      assert.equal(await store.get(job.id.toUpperCase()), null);
      assert.deepEqual(await store.getMany([job.id.toUpperCase()]), []);
    });

    it('reads several jobs at once (getMany), leaving out ids with no job', async () => {
      const { store } = await openStore();
      const a = await insertOne(store);
      const b = await insertOne(store, { priority: 7 });
      const read = await store.getMany([b.id, 'missing', a.id, a.id]);
      assert.deepEqual(read.map((job) => job.id).sort(), [a.id, b.id].sort());
      assert.deepEqual(
        read.find((job) => job.id === b.id),
        await store.get(b.id),
      );
      assert.deepEqual(await store.getMany([]), []);
    });

    it('makes a job with a future runAt scheduled and one with a past or present runAt queued', async () => {
      const { store } = await openStore();
      const later = await insertOne(store, { runAt: T0 + 1000 });
      const past = await insertOne(store, { runAt: T0 - 1000 });
      const exact = await insertOne(store, { runAt: T0 });
      assert.equal(later.status, 'scheduled');
      assert.equal(later.runAt, T0 + 1000);
      assert.equal(later.readyAt, null);
      assert.equal((await mustGet(store, later.id)).status, 'scheduled');
      for (const job of [past, exact]) {
        assert.equal(job.status, 'queued');
        assert.equal(job.runAt, null);
        assert.equal(job.readyAt, T0);
        assert.equal((await mustGet(store, job.id)).status, 'queued');
      }
      await assertCountsExact(store);
    });

    it('replays a job whose idempotency key, type and payload match, whatever the key order', async () => {
      const { store, clock } = await openStore();
      const first = await insertOne(store, { idempotencyKey: 'order-1', payload: { a: 1, b: { c: 2, d: [3] } } });
      clock.advance(10);
      const again = newJob({ idempotencyKey: 'order-1', payload: { b: { d: [3], c: 2 }, a: 1 } });
      const result = await store.insert([again]);
      assert.ok(result.ok);
      assert.equal(result.outcomes[0]?.created, false);
      assert.deepEqual(result.outcomes[0]?.job, first);
      assert.equal(await store.get(again.id), null);
      assert.equal((await store.counts()).pending, 1);
    });

    it('replays the key of a job that already ran, as it is now', async () => {
      const { store } = await openStore();
      const first = await insertOne(store, { idempotencyKey: 'done' });
      const attempt = await claimOne(store);
      assert.ok(await finishOne(store, attempt, completed({ v: 1 })));
      const result = await store.insert([newJob({ idempotencyKey: 'done' })]);
      assert.ok(result.ok);
      assert.equal(result.outcomes[0]?.created, false);
      assert.equal(result.outcomes[0]?.job.id, first.id);
      assert.equal(result.outcomes[0]?.job.status, 'completed');
      assert.deepEqual(result.outcomes[0]?.job.result, { v: 1 });
    });

    it('fails the whole batch with idempotency_conflict when a key was used with another payload or type', async () => {
      const { store } = await openStore();
      const first = await insertOne(store, { idempotencyKey: 'k', payload: { n: 1 } });
      const fresh = newJob();
      const otherPayload = await store.insert([fresh, newJob({ idempotencyKey: 'k', payload: { n: 2 } })]);
      assert.deepEqual(otherPayload, { ok: false, reason: 'idempotency_conflict', index: 1, existingId: first.id });
      const otherType = await store.insert([newJob({ idempotencyKey: 'k', type: 'test.other' })]);
      assert.deepEqual(otherType, { ok: false, reason: 'idempotency_conflict', index: 0, existingId: first.id });
      assert.equal(await store.get(fresh.id), null);
      await assertCountsExact(store);
    });

    it('treats a key repeated inside one batch as a replay of the earlier item, or a conflict', async () => {
      const { store } = await openStore();
      const a = newJob({ idempotencyKey: 'same' });
      const b = newJob({ idempotencyKey: 'same' });
      const result = await store.insert([a, b]);
      assert.ok(result.ok);
      assert.deepEqual(
        result.outcomes.map((o) => [o.created, o.job.id, o.job.status]),
        [
          [true, a.id, 'queued'],
          [false, a.id, 'queued'],
        ],
      );
      assert.equal(await store.get(b.id), null);
      const c = newJob({ idempotencyKey: 'other' });
      const d = newJob({ idempotencyKey: 'other', payload: { n: 99 } });
      assert.deepEqual(await store.insert([c, d]), {
        ok: false,
        reason: 'idempotency_conflict',
        index: 1,
        existingId: c.id,
      });
      assert.equal(await store.get(c.id), null);
      await assertCountsExact(store);
    });

    it('lets a later item depend on a replayed item: the dependency is the job it replays', async () => {
      const { store } = await openStore();
      const existing = await insertOne(store, { idempotencyKey: 'parent' });
      const replay = newJob({ idempotencyKey: 'parent' });
      const child = newJob({ dependsOn: [replay.id] });
      const [parentOutcome, childJob] = await insertOk(store, [replay, child]);
      assert.equal(parentOutcome?.id, existing.id);
      assert.deepEqual(childJob?.dependsOn, [existing.id]);
      assert.equal(childJob?.status, 'waiting');
      const attempt = await claimOne(store);
      assert.equal(attempt.id, existing.id);
      assert.deepEqual(await finishOne(store, attempt, completed(1)), { status: 'completed', others: 1 });
      assert.equal((await mustGet(store, child.id)).status, 'queued');
    });

    it('refuses a batch that would exceed the capacity, writes nothing, and does not count replays', async () => {
      const { store } = await openStore(2);
      await insertOne(store, { idempotencyKey: 'a' });
      await insertOne(store);
      const extra = newJob();
      assert.deepEqual(await store.insert([extra]), { ok: false, reason: 'queue_full', pending: 2, capacity: 2 });
      assert.equal(await store.get(extra.id), null);

      const replay = await store.insert([newJob({ idempotencyKey: 'a' })]);
      assert.ok(replay.ok);
      assert.equal(replay.outcomes[0]?.created, false);

      const mixed = newJob();
      const refused = await store.insert([newJob({ idempotencyKey: 'a' }), mixed]);
      assert.deepEqual(refused, { ok: false, reason: 'queue_full', pending: 2, capacity: 2 });
      assert.equal(await store.get(mixed.id), null);

      await claimOne(store);
      // A running job is not pending: there is room for one more, and no more.
      await insertOne(store);
      assert.equal((await store.insert([newJob()])).ok, false);
      await assertCountsExact(store);
    });

    it('admits a job that is failed at insert (dependency_failed) even when full: it is not pending', async () => {
      const { store } = await openStore(1);
      const parent = await insertOne(store);
      changes(await store.cancel(parent.id));
      await insertOne(store);
      const child = await insertOne(store, { dependsOn: [parent.id] });
      assert.equal(child.status, 'failed');
      assert.equal((await store.counts()).pending, 1);
      await assertCountsExact(store);
    });

    it('stores nothing of a batch that reuses an existing id, and keeps the counts and admission exact', async () => {
      // Room for the whole batch, so that the reused id, not the capacity, refuses it.
      const { store } = await openStore(4);
      const existing = await insertOne(store);
      const fresh = newJob();
      const waiting = newJob({ dependsOn: [fresh.id] });
      await assert.rejects(store.insert([fresh, waiting, newJob({ id: existing.id })]));
      assert.equal(await store.get(fresh.id), null);
      assert.equal(await store.get(waiting.id), null);
      await assertCountsExact(store);
      // The refused batch takes no room: three more fit.
      await insertOk(store, [newJob(), newJob(), newJob()]);
      await assertCountsExact(store);
    });

    it('fails the whole batch with unknown_dependency when a dependency does not exist', async () => {
      const { store } = await openStore();
      const ok = newJob();
      const result = await store.insert([ok, newJob({ dependsOn: ['no-such-job'] })]);
      assert.deepEqual(result, { ok: false, reason: 'unknown_dependency', index: 1, dependency: 'no-such-job' });
      assert.equal(await store.get(ok.id), null);
      await assertCountsExact(store);
    });

    it('lets a dependency name an earlier job of the same batch, not a later one', async () => {
      const { store } = await openStore();
      const parent = newJob();
      const child = newJob({ dependsOn: [parent.id] });
      const [p, c] = await insertOk(store, [parent, child]);
      assert.equal(p?.status, 'queued');
      assert.equal(c?.status, 'waiting');
      assert.deepEqual(c?.dependsOn, [parent.id]);

      const later = newJob();
      const early = newJob({ dependsOn: [later.id] });
      const result = await store.insert([early, later]);
      assert.deepEqual(result, { ok: false, reason: 'unknown_dependency', index: 0, dependency: later.id });
      assert.equal(await store.get(later.id), null);
    });

    it('derives the initial status from the dependencies', async () => {
      const { store, clock } = await openStore();
      const done = await insertOne(store);
      assert.ok(await finishOne(store, await claimOne(store), completed(1)));
      const cancelled = await insertOne(store);
      changes(await store.cancel(cancelled.id));
      const open = await insertOne(store);
      clock.advance(2);

      assert.equal((await insertOne(store, { dependsOn: [done.id] })).status, 'queued');
      assert.equal((await insertOne(store, { dependsOn: [done.id, open.id] })).status, 'waiting');
      const delayed = await insertOne(store, { dependsOn: [done.id], runAt: T0 + 50 });
      assert.equal(delayed.status, 'scheduled');
      const doomed = await insertOne(store, { dependsOn: [open.id, cancelled.id] });
      assert.equal(doomed.status, 'failed');
      assert.equal(doomed.finishedAt, T0 + 2);
      assert.equal(doomed.error?.code, 'dependency_failed');
      assert.equal(doomed.error?.attempt, 0);
      assert.match(doomed.error?.message ?? '', new RegExp(cancelled.id));
      assert.deepEqual(await store.get(doomed.id), doomed);
      await assertCountsExact(store);
    });
  });

  describe('insert: dedupe', () => {
    it('answers an unfinished job of the same key instead of a new one, and a new job once it is finished', async () => {
      const { store } = await openStore();
      const first = await store.insert([newJob({ dedupeKey: 'work-1' })]);
      assert.ok(first.ok);
      const original = first.outcomes[0]?.job as Job;
      const again = await store.insert([newJob({ dedupeKey: 'work-1', payload: { n: 2 } })]);
      assert.ok(again.ok);
      assert.equal(again.outcomes[0]?.created, false);
      assert.equal(again.outcomes[0]?.dedupe, 'inflight');
      assert.equal(again.outcomes[0]?.job.id, original.id, 'a different payload with the same key: the existing job');
      assert.equal((await store.counts()).pending, 1);
      const claimed = await claimOne(store);
      assert.equal((await finishOne(store, claimed, completed({ ok: 1 })))?.status, 'completed');
      const after = await store.insert([newJob({ dedupeKey: 'work-1' })]);
      assert.ok(after.ok);
      assert.equal(after.outcomes[0]?.created, true, 'without reuseMs a finished job is not reused');
    });

    it('reuses a completed result within reuseMs and not after', async () => {
      const { store, clock } = await openStore();
      clock.set(T0);
      await insertOk(store, [newJob({ dedupeKey: 'cached' })]);
      const claimed = await claimOne(store);
      clock.set(T0 + 100);
      await finishOne(store, claimed, completed({ answer: 42 }));
      clock.set(T0 + 100 + 5000);
      const within = await store.insert([newJob({ dedupeKey: 'cached', reuseMs: 5000 })]);
      assert.ok(within.ok);
      assert.equal(within.outcomes[0]?.created, false);
      assert.equal(within.outcomes[0]?.dedupe, 'result');
      assert.deepEqual(within.outcomes[0]?.job.result, { answer: 42 });
      clock.set(T0 + 100 + 5001);
      const later = await store.insert([newJob({ dedupeKey: 'cached', reuseMs: 5000 })]);
      assert.ok(later.ok);
      assert.equal(later.outcomes[0]?.created, true, 'the result is older than reuseMs');
    });

    it('lets a later item of a batch stand for an earlier one, its dependents depending on the job kept', async () => {
      const { store } = await openStore();
      const existing = (await insertOk(store, [newJob({ dedupeKey: 'parent-work' })]))[0] as Job;
      const a = newJob({ dedupeKey: 'parent-work' });
      const b = newJob({ dedupeKey: 'twin' });
      const c = newJob({ dedupeKey: 'twin' });
      const child = newJob({ dependsOn: [a.id, c.id] });
      const result = await store.insert([a, b, c, child]);
      assert.ok(result.ok);
      const [ra, rb, rc, rchild] = result.outcomes;
      assert.equal(ra?.created, false);
      assert.equal(ra?.job.id, existing.id);
      assert.equal(rb?.created, true);
      assert.equal(rc?.created, false);
      assert.equal(rc?.job.id, b.id, 'the second item of a key stands for the first');
      assert.equal(rchild?.created, true);
      assert.deepEqual(rchild?.job.dependsOn, [existing.id, b.id]);
      assert.equal(rchild?.job.status, 'waiting');
    });

    it('refuses to retry a job while another unfinished job holds its dedupe key', async () => {
      const { store } = await openStore();
      const first = (await insertOk(store, [newJob({ dedupeKey: 'k' })]))[0] as Job;
      await store.cancel(first.id);
      const second = (await insertOk(store, [newJob({ dedupeKey: 'k' })]))[0] as Job;
      assert.notEqual(second.id, first.id);
      const refused = await store.retry(first.id);
      assert.ok(isInvalidState(refused), JSON.stringify(refused));
      assert.match((refused as InvalidState).message, new RegExp(second.id));
      await store.cancel(second.id);
      const retried = await store.retry(first.id);
      assert.ok(retried !== null && !isInvalidState(retried));
      assert.equal(retried.job.status, 'queued');
    });
  });
}
