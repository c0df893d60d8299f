import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { JOB_STATUSES, type Job, type JobStatus, type NewJob, PRIORITY_LEVELS } from '../../src/jobs/model.js';
import {
  type Changes,
  type InsertResult,
  type InvalidState,
  isInvalidState,
  type JobStore,
  type Lease,
  type StoreOptions,
} from '../../src/store/store.js';

/** Opens a fresh, empty store. */
export type MakeStore = (options: StoreOptions) => Promise<JobStore>;

export const T0 = 1_700_000_000_000;

let sequence = 0;
/** Ids that sort in creation order, like the UUIDv7 ids the scheduler makes. */
export function nextId(): string {
  sequence++;
  return `job-${String(sequence).padStart(9, '0')}`;
}

export function newJob(overrides: Partial<NewJob> = {}): NewJob {
  return {
    id: nextId(),
    type: 'test.echo',
    priority: 5,
    payload: { n: 1 },
    maxAttempts: 3,
    timeoutMs: 1000,
    backoff: { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 'none' },
    idempotencyKey: null,
    dependsOn: [],
    metadata: {},
    runAt: null,
    createdAt: T0,
    ...overrides,
  };
}

export function lease(owner = 'worker-1', expiresAt = T0 + 60_000): Lease {
  return { owner, expiresAt };
}

export async function insertOk(store: JobStore, jobs: NewJob[], now = T0): Promise<Job[]> {
  const result = await store.insert(jobs, now);
  assert.equal(result.ok, true, `insert failed: ${JSON.stringify(result)}`);
  return (result as Extract<InsertResult, { ok: true }>).outcomes.map((o) => o.job);
}

export async function insertOne(store: JobStore, overrides: Partial<NewJob> = {}, now = T0): Promise<Job> {
  const [job] = await insertOk(store, [newJob(overrides)], now);
  assert.ok(job);
  return job;
}

export async function mustGet(store: JobStore, id: string): Promise<Job> {
  const job = await store.get(id);
  assert.ok(job, `job ${id} should exist`);
  return job;
}

function changes(value: Changes | InvalidState | null): Changes {
  assert.ok(value !== null && !isInvalidState(value), `expected changes, got ${JSON.stringify(value)}`);
  return value;
}

function invalid(value: unknown): InvalidState {
  assert.ok(isInvalidState(value), `expected an invalid state, got ${JSON.stringify(value)}`);
  return value;
}

async function allJobs(store: JobStore): Promise<Job[]> {
  const jobs: Job[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await store.list({ limit: 500, ...(cursor === undefined ? {} : { cursor }) });
    for (const summary of page.jobs) jobs.push(await mustGet(store, summary.id));
    if (page.nextCursor === null) return jobs;
    cursor = page.nextCursor;
  }
}

/** counts() agrees with the jobs the store holds. */
export async function assertCountsExact(store: JobStore): Promise<void> {
  const jobs = await allJobs(store);
  const byStatus = Object.fromEntries(JOB_STATUSES.map((s) => [s, 0])) as Record<JobStatus, number>;
  const queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
  let oldest: number | null = null;
  for (const job of jobs) {
    byStatus[job.status]++;
    if (job.status === 'queued') {
      queuedByPriority[job.priority] = (queuedByPriority[job.priority] ?? 0) + 1;
      if (job.readyAt !== null && (oldest === null || job.readyAt < oldest)) oldest = job.readyAt;
    }
  }
  const pending = byStatus.waiting + byStatus.scheduled + byStatus.queued + byStatus.retrying;
  assert.deepEqual(await store.counts(), { byStatus, queuedByPriority, pending, oldestQueuedReadyAt: oldest });
}

/** Defines the behaviour every JobStore must have, as node:test cases. */
export function runStoreConformance(name: string, makeStore: MakeStore): void {
  describe(`${name} store: JobStore conformance`, () => {
    const open: JobStore[] = [];
    const openStore = async (capacity = 10_000): Promise<JobStore> => {
      const store = await makeStore({ capacity, random: () => 0.5 });
      open.push(store);
      return store;
    };
    afterEach(async () => {
      for (const store of open.splice(0)) await store.close();
    });

    describe('insert', () => {
      it('creates a queued job with every field set', async () => {
        const store = await openStore();
        const input = newJob({ priority: 7, payload: { a: [1, 2] }, metadata: { team: 'x' }, idempotencyKey: 'k1' });
        const [job] = await insertOk(store, [input], T0 + 5);
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
          timeoutMs: 1000,
          backoff: { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 'none' },
          progress: null,
          idempotencyKey: 'k1',
          dependsOn: [],
          metadata: { team: 'x' },
          runAt: null,
          createdAt: T0,
          startedAt: null,
          finishedAt: null,
          readyAt: T0 + 5,
        });
        assert.deepEqual(await store.get(input.id), job);
        assert.equal(await store.get('missing'), null);
      });

      it('makes a job with a future runAt scheduled and one with a past runAt queued', async () => {
        const store = await openStore();
        const later = await insertOne(store, { runAt: T0 + 1000 });
        const past = await insertOne(store, { runAt: T0 - 1000 });
        const exact = await insertOne(store, { runAt: T0 });
        assert.equal(later.status, 'scheduled');
        assert.equal(later.runAt, T0 + 1000);
        assert.equal(later.readyAt, null);
        for (const job of [past, exact]) {
          assert.equal(job.status, 'queued');
          assert.equal(job.runAt, null);
          assert.equal(job.readyAt, T0);
        }
        await assertCountsExact(store);
      });

      it('replays a job whose idempotency key, type and payload match, whatever the key order', async () => {
        const store = await openStore();
        const first = await insertOne(store, { idempotencyKey: 'order-1', payload: { a: 1, b: { c: 2, d: [3] } } });
        const again = newJob({ idempotencyKey: 'order-1', payload: { b: { d: [3], c: 2 }, a: 1 } });
        const result = await store.insert([again], T0 + 10);
        assert.ok(result.ok);
        assert.equal(result.outcomes[0]?.created, false);
        assert.deepEqual(result.outcomes[0]?.job, first);
        assert.equal(await store.get(again.id), null);
        assert.equal((await store.counts()).pending, 1);
      });

      it('fails the whole batch with idempotency_conflict when a key was used with another payload or type', async () => {
        const store = await openStore();
        const first = await insertOne(store, { idempotencyKey: 'k', payload: { n: 1 } });
        const fresh = newJob();
        const otherPayload = await store.insert([fresh, newJob({ idempotencyKey: 'k', payload: { n: 2 } })], T0);
        assert.deepEqual(otherPayload, { ok: false, reason: 'idempotency_conflict', index: 1, existingId: first.id });
        const otherType = await store.insert([newJob({ idempotencyKey: 'k', type: 'test.other' })], T0);
        assert.deepEqual(otherType, { ok: false, reason: 'idempotency_conflict', index: 0, existingId: first.id });
        assert.equal(await store.get(fresh.id), null);
        await assertCountsExact(store);
      });

      it('treats a key repeated inside one batch as a replay of the earlier item, or a conflict', async () => {
        const store = await openStore();
        const a = newJob({ idempotencyKey: 'same' });
        const b = newJob({ idempotencyKey: 'same' });
        const result = await store.insert([a, b], T0);
        assert.ok(result.ok);
        assert.deepEqual(
          result.outcomes.map((o) => [o.created, o.job.id]),
          [
            [true, a.id],
            [false, a.id],
          ],
        );
        const c = newJob({ idempotencyKey: 'other' });
        const d = newJob({ idempotencyKey: 'other', payload: { n: 99 } });
        assert.deepEqual(await store.insert([c, d], T0), {
          ok: false,
          reason: 'idempotency_conflict',
          index: 1,
          existingId: c.id,
        });
        assert.equal(await store.get(c.id), null);
      });

      it('refuses a batch that would exceed the capacity, writes nothing, and does not count replays', async () => {
        const store = await openStore(2);
        await insertOne(store, { idempotencyKey: 'a' });
        await insertOne(store);
        const extra = newJob();
        assert.deepEqual(await store.insert([extra], T0), { ok: false, reason: 'queue_full', pending: 2, capacity: 2 });
        assert.equal(await store.get(extra.id), null);

        const replay = await store.insert([newJob({ idempotencyKey: 'a' })], T0);
        assert.ok(replay.ok);
        assert.equal(replay.outcomes[0]?.created, false);

        const mixed = newJob();
        const refused = await store.insert([newJob({ idempotencyKey: 'a' }), mixed], T0);
        assert.equal(refused.ok, false);
        assert.equal(await store.get(mixed.id), null);

        const [claimed] = await store.claim(1, lease(), T0);
        assert.ok(claimed);
        // A running job is not pending: there is room for one more.
        await insertOne(store);
        await assertCountsExact(store);
      });

      it('admits a job that is failed at insert (dependency_failed) even when full: it is not pending', async () => {
        const store = await openStore(1);
        const parent = await insertOne(store);
        await store.cancel(parent.id, T0);
        await insertOne(store);
        const child = await insertOne(store, { dependsOn: [parent.id] });
        assert.equal(child.status, 'failed');
        assert.equal((await store.counts()).pending, 1);
      });

      it('fails the whole batch with unknown_dependency when a dependency does not exist', async () => {
        const store = await openStore();
        const ok = newJob();
        const result = await store.insert([ok, newJob({ dependsOn: ['no-such-job'] })], T0);
        assert.deepEqual(result, { ok: false, reason: 'unknown_dependency', index: 1, dependency: 'no-such-job' });
        assert.equal(await store.get(ok.id), null);
        await assertCountsExact(store);
      });

      it('lets a dependency name an earlier job of the same batch, not a later one', async () => {
        const store = await openStore();
        const parent = newJob();
        const child = newJob({ dependsOn: [parent.id] });
        const [p, c] = await insertOk(store, [parent, child]);
        assert.equal(p?.status, 'queued');
        assert.equal(c?.status, 'waiting');
        assert.deepEqual(c?.dependsOn, [parent.id]);

        const later = newJob();
        const early = newJob({ dependsOn: [later.id] });
        const result = await store.insert([early, later], T0);
        assert.deepEqual(result, { ok: false, reason: 'unknown_dependency', index: 0, dependency: later.id });
      });

      it('derives the initial status from the dependencies', async () => {
        const store = await openStore();
        const done = await insertOne(store);
        await store.claim(1, lease(), T0);
        await store.finish(done.id, lease(), { kind: 'completed', result: 1 }, T0 + 1);
        const failed = await insertOne(store);
        await store.cancel(failed.id, T0 + 1);
        const open = await insertOne(store);

        assert.equal((await insertOne(store, { dependsOn: [done.id] }, T0 + 2)).status, 'queued');
        assert.equal((await insertOne(store, { dependsOn: [done.id, open.id] }, T0 + 2)).status, 'waiting');
        assert.equal((await insertOne(store, { dependsOn: [done.id], runAt: T0 + 50 }, T0 + 2)).status, 'scheduled');
        const doomed = await insertOne(store, { dependsOn: [open.id, failed.id] }, T0 + 2);
        assert.equal(doomed.status, 'failed');
        assert.equal(doomed.finishedAt, T0 + 2);
        assert.equal(doomed.error?.code, 'dependency_failed');
        assert.equal(doomed.error?.attempt, 0);
        assert.match(doomed.error?.message ?? '', new RegExp(failed.id));
        await assertCountsExact(store);
      });
    });

    describe('claim', () => {
      it('takes the highest priority first, then the earliest ready', async () => {
        const store = await openStore();
        const a = await insertOne(store, { priority: 5 }, T0 + 1);
        const b = await insertOne(store, { priority: 5 }, T0 + 2);
        const c = await insertOne(store, { priority: 9 }, T0 + 3);
        const d = await insertOne(store, { priority: 0 }, T0 + 4);
        const e = await insertOne(store, { priority: 9 }, T0 + 5);
        const claimed = await store.claim(10, lease(), T0 + 10);
        assert.deepEqual(
          claimed.map((j) => j.id),
          [c.id, e.id, a.id, b.id, d.id],
        );
      });

      it('claims at most limit jobs', async () => {
        const store = await openStore();
        await insertOk(store, [newJob(), newJob(), newJob()]);
        assert.equal((await store.claim(0, lease(), T0)).length, 0);
        assert.equal((await store.claim(2, lease(), T0)).length, 2);
        assert.equal((await store.claim(2, lease(), T0)).length, 1);
        assert.equal((await store.claim(2, lease(), T0)).length, 0);
      });

      it('makes a claimed job running under the lease', async () => {
        const store = await openStore();
        const job = await insertOne(store);
        const [claimed] = await store.claim(1, lease('w', T0 + 500), T0 + 7);
        assert.ok(claimed);
        assert.equal(claimed.id, job.id);
        assert.equal(claimed.status, 'running');
        assert.equal(claimed.attempts, 1);
        assert.equal(claimed.startedAt, T0 + 7);
        assert.equal(claimed.runAt, null);
        assert.equal(claimed.progress, null);
        assert.deepEqual(claimed.payload, { n: 1 });
        assert.deepEqual(claimed.parents, []);
        const stored = await mustGet(store, job.id);
        assert.equal(stored.status, 'running');
        await assertCountsExact(store);
      });

      it('claims a delayed job only once it is due', async () => {
        const store = await openStore();
        const job = await insertOne(store, { runAt: T0 + 1000 });
        assert.equal(await store.nextDueAt(), T0 + 1000);
        assert.deepEqual(await store.claim(5, lease(), T0 + 999), []);
        const [claimed] = await store.claim(5, lease(), T0 + 1000);
        assert.equal(claimed?.id, job.id);
        assert.equal(await store.nextDueAt(), null);
      });

      it('promotes due jobs in runAt order, behind jobs already queued', async () => {
        const store = await openStore();
        const queued = await insertOne(store, {}, T0);
        const late = await insertOne(store, { runAt: T0 + 200 });
        const early = await insertOne(store, { runAt: T0 + 100 });
        const claimed = await store.claim(3, lease(), T0 + 300);
        assert.deepEqual(
          claimed.map((j) => j.id),
          [queued.id, early.id, late.id],
        );
      });

      it('puts a new job of higher priority before an older backlog', async () => {
        const store = await openStore();
        await insertOk(store, [newJob({ priority: 1 }), newJob({ priority: 1 })]);
        const urgent = await insertOne(store, { priority: 8 }, T0 + 100);
        const [first] = await store.claim(1, lease(), T0 + 100);
        assert.equal(first?.id, urgent.id);
      });

      it('hands the completed dependencies to the dependent in dependsOn order', async () => {
        const store = await openStore();
        const p1 = await insertOne(store, { type: 'test.one' });
        const p2 = await insertOne(store, { type: 'test.two' });
        const child = await insertOne(store, { dependsOn: [p2.id, p1.id] });
        await store.claim(2, lease(), T0);
        await store.finish(p1.id, lease(), { kind: 'completed', result: { v: 1 } }, T0 + 1);
        await store.finish(p2.id, lease(), { kind: 'completed', result: [2] }, T0 + 2);
        const [claimed] = await store.claim(1, lease(), T0 + 3);
        assert.equal(claimed?.id, child.id);
        assert.deepEqual(claimed?.parents, [
          { id: p2.id, type: 'test.two', result: [2] },
          { id: p1.id, type: 'test.one', result: { v: 1 } },
        ]);
      });
    });

    describe('finish', () => {
      it('completes a job: result, finishedAt, lease gone', async () => {
        const store = await openStore();
        const job = await insertOne(store);
        await store.claim(1, lease(), T0);
        const done = changes(await store.finish(job.id, lease(), { kind: 'completed', result: { ok: 1 } }, T0 + 9));
        assert.equal(done.job.status, 'completed');
        assert.deepEqual(done.job.result, { ok: 1 });
        assert.equal(done.job.finishedAt, T0 + 9);
        assert.deepEqual(done.others, []);
        assert.deepEqual(await store.get(job.id), done.job);
        await assertCountsExact(store);
      });

      it('refuses an outcome from a lease that no longer holds the job', async () => {
        const store = await openStore();
        const job = await insertOne(store);
        await store.claim(1, lease('w1'), T0);
        const ok = { kind: 'completed', result: 1 } as const;
        assert.equal(await store.finish(job.id, lease('w2'), ok, T0 + 1), null);
        assert.equal(await store.finish('missing', lease('w1'), ok, T0 + 1), null);
        changes(await store.cancel(job.id, T0 + 2));
        assert.equal(await store.finish(job.id, lease('w1'), ok, T0 + 3), null);
        assert.equal((await mustGet(store, job.id)).status, 'cancelled');

        const other = await insertOne(store);
        await store.claim(1, lease('w1'), T0);
        assert.ok(await store.finish(other.id, lease('w1'), ok, T0 + 1));
        assert.equal(await store.finish(other.id, lease('w1'), ok, T0 + 2), null);
        await assertCountsExact(store);
      });

      it('retries a failed attempt at retryAt, and counts the attempts', async () => {
        const store = await openStore();
        const job = await insertOne(store, { maxAttempts: 3 });
        await store.claim(1, lease(), T0);
        const error = { code: 'handler_error', message: 'boom', attempt: 1 } as const;
        const failed = changes(
          await store.finish(job.id, lease(), { kind: 'failed', error, retryAt: T0 + 500 }, T0 + 1),
        );
        assert.equal(failed.job.status, 'retrying');
        assert.equal(failed.job.runAt, T0 + 500);
        assert.deepEqual(failed.job.error, error);
        assert.equal(failed.job.attempts, 1);
        assert.equal(await store.nextDueAt(), T0 + 500);
        await assertCountsExact(store);

        assert.deepEqual(await store.claim(1, lease(), T0 + 499), []);
        const [again] = await store.claim(1, lease(), T0 + 500);
        assert.equal(again?.id, job.id);
        assert.equal(again?.attempts, 2);
        await assertCountsExact(store);
      });

      it('fails a job for good when retryAt is null', async () => {
        const store = await openStore();
        const job = await insertOne(store);
        await store.claim(1, lease(), T0);
        const error = { code: 'timeout', message: 'too slow', attempt: 1 } as const;
        const failed = changes(await store.finish(job.id, lease(), { kind: 'failed', error, retryAt: null }, T0 + 3));
        assert.equal(failed.job.status, 'failed');
        assert.equal(failed.job.finishedAt, T0 + 3);
        assert.equal(failed.job.runAt, null);
        assert.deepEqual(failed.job.error, error);
        await assertCountsExact(store);
      });

      it('gives a released job its attempt back', async () => {
        const store = await openStore();
        const job = await insertOne(store, { maxAttempts: 1 });
        await store.claim(1, lease(), T0);
        const error = { code: 'interrupted', message: 'shutting down', attempt: 1 } as const;
        const released = changes(
          await store.finish(job.id, lease(), { kind: 'released', error, retryAt: T0 + 10 }, T0 + 1),
        );
        assert.equal(released.job.status, 'retrying');
        assert.equal(released.job.attempts, 0);
        assert.equal(released.job.runAt, T0 + 10);
        assert.deepEqual(released.job.error, error);
        const [again] = await store.claim(1, lease(), T0 + 10);
        assert.equal(again?.attempts, 1);
      });

      it('releases a dependent when its last dependency completes', async () => {
        const store = await openStore();
        const p1 = await insertOne(store);
        const p2 = await insertOne(store);
        const child = await insertOne(store, { dependsOn: [p1.id, p2.id] });
        const delayed = await insertOne(store, { dependsOn: [p1.id], runAt: T0 + 10_000 });
        await store.claim(2, lease(), T0);
        const first = changes(await store.finish(p1.id, lease(), { kind: 'completed', result: 1 }, T0 + 5));
        assert.deepEqual(
          first.others.map((j) => [j.id, j.status]),
          [[delayed.id, 'scheduled']],
        );
        assert.equal((await mustGet(store, child.id)).status, 'waiting');
        await assertCountsExact(store);
        const second = changes(await store.finish(p2.id, lease(), { kind: 'completed', result: 2 }, T0 + 6));
        assert.deepEqual(
          second.others.map((j) => [j.id, j.status, j.readyAt]),
          [[child.id, 'queued', T0 + 6]],
        );
        assert.equal(await store.nextDueAt(), T0 + 10_000);
        await assertCountsExact(store);
      });

      it('fails the dependents of a failed job, transitively', async () => {
        const store = await openStore();
        const a = await insertOne(store);
        const b = await insertOne(store, { dependsOn: [a.id] });
        const c = await insertOne(store, { dependsOn: [b.id] });
        const done = await insertOne(store, { priority: 0 });
        const d = await insertOne(store, { dependsOn: [done.id, a.id] });
        await store.claim(1, lease(), T0);
        const error = { code: 'handler_error', message: 'x', attempt: 1 } as const;
        const result = changes(await store.finish(a.id, lease(), { kind: 'failed', error, retryAt: null }, T0 + 1));
        assert.deepEqual(result.others.map((j) => j.id).sort(), [b.id, c.id, d.id].sort());
        for (const job of result.others) {
          assert.equal(job.status, 'failed');
          assert.equal(job.error?.code, 'dependency_failed');
          assert.equal(job.finishedAt, T0 + 1);
        }
        assert.match((await mustGet(store, c.id)).error?.message ?? '', new RegExp(b.id));
        assert.equal((await mustGet(store, done.id)).status, 'queued');
        await assertCountsExact(store);
      });

      it('does not fail dependents on a retryable failure', async () => {
        const store = await openStore();
        const a = await insertOne(store);
        const b = await insertOne(store, { dependsOn: [a.id] });
        await store.claim(1, lease(), T0);
        const error = { code: 'handler_error', message: 'x', attempt: 1 } as const;
        const result = changes(await store.finish(a.id, lease(), { kind: 'failed', error, retryAt: T0 + 1 }, T0));
        assert.deepEqual(result.others, []);
        assert.equal((await mustGet(store, b.id)).status, 'waiting');
      });
    });

    describe('cancel, retry, remove', () => {
      it('cancels a queued job and never hands it out', async () => {
        const store = await openStore();
        const job = await insertOne(store);
        const result = changes(await store.cancel(job.id, T0 + 4));
        assert.equal(result.job.status, 'cancelled');
        assert.deepEqual(result.job.error, { code: 'cancelled', message: 'cancelled by request', attempt: 0 });
        assert.equal(result.job.finishedAt, T0 + 4);
        assert.deepEqual(await store.claim(5, lease(), T0 + 5), []);
        await assertCountsExact(store);
      });

      it('cancels a running job (its attempt number in the error) and a scheduled one', async () => {
        const store = await openStore();
        const running = await insertOne(store);
        const scheduled = await insertOne(store, { runAt: T0 + 100 });
        await store.claim(1, lease(), T0);
        const r = changes(await store.cancel(running.id, T0 + 1));
        assert.equal(r.job.error?.attempt, 1);
        changes(await store.cancel(scheduled.id, T0 + 1));
        assert.equal(await store.nextDueAt(), null);
        assert.deepEqual(await store.claim(5, lease(), T0 + 1000), []);
        await assertCountsExact(store);
      });

      it('fails the dependents of a cancelled job', async () => {
        const store = await openStore();
        const a = await insertOne(store);
        const b = await insertOne(store, { dependsOn: [a.id] });
        const result = changes(await store.cancel(a.id, T0));
        assert.deepEqual(
          result.others.map((j) => [j.id, j.status, j.error?.code]),
          [[b.id, 'failed', 'dependency_failed']],
        );
        assert.match(result.others[0]?.error?.message ?? '', /cancelled/);
        await assertCountsExact(store);
      });

      it('refuses to cancel a finished job and answers null for a missing one', async () => {
        const store = await openStore();
        const job = await insertOne(store);
        await store.claim(1, lease(), T0);
        await store.finish(job.id, lease(), { kind: 'completed', result: null }, T0);
        const refused = invalid(await store.cancel(job.id, T0));
        assert.equal(refused.status, 'completed');
        assert.match(refused.message, /job is completed; only a job that is not finished can be cancelled/);
        assert.equal(await store.cancel('missing', T0), null);
      });

      it('retries a failed job with a fresh attempt budget, keeping the error', async () => {
        const store = await openStore();
        const job = await insertOne(store, { maxAttempts: 1 });
        await store.claim(1, lease(), T0);
        const error = { code: 'handler_error', message: 'x', attempt: 1 } as const;
        await store.finish(job.id, lease(), { kind: 'failed', error, retryAt: null }, T0 + 1);
        const retried = changes(await store.retry(job.id, T0 + 50));
        assert.equal(retried.job.status, 'queued');
        assert.equal(retried.job.attempts, 0);
        assert.deepEqual(retried.job.error, error);
        assert.equal(retried.job.finishedAt, null);
        assert.equal(retried.job.result, null);
        assert.equal(retried.job.readyAt, T0 + 50);
        await assertCountsExact(store);
        const [again] = await store.claim(1, lease(), T0 + 51);
        assert.equal(again?.id, job.id);
        assert.equal(again?.attempts, 1);
      });

      it('retries a cancelled job into waiting when its dependencies are not all completed', async () => {
        const store = await openStore();
        const parent = await insertOne(store);
        const child = await insertOne(store, { dependsOn: [parent.id] });
        changes(await store.cancel(child.id, T0));
        assert.equal(changes(await store.retry(child.id, T0 + 1)).job.status, 'waiting');
        await store.claim(1, lease(), T0 + 2);
        const done = changes(await store.finish(parent.id, lease(), { kind: 'completed', result: 1 }, T0 + 3));
        assert.deepEqual(
          done.others.map((j) => [j.id, j.status]),
          [[child.id, 'queued']],
        );
        await assertCountsExact(store);
      });

      it('refuses to retry a job that is not failed or cancelled, or whose dependency is gone', async () => {
        const store = await openStore();
        const queued = await insertOne(store);
        assert.equal(invalid(await store.retry(queued.id, T0)).status, 'queued');
        await store.claim(1, lease(), T0);
        assert.equal(invalid(await store.retry(queued.id, T0)).status, 'running');
        await store.finish(queued.id, lease(), { kind: 'completed', result: 1 }, T0);
        assert.match(invalid(await store.retry(queued.id, T0)).message, /completed/);
        assert.equal(await store.retry('missing', T0), null);

        const parent = await insertOne(store);
        const child = await insertOne(store, { dependsOn: [parent.id] });
        changes(await store.cancel(parent.id, T0));
        assert.equal((await mustGet(store, child.id)).status, 'failed');
        assert.equal(await store.remove(parent.id), 'removed');
        const gone = invalid(await store.retry(child.id, T0));
        assert.equal(gone.status, 'failed');
        assert.match(gone.message, new RegExp(parent.id));
      });

      it('does not hand out a cancelled-then-retried job twice or out of order', async () => {
        const store = await openStore();
        const a = await insertOne(store, {}, T0);
        const b = await insertOne(store, {}, T0 + 1);
        changes(await store.cancel(a.id, T0 + 2));
        changes(await store.retry(a.id, T0 + 3));
        const claimed = await store.claim(10, lease(), T0 + 4);
        assert.deepEqual(
          claimed.map((j) => j.id),
          [b.id, a.id],
        );
        await assertCountsExact(store);
      });

      it('removes a finished job and refuses to remove one that is not', async () => {
        const store = await openStore();
        const job = await insertOne(store);
        const refused = invalid(await store.remove(job.id));
        assert.equal(refused.status, 'queued');
        changes(await store.cancel(job.id, T0));
        assert.equal(await store.remove(job.id), 'removed');
        assert.equal(await store.get(job.id), null);
        assert.equal(await store.remove(job.id), null);
        await assertCountsExact(store);
      });
    });

    describe('leases', () => {
      it('extends held leases and answers the ids no longer held', async () => {
        const store = await openStore();
        const a = await insertOne(store);
        const b = await insertOne(store);
        await store.claim(2, lease('w1', T0 + 100), T0);
        assert.deepEqual(await store.heartbeat([a.id, b.id], lease('w1', T0 + 10_000)), []);
        assert.deepEqual(await store.recoverExpired(T0 + 5000), []);
        await store.finish(b.id, lease('w1'), { kind: 'completed', result: 1 }, T0 + 1);
        assert.deepEqual(await store.heartbeat([a.id, b.id, 'missing'], lease('w1', T0 + 20_000)), [b.id, 'missing']);
        assert.deepEqual(await store.heartbeat([a.id], lease('w2', T0 + 20_000)), [a.id]);
        assert.deepEqual(await store.heartbeat([], lease('w1')), []);
      });

      it('records progress for the lease holder only; a new attempt starts without it', async () => {
        const store = await openStore();
        const job = await insertOne(store);
        await store.claim(1, lease('w1'), T0);
        const updated = await store.progress(job.id, lease('w1'), { percent: 40, message: 'step 2' });
        assert.deepEqual(updated?.progress, { percent: 40, message: 'step 2' });
        assert.equal(await store.progress(job.id, lease('w2'), { percent: 50, message: null }), null);
        assert.deepEqual((await mustGet(store, job.id)).progress, { percent: 40, message: 'step 2' });
        const error = { code: 'handler_error', message: 'x', attempt: 1 } as const;
        await store.finish(job.id, lease('w1'), { kind: 'failed', error, retryAt: T0 }, T0);
        assert.equal(await store.progress(job.id, lease('w1'), { percent: 60, message: null }), null);
        const [again] = await store.claim(1, lease('w1'), T0 + 1);
        assert.equal(again?.progress, null);
      });

      it('recovers a job whose lease expired: retrying as interrupted, at now + backoff', async () => {
        const store = await openStore();
        const job = await insertOne(store, { backoff: { initialMs: 100, factor: 2, maxMs: 1000, jitter: 'none' } });
        const healthy = await insertOne(store);
        await store.claim(1, lease('dead', T0 + 100), T0);
        await store.claim(1, lease('alive', T0 + 10_000), T0);
        const recovered = await store.recoverExpired(T0 + 101);
        assert.deepEqual(
          recovered.map((j) => j.id),
          [job.id],
        );
        const [r] = recovered;
        assert.equal(r?.status, 'retrying');
        assert.equal(r?.error?.code, 'interrupted');
        assert.equal(r?.error?.attempt, 1);
        assert.equal(r?.runAt, T0 + 101 + 100);
        assert.equal((await mustGet(store, healthy.id)).status, 'running');
        assert.equal(await store.finish(job.id, lease('dead'), { kind: 'completed', result: 1 }, T0 + 102), null);
        assert.deepEqual(await store.recoverExpired(T0 + 102), []);
        await assertCountsExact(store);
        const [again] = await store.claim(1, lease('alive'), T0 + 201);
        assert.equal(again?.id, job.id);
      });

      it('fails a job whose expired lease was on its last attempt, and its dependents', async () => {
        const store = await openStore();
        const job = await insertOne(store, { maxAttempts: 1 });
        const child = await insertOne(store, { dependsOn: [job.id] });
        await store.claim(1, lease('dead', T0 + 100), T0);
        const recovered = await store.recoverExpired(T0 + 500);
        assert.deepEqual(
          recovered.map((j) => [j.id, j.status, j.error?.code]),
          [
            [job.id, 'failed', 'interrupted'],
            [child.id, 'failed', 'dependency_failed'],
          ],
        );
        assert.equal(recovered[0]?.finishedAt, T0 + 500);
        await assertCountsExact(store);
      });
    });

    describe('list', () => {
      it('pages newest first with a cursor, without payload or result', async () => {
        const store = await openStore();
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
            seen.push(item.id);
          }
          if (page.nextCursor === null) break;
          cursor = page.nextCursor;
        }
        assert.equal(pages, 3);
        assert.deepEqual(seen, ids);
        const exact = await store.list({ limit: 7 });
        assert.equal(exact.nextCursor, null);
      });

      it('filters by statuses and type across pages', async () => {
        const store = await openStore();
        const made: Job[] = [];
        for (let i = 0; i < 12; i++) {
          made.push(await insertOne(store, { type: i % 2 === 0 ? 'test.even' : 'test.odd' }));
        }
        for (const job of made.filter((_, i) => i % 3 === 0)) changes(await store.cancel(job.id, T0));
        await store.claim(2, lease(), T0);
        const all = await allJobs(store);
        const expect = (pred: (j: Job) => boolean) =>
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
        assert.deepEqual(
          await collect({ statuses: ['queued'] }),
          expect((j) => j.status === 'queued'),
        );
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
        assert.deepEqual(await collect({ type: 'test.none' }), []);
      });

      it('rejects a cursor it did not hand out', async () => {
        const store = await openStore();
        await assert.rejects(store.list({ limit: 5, cursor: '!!not a cursor!!' }), { code: 'invalid_cursor' });
      });
    });

    describe('counts', () => {
      it('stays exact through every kind of transition', async () => {
        const store = await openStore();
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
        await store.claim(1, lease(), T0 + 1);
        await check();
        changes(await store.finish(p9.id, lease(), { kind: 'completed', result: 1 }, T0 + 2));
        await check();
        assert.equal((await mustGet(store, waiting.id)).status, 'queued');
        changes(await store.cancel(p2.id, T0 + 3));
        await check();
        await store.claim(10, lease(), T0 + 100);
        await check();
        const error = { code: 'handler_error', message: 'x', attempt: 1 } as const;
        changes(await store.finish(delayed.id, lease(), { kind: 'failed', error, retryAt: T0 + 200 }, T0 + 101));
        changes(await store.finish(once.id, lease(), { kind: 'failed', error, retryAt: null }, T0 + 101));
        await check();
        changes(await store.retry(once.id, T0 + 102));
        changes(await store.retry(p2.id, T0 + 102));
        await check();
        assert.equal((await store.counts()).oldestQueuedReadyAt, T0 + 102);
        assert.equal(await store.remove(p9.id), 'removed');
        await check();
        await store.claim(10, lease(), T0 + 300);
        await check();
        const counts = await store.counts();
        assert.equal(counts.byStatus.running, 4);
        assert.equal(counts.pending, 0);
        assert.equal(counts.oldestQueuedReadyAt, null);
      });
    });

    describe('purge', () => {
      it('deletes finished jobs of the given statuses older than the cutoff', async () => {
        const store = await openStore();
        const old = await insertOne(store);
        const recent = await insertOne(store);
        const failed = await insertOne(store);
        const live = await insertOne(store);
        await store.claim(3, lease(), T0);
        await store.finish(old.id, lease(), { kind: 'completed', result: 1 }, T0 + 10);
        await store.finish(recent.id, lease(), { kind: 'completed', result: 1 }, T0 + 1000);
        const error = { code: 'handler_error', message: 'x', attempt: 1 } as const;
        await store.finish(failed.id, lease(), { kind: 'failed', error, retryAt: null }, T0 + 10);
        assert.equal(await store.purge(T0 + 500, ['completed', 'running']), 1);
        assert.equal(await store.get(old.id), null);
        assert.ok(await store.get(recent.id));
        assert.ok(await store.get(failed.id));
        assert.ok(await store.get(live.id));
        assert.equal(await store.purge(T0 + 500, ['failed']), 1);
        assert.equal(await store.purge(T0 + 500, ['failed', 'completed']), 0);
        await assertCountsExact(store);
      });

      it('purges more than one chunk', async () => {
        const store = await openStore();
        const jobs = await insertOk(
          store,
          Array.from({ length: 2300 }, () => newJob()),
        );
        await store.claim(2300, lease(), T0);
        await Promise.all(jobs.map((j) => store.finish(j.id, lease(), { kind: 'completed', result: 1 }, T0 + 1)));
        assert.equal(await store.purge(T0 + 2, ['completed']), 2300);
        assert.equal((await store.counts()).byStatus.completed, 0);
        assert.deepEqual((await store.list({ limit: 10 })).jobs, []);
      });
    });

    describe('life cycle', () => {
      it('closes twice safely and refuses calls after close', async () => {
        const store = await openStore();
        await store.close();
        await store.close();
        await assert.rejects(store.get('x'));
        await assert.rejects(store.insert([newJob()], T0));
      });
    });
  });
}
