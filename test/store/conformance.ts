import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import {
  JOB_STATUSES,
  type Job,
  type JobError,
  type JobStatus,
  type JobSummary,
  type NewJob,
  PRIORITY_LEVELS,
} from '../../src/contract/job.js';
import { Rescuer } from '../../src/scheduler/rescuer.js';
import { decideExpired } from '../../src/scheduler/retry-policy.js';
import {
  type AttemptOutcome,
  type Changes,
  type ClaimedJob,
  type ClaimRequest,
  type DeliveryAttempt,
  type DueDelivery,
  type Finished,
  type FireResult,
  type InsertResult,
  type InvalidState,
  isInvalidState,
  type JobStore,
  type ScheduleDefinition,
  type StoreEvent,
} from '../../src/store/store.js';

/**
 * Opens a fresh, empty store whose clock is `clock`: every time the store decides with
 * (ready, due, lease expiry, finish, retention) comes from it, so tests move it instead
 * of waiting.
 */
export type MakeStore = (options: {
  capacity: number;
  clock: () => number;
  priorityAgingMs?: number;
}) => Promise<JobStore>;

export const T0 = 1_700_000_000_000;
export const OWNER = 'owner-1';
export const LEASE_MS = 60_000;

/** A clock that stands still until a test moves it. */
export class TestClock {
  #now: number;

  constructor(start = T0) {
    this.#now = start;
  }

  readonly now = (): number => this.#now;

  set(ms: number): void {
    this.#now = ms;
  }

  advance(ms: number): number {
    this.#now += ms;
    return this.#now;
  }
}

let sequence = 0;
/** UUIDs that sort in creation order, like the UUIDv7 ids the scheduler makes. */
export function nextId(): string {
  sequence++;
  return `00000000-0000-7000-8000-${String(sequence).padStart(12, '0')}`;
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

export async function insertOk(store: JobStore, jobs: NewJob[]): Promise<Job[]> {
  const result = await store.insert(jobs);
  assert.equal(result.ok, true, `insert failed: ${JSON.stringify(result)}`);
  return (result as Extract<InsertResult, { ok: true }>).outcomes.map((o) => o.job);
}

export async function insertOne(store: JobStore, overrides: Partial<NewJob> = {}): Promise<Job> {
  const [job] = await insertOk(store, [newJob(overrides)]);
  assert.ok(job);
  return job;
}

export async function mustGet(store: JobStore, id: string): Promise<Job> {
  const job = await store.get(id);
  assert.ok(job, `job ${id} should exist`);
  return job;
}

export function claimRequest(batches: number, overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return { owner: OWNER, leaseMs: LEASE_MS, batches, micro: null, ...overrides };
}

/** Claims up to `batches` single-job batches; answers the jobs, best first. */
export async function claimJobs(
  store: JobStore,
  batches: number,
  owner = OWNER,
  leaseMs = LEASE_MS,
): Promise<ClaimedJob[]> {
  const claimed = await store.claim(claimRequest(batches, { owner, leaseMs }));
  for (const batch of claimed) assert.equal(batch.length, 1, 'without micro-batching a batch holds one job');
  return claimed.flat();
}

export async function claimOne(store: JobStore, owner = OWNER, leaseMs = LEASE_MS): Promise<ClaimedJob> {
  const [job, ...more] = await claimJobs(store, 1, owner, leaseMs);
  assert.ok(job, 'a job should be ready');
  assert.equal(more.length, 0);
  return job;
}

/** Records that the handlers of these claimed attempts started (at the store's now), once it is stored. */
export async function startAttempts(
  store: JobStore,
  attempts: { id: string; attempts: number }[],
  owner = OWNER,
): Promise<void> {
  await store.started(attempts.map((a) => ({ id: a.id, attempt: a.attempts, owner, startedAt: store.now() })));
}

export function completed(value: unknown): AttemptOutcome {
  return { kind: 'completed', resultText: JSON.stringify(value) };
}

export function handlerError(attempt: number, message = 'boom'): JobError {
  return { code: 'handler_error', message, attempt };
}

/** Ends one attempt; answers what the fence let through. */
export async function finishOne(
  store: JobStore,
  attempt: { id: string; attempts: number },
  outcome: AttemptOutcome,
  owner = OWNER,
  expired = false,
): Promise<Finished | null> {
  const answers = await store.finish([{ id: attempt.id, attempt: attempt.attempts, owner, outcome, expired }]);
  assert.equal(answers.length, 1);
  return answers[0] ?? null;
}

/** One pass of the scheduler's rescuer over the store, as a server runs it. */
export async function rescueOnce(store: JobStore): Promise<number> {
  const errors: unknown[] = [];
  const rescuer = new Rescuer({
    store,
    intervalMs: 60_000,
    random: () => 0.5,
    onRescued: () => {},
    log: { info() {}, warn: (fields) => errors.push(fields), error: (fields) => errors.push(fields) },
  });
  const moved = await rescuer.runOnce();
  assert.deepEqual(errors, []);
  return moved;
}

function changes(value: Changes | InvalidState | null): Changes {
  assert.ok(value !== null && !isInvalidState(value), `expected changes, got ${JSON.stringify(value)}`);
  return value;
}

function invalid(value: unknown): InvalidState {
  assert.ok(isInvalidState(value), `expected an invalid state, got ${JSON.stringify(value)}`);
  return value;
}

export async function allJobs(store: JobStore): Promise<JobSummary[]> {
  const jobs: JobSummary[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await store.list({ limit: 500, ...(cursor === undefined ? {} : { cursor }) });
    jobs.push(...page.jobs);
    if (page.nextCursor === null) return jobs;
    cursor = page.nextCursor;
  }
}

/**
 * counts() agrees with the jobs the store holds: exactly when the store says its
 * figures are exact, else never below the truth for `pending`.
 */
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
  const counts = await store.counts();
  if (counts.exact) {
    assert.deepEqual(counts, { byStatus, queuedByPriority, pending, oldestQueuedReadyAt: oldest, exact: true });
  } else {
    assert.ok(counts.pending >= pending, `pending ${counts.pending} is below the truth, ${pending}`);
  }
}

interface SeenEvent {
  kind: StoreEvent['kind'];
  id: string;
  status?: JobStatus;
  /** What job() answered when the event was published. */
  jobStatus?: JobStatus;
  attempt?: number;
  percent?: number;
}

/** Records every event the store publishes, reading job() as a listener would. */
export function recordEvents(store: JobStore): { seen: SeenEvent[]; stop: () => void } {
  const seen: SeenEvent[] = [];
  const stop = store.subscribe((event) => {
    if (event.kind === 'changed') {
      seen.push({ kind: event.kind, id: event.id, status: event.status, jobStatus: event.job().status });
    } else if (event.kind === 'progress') {
      seen.push({ kind: event.kind, id: event.id, attempt: event.attempt, percent: event.progress.percent });
    } else if (event.kind === 'lost') {
      seen.push({ kind: event.kind, id: event.id, attempt: event.attempt });
    }
  });
  return { seen, stop };
}

const changed = (id: string, status: JobStatus): SeenEvent => ({ kind: 'changed', id, status, jobStatus: status });

/** Defines the behaviour every JobStore must have, as node:test cases. */
export function runStoreConformance(name: string, makeStore: MakeStore): void {
  describe(`${name}: JobStore conformance`, () => {
    const open: JobStore[] = [];
    const openStore = async (
      capacity = 10_000,
      priorityAgingMs?: number,
    ): Promise<{ store: JobStore; clock: TestClock }> => {
      const clock = new TestClock();
      const store = await makeStore({
        capacity,
        clock: clock.now,
        ...(priorityAgingMs === undefined ? {} : { priorityAgingMs }),
      });
      open.push(store);
      return { store, clock };
    };
    afterEach(async () => {
      for (const store of open.splice(0)) await store.close();
    });

    describe('insert', () => {
      it('creates a queued job with every field set, ready at the store clock', async () => {
        const { store, clock } = await openStore();
        clock.set(T0 + 5);
        assert.equal(store.now(), T0 + 5);
        const input = newJob({ priority: 7, payload: { a: [1, 2] }, metadata: { team: 'x' }, idempotencyKey: 'k1' });
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
        });
        assert.deepEqual(await store.get(input.id), job);
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

    describe('claim', () => {
      it('takes the highest priority first, then the earliest ready, one job per batch', async () => {
        const { store, clock } = await openStore();
        clock.set(T0 + 1);
        const a = await insertOne(store, { priority: 5 });
        clock.set(T0 + 2);
        const b = await insertOne(store, { priority: 5 });
        clock.set(T0 + 3);
        const c = await insertOne(store, { priority: 9 });
        clock.set(T0 + 4);
        const d = await insertOne(store, { priority: 0 });
        clock.set(T0 + 5);
        const e = await insertOne(store, { priority: 9 });
        clock.set(T0 + 10);
        const claimed = await store.claim(claimRequest(10));
        assert.deepEqual(
          claimed.map((batch) => batch.map((j) => j.id)),
          [[c.id], [e.id], [a.id], [b.id], [d.id]],
        );
      });

      it('claims at most `batches` batches', async () => {
        const { store } = await openStore();
        await insertOk(store, [newJob(), newJob(), newJob()]);
        assert.deepEqual(await store.claim(claimRequest(0)), []);
        assert.equal((await claimJobs(store, 2)).length, 2);
        assert.equal((await claimJobs(store, 2)).length, 1);
        assert.deepEqual(await store.claim(claimRequest(2)), []);
        await assertCountsExact(store);
      });

      it('makes a claimed job running under the lease, with its payload as JSON text', async () => {
        const { store, clock } = await openStore();
        const job = await insertOne(store, { payload: { text: 'héllo', list: [1, null] } });
        clock.set(T0 + 7);
        const claimed = await claimOne(store, 'w', 500);
        assert.equal(claimed.id, job.id);
        assert.equal(claimed.status, 'running');
        assert.equal(claimed.attempts, 1);
        assert.equal(claimed.startedAt, T0 + 7);
        assert.equal(claimed.runAt, null);
        assert.equal(claimed.progress, null);
        assert.equal(claimed.readyAt, T0);
        assert.deepEqual(JSON.parse(claimed.payloadText), { text: 'héllo', list: [1, null] });
        assert.deepEqual(claimed.parents, []);
        assert.equal('payload' in claimed, false);
        const stored = await mustGet(store, job.id);
        assert.equal(stored.status, 'running');
        assert.equal(stored.attempts, 1);
        assert.equal(stored.startedAt, T0 + 7);
        // The lease is the owner's until T0 + 507 by the store clock.
        clock.set(T0 + 507);
        assert.deepEqual(await store.expiredLeases(10), []);
        clock.set(T0 + 508);
        assert.deepEqual(
          (await store.expiredLeases(10)).map((e) => [e.id, e.owner, e.attempt]),
          [[job.id, 'w', 1]],
        );
        await assertCountsExact(store);
      });

      it('claims a delayed job only once it is due by the store clock', async () => {
        const { store, clock } = await openStore();
        const job = await insertOne(store, { runAt: T0 + 1000 });
        assert.equal(await store.nextDueAt(), T0 + 1000);
        clock.set(T0 + 999);
        assert.deepEqual(await store.claim(claimRequest(5)), []);
        clock.set(T0 + 1000);
        const [claimed] = await claimJobs(store, 5);
        assert.equal(claimed?.id, job.id);
        assert.equal(await store.nextDueAt(), null);
        await assertCountsExact(store);
      });

      it('promotes due jobs in runAt order, behind jobs already queued', async () => {
        const { store, clock } = await openStore();
        const queued = await insertOne(store);
        const late = await insertOne(store, { runAt: T0 + 200 });
        const early = await insertOne(store, { runAt: T0 + 100 });
        clock.set(T0 + 300);
        const claimed = await claimJobs(store, 3);
        assert.deepEqual(
          claimed.map((j) => j.id),
          [queued.id, early.id, late.id],
        );
      });

      it('keeps a due job that a claim promoted but did not take ready, the same in every read', async () => {
        const { store, clock } = await openStore();
        const first = await insertOne(store);
        const delayed = await insertOne(store, { runAt: T0 + 100 });
        clock.set(T0 + 300);
        assert.equal((await claimOne(store)).id, first.id);
        const promoted = await mustGet(store, delayed.id);
        assert.equal(promoted.status, 'queued');
        assert.equal(promoted.runAt, null);
        assert.equal((await store.counts()).oldestQueuedReadyAt, promoted.readyAt);
        await assertCountsExact(store);
        const claimed = await claimOne(store);
        assert.equal(claimed.id, delayed.id);
        assert.equal(claimed.readyAt, promoted.readyAt);
      });

      it('puts a new job of higher priority before an older backlog', async () => {
        const { store, clock } = await openStore();
        await insertOk(store, [newJob({ priority: 1 }), newJob({ priority: 1 })]);
        clock.advance(100);
        const urgent = await insertOne(store, { priority: 8 });
        assert.equal((await claimOne(store)).id, urgent.id);
      });

      it('hands the completed dependencies to the dependent in dependsOn order', async () => {
        const { store } = await openStore();
        const p1 = await insertOne(store, { type: 'test.one' });
        const p2 = await insertOne(store, { type: 'test.two' });
        const child = await insertOne(store, { dependsOn: [p2.id, p1.id] });
        const [c1, c2] = await claimJobs(store, 2);
        assert.ok(c1 && c2);
        assert.ok(await finishOne(store, c1, completed({ v: 1 })));
        assert.ok(await finishOne(store, c2, completed([2])));
        const claimed = await claimOne(store);
        assert.equal(claimed.id, child.id);
        assert.deepEqual(claimed.parents, [
          { id: p2.id, type: 'test.two', result: [2] },
          { id: p1.id, type: 'test.one', result: { v: 1 } },
        ]);
      });

      it('hands a job nothing while none is ready, and every ready job exactly once', async () => {
        const { store } = await openStore();
        assert.deepEqual(await store.claim(claimRequest(4)), []);
        const jobs = await insertOk(
          store,
          Array.from({ length: 25 }, () => newJob()),
        );
        const seen = new Set<string>();
        for (;;) {
          const claimed = await claimJobs(store, 3);
          if (claimed.length === 0) break;
          for (const job of claimed) {
            assert.equal(seen.has(job.id), false, `${job.id} handed out twice`);
            seen.add(job.id);
          }
        }
        assert.deepEqual([...seen].sort(), jobs.map((j) => j.id).sort());
      });
    });

    describe('claim: task limits', () => {
      const held = { concurrency: 1, rateLimit: null };
      const limited = (allowance: number, extra: Partial<ClaimRequest> = {}): Partial<ClaimRequest> => ({
        allowance: new Map([['test.held', allowance]]),
        limits: new Map([['test.held', held]]),
        types: ['test.held', 'test.echo', 'test.other'],
        ...extra,
      });

      it('passes over a held type to the next-best job of another, which stays first of its type', async () => {
        const { store, clock } = await openStore();
        const heldJobs: string[] = [];
        for (let i = 0; i < 5; i++) {
          clock.set(T0 + i);
          heldJobs.push((await insertOne(store, { type: 'test.held', priority: 9 })).id);
        }
        clock.set(T0 + 10);
        const echo = await insertOne(store, { type: 'test.echo', priority: 5 });
        clock.set(T0 + 11);
        const other = await insertOne(store, { type: 'test.other', priority: 1 });
        clock.set(T0 + 20);
        const passed: string[] = [];
        const first = await store.claim(claimRequest(5, limited(0, { passedOver: (type) => passed.push(type) })));
        assert.deepEqual(
          first.map((batch) => batch.map((j) => j.id)),
          [[echo.id], [other.id]],
        );
        assert.ok(passed.includes('test.held'), 'the held type was passed over');
        const next = await store.claim(claimRequest(5, limited(1)));
        assert.deepEqual(
          next.map((batch) => batch.map((j) => j.id)),
          [[heldJobs[0]]],
          'one place frees one job: the first of its type',
        );
        assert.deepEqual(
          (await store.claim(claimRequest(5))).map((batch) => batch.map((j) => j.id)),
          heldJobs.slice(1).map((id) => [id]),
          'without limits the rest follow in order',
        );
      });

      it('never puts a limited type in a micro-batch', async () => {
        const { store } = await openStore();
        await insertOk(store, [
          newJob({ type: 'test.held' }),
          newJob({ type: 'test.held' }),
          newJob({ type: 'test.echo' }),
        ]);
        const micro = {
          costs: new Map([
            ['test.held', 0.01],
            ['test.echo', 0.01],
          ]),
          budgetMs: 2,
          maxJobs: 10,
          solo: new Set<string>(),
        };
        const claimed = await store.claim(
          claimRequest(3, {
            micro,
            ...limited(2, { limits: new Map([['test.held', { concurrency: 5, rateLimit: null }]]) }),
          }),
        );
        const heldBatches = claimed.filter((batch) => batch.some((j) => j.type === 'test.held'));
        assert.equal(heldBatches.length, 2);
        for (const batch of heldBatches) assert.equal(batch.length, 1);
      });
    });

    describe('claim: priority aging', () => {
      it('raises a waiting job one level per period, so an old low-priority job goes before newer high ones', async () => {
        const { store, clock } = await openStore(10_000, 1000);
        clock.set(T0);
        const old = await insertOne(store, { priority: 0 });
        clock.set(T0 + 5000);
        const mid = await insertOne(store, { priority: 4 });
        clock.set(T0 + 8500);
        const high = await insertOne(store, { priority: 9 });
        // At T0 + 9000: old is 0 + 9 = 9 (ready first), high 9, mid 4 + 4 = 8.
        clock.set(T0 + 9000);
        assert.deepEqual(
          (await store.claim(claimRequest(3))).map((batch) => batch.map((j) => j.id)),
          [[old.id], [high.id], [mid.id]],
        );
        assert.equal((await mustGet(store, old.id)).priority, 0, 'priority as submitted is unchanged');
      });

      it('keeps plain priority order before a job has waited a full period', async () => {
        const { store, clock } = await openStore(10_000, 60_000);
        clock.set(T0);
        const low = await insertOne(store, { priority: 1 });
        clock.set(T0 + 1);
        const high = await insertOne(store, { priority: 2 });
        clock.set(T0 + 59_000);
        assert.deepEqual(
          (await store.claim(claimRequest(2))).map((batch) => batch.map((j) => j.id)),
          [[high.id], [low.id]],
        );
      });

      it('ages under task limits too, passing over a held type', async () => {
        const { store, clock } = await openStore(10_000, 1000);
        clock.set(T0);
        const old = await insertOne(store, { type: 'test.echo', priority: 0 });
        clock.set(T0 + 1);
        await insertOne(store, { type: 'test.held', priority: 9 });
        clock.set(T0 + 9500);
        const fresh = await insertOne(store, { type: 'test.echo', priority: 9 });
        clock.set(T0 + 10_000);
        const claimed = await store.claim(
          claimRequest(3, {
            allowance: new Map([['test.held', 0]]),
            limits: new Map([['test.held', { concurrency: 1, rateLimit: null }]]),
            types: ['test.held', 'test.echo'],
          }),
        );
        assert.deepEqual(
          claimed.map((batch) => batch.map((j) => j.id)),
          [[old.id], [fresh.id]],
        );
      });
    });

    describe('claim: fair share between groups', () => {
      const ids = (claimed: ClaimedJob[][]) => claimed.flat().map((j) => j.id);

      it('takes groups in turn within a priority, FIFO inside each, a late group level with the waiting ones', async () => {
        const { store, clock } = await openStore();
        const a = (
          await insertOk(
            store,
            Array.from({ length: 30 }, () => newJob({ group: 'tenant-a' })),
          )
        ).map((j) => j.id);
        clock.advance(1);
        const b = (
          await insertOk(
            store,
            Array.from({ length: 3 }, () => newJob({ group: 'tenant-b' })),
          )
        ).map((j) => j.id);
        clock.advance(1);
        assert.deepEqual(ids(await store.claim(claimRequest(8))), [a[0], b[0], a[1], b[1], a[2], b[2], a[3], a[4]]);
        assert.deepEqual(ids(await store.claim(claimRequest(100))), a.slice(5), 'then the rest of the big group');
      });

      it('counts jobs without a group as one group of their own, and keeps priority before turns', async () => {
        const { store, clock } = await openStore();
        const plain = (await insertOk(store, [newJob(), newJob(), newJob()])).map((j) => j.id);
        clock.advance(1);
        const grouped = (await insertOk(store, [newJob({ group: 'g' }), newJob({ group: 'g' })])).map((j) => j.id);
        clock.advance(1);
        const urgent = await insertOne(store, { group: 'g', priority: 9 });
        clock.advance(1);
        assert.deepEqual(ids(await store.claim(claimRequest(10))), [
          urgent.id,
          plain[0],
          grouped[0],
          plain[1],
          grouped[1],
          plain[2],
        ]);
      });

      it('does not let a group that ran dry bank turns: it comes back level with the others', async () => {
        const { store, clock } = await openStore();
        const first = await insertOne(store, { group: 'small' });
        const big = (
          await insertOk(
            store,
            Array.from({ length: 6 }, () => newJob({ group: 'big' })),
          )
        ).map((j) => j.id);
        clock.advance(1);
        assert.deepEqual(ids(await store.claim(claimRequest(3))), [first.id, big[0], big[1]]);
        // The small group had nothing queued while the big one ran two turns: it starts
        // at the big group's current turn, not ahead of it by the turns it missed.
        const again = (await insertOk(store, [newJob({ group: 'small' }), newJob({ group: 'small' })])).map(
          (j) => j.id,
        );
        clock.advance(1);
        assert.deepEqual(ids(await store.claim(claimRequest(10))), [
          big[2],
          again[0],
          big[3],
          again[1],
          big[4],
          big[5],
        ]);
      });

      it('keeps the group on the job, and takes turns again after a job goes back to queued', async () => {
        const { store, clock } = await openStore();
        const [x1, x2] = await insertOk(store, [newJob({ group: 'x' }), newJob({ group: 'x' })]);
        clock.advance(1);
        const y1 = await insertOne(store, { group: 'y' });
        assert.ok(x1 && x2);
        assert.equal((await mustGet(store, x1.id)).group, 'x');
        assert.equal((await mustGet(store, y1.id)).group, 'y');
        assert.equal((await insertOne(store, { priority: 1 })).group, null);
        const claimed = await claimOne(store);
        assert.equal(claimed.id, x1.id);
        await store.release([{ id: claimed.id, attempt: claimed.attempts, owner: OWNER }]);
        assert.deepEqual(ids(await store.claim(claimRequest(3))), [x1.id, y1.id, x2.id]);
      });

      it('lists by group, newest first, across pages', async () => {
        const { store } = await openStore();
        const made: Job[] = [];
        for (let i = 0; i < 7; i++) made.push(await insertOne(store, i % 2 === 0 ? { group: 'even' } : {}));
        const listed: string[] = [];
        let cursor: string | undefined;
        for (;;) {
          const page = await store.list({ group: 'even', limit: 2, ...(cursor === undefined ? {} : { cursor }) });
          listed.push(...page.jobs.map((j) => j.id));
          for (const job of page.jobs) assert.equal(job.group, 'even');
          if (page.nextCursor === null) break;
          cursor = page.nextCursor;
        }
        assert.deepEqual(
          listed,
          made
            .filter((_, i) => i % 2 === 0)
            .map((j) => j.id)
            .reverse(),
        );
        assert.deepEqual(
          (await store.list({ group: 'even', statuses: ['cancelled'], limit: 10 })).jobs,
          [],
          'group and status together',
        );
      });
    });

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
          assert.equal((await mustGet(store, job.id)).status, 'running');
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
        await claimJobs(store, 3, 'dead', 100);
        clock.set(T0 + 101);
        const expired = await store.expiredLeases(10);
        assert.deepEqual(expired.map((e) => e.id).sort(), jobs.map((j) => j.id).sort());
        assert.deepEqual(
          expired.find((e) => e.id === jobs[0]?.id),
          { id: jobs[0]?.id, type: 'test.a', owner: 'dead', attempt: 1, started: false, maxAttempts: 4, backoff },
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
        assert.equal(
          await finishOne(store, first, { kind: 'failed', error: handlerError(1), retryAt: null }, 'w'),
          null,
        );
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
        const rescue = decideExpired(expired, store.now(), () => 0.5);
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
        const first = await claimOne(store, 'w', 100);
        clock.set(T0 + 6);
        await startAttempts(store, [first], 'w');
        clock.set(T0 + 10);
        await finishOne(store, first, { kind: 'failed', error: handlerError(1), retryAt: T0 + 20 }, 'w');
        clock.set(T0 + 20);
        // The last attempt is claimed as a look-ahead, and its server dies before starting it.
        const second = await claimOne(store, 'dead', 100);
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
        const [a, b] = await claimJobs(store, 2, 'dead', 100);
        assert.equal(a?.id, started.id);
        assert.ok(a && b);
        clock.set(T0 + 3);
        await startAttempts(store, [a], 'dead');
        await startAttempts(store, [b], 'other');
        await startAttempts(store, [{ id: b.id, attempts: 2 }], 'dead');
        assert.equal((await mustGet(store, a.id)).startedAt, T0 + 3);
        assert.equal((await mustGet(store, b.id)).startedAt, T0);
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
        const attempt = await claimOne(store, 'slow', 100);
        clock.set(T0 + 101);
        const [expired] = await store.expiredLeases(10);
        assert.ok(expired);
        assert.equal(expired.started, false);
        // The owner was only slow: its thread started the attempt, and the start is stored first.
        await startAttempts(store, [attempt], 'slow');
        const giveBack = decideExpired(expired, store.now(), () => 0.5);
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

    describe('events', () => {
      it('publishes every change with the job as it now is', async () => {
        const { store, clock } = await openStore();
        const events = recordEvents(store);
        const parent = newJob();
        const child = newJob({ dependsOn: [parent.id] });
        const other = newJob({ maxAttempts: 1 });
        await insertOk(store, [parent, child, other]);
        assert.deepEqual(events.seen.splice(0), [
          changed(parent.id, 'queued'),
          changed(child.id, 'waiting'),
          changed(other.id, 'queued'),
        ]);

        const [p, o] = await claimJobs(store, 2, OWNER, 100);
        assert.ok(p && o);
        await startAttempts(store, [o]);
        assert.deepEqual(events.seen.splice(0), [changed(parent.id, 'running'), changed(other.id, 'running')]);

        await finishOne(store, p, completed(1));
        assert.deepEqual(events.seen.splice(0), [changed(parent.id, 'completed'), changed(child.id, 'queued')]);

        changes(await store.cancel(child.id));
        assert.deepEqual(events.seen.splice(0), [changed(child.id, 'cancelled')]);
        changes(await store.retry(child.id));
        assert.deepEqual(events.seen.splice(0), [changed(child.id, 'queued')]);

        clock.set(T0 + 101);
        assert.equal(await rescueOnce(store), 1);
        assert.deepEqual(events.seen.splice(0), [changed(other.id, 'failed')]);

        events.stop();
        changes(await store.cancel(child.id));
        assert.deepEqual(events.seen, []);
      });

      it('publishes the dependents a failure or a cancel fails', async () => {
        const { store } = await openStore();
        const a = await insertOne(store);
        const b = await insertOne(store, { dependsOn: [a.id] });
        const c = await insertOne(store);
        const d = await insertOne(store, { dependsOn: [c.id] });
        const attempt = await claimOne(store);
        const events = recordEvents(store);
        await finishOne(store, attempt, { kind: 'failed', error: handlerError(1), retryAt: null });
        changes(await store.cancel(c.id));
        assert.deepEqual(events.seen, [
          changed(a.id, 'failed'),
          changed(b.id, 'failed'),
          changed(c.id, 'cancelled'),
          changed(d.id, 'failed'),
        ]);
        events.stop();
      });
    });

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

    describe('settings', () => {
      it('keeps task limit overrides, and removes one', async () => {
        const { store } = await openStore();
        assert.deepEqual([...(await store.limitOverrides())], []);
        await store.setLimitOverride('test.echo', { concurrency: 2 });
        await store.setLimitOverride('test.other', { concurrency: null, rateLimit: { max: 3, perMs: 1000 } });
        assert.deepEqual([...(await store.limitOverrides())].sort(), [
          ['test.echo', { concurrency: 2 }],
          ['test.other', { concurrency: null, rateLimit: { max: 3, perMs: 1000 } }],
        ]);
        await store.setLimitOverride('test.echo', null);
        assert.deepEqual([...(await store.limitOverrides()).keys()], ['test.other']);
        assert.equal(await store.paused(), false, 'a setting of its own');
      });

      it('keeps whether dispatch is paused', async () => {
        const { store } = await openStore();
        assert.equal(await store.paused(), false);
        await store.setPaused(true);
        assert.equal(await store.paused(), true);
        await store.setPaused(false);
        assert.equal(await store.paused(), false);
      });
    });

    describe('schedules', () => {
      const definition = (overrides: Partial<ScheduleDefinition> = {}): ScheduleDefinition => ({
        name: 'nightly',
        cron: '0 0 * * *',
        timezone: 'UTC',
        job: { type: 'test.echo', payload: { n: 1 } },
        overlap: 'allow',
        catchUp: 'none',
        paused: false,
        nextRunAt: T0 + 1000,
        updatedAt: T0,
        ...overrides,
      });
      const tickJob = (name: string, at: number, overrides: Partial<NewJob> = {}) =>
        newJob({ schedule: name, idempotencyKey: `schedule:${name}:${new Date(at).toISOString()}`, ...overrides });
      /** The tick at T0 + 1000 of `definition()`, as a server that read it at T0 fires it. */
      const fireFirstTick = (store: JobStore) =>
        store.fireSchedule({
          name: 'nightly',
          expected: { nextRunAt: T0 + 1000, updatedAt: T0 },
          nextRunAt: T0 + 2000,
          runAt: T0 + 1000,
          job: tickJob('nightly', T0 + 1000),
          skipOverlap: false,
        });
      const fired = (result: FireResult) => {
        assert.equal(result.fired, true, 'the tick should fire');
        return result as Extract<FireResult, { fired: true }>;
      };
      const created = (result: FireResult): Job => {
        const insert = fired(result).insert;
        assert.ok(insert !== null && insert.ok, `the tick should insert: ${JSON.stringify(insert)}`);
        const [outcome] = insert.outcomes;
        assert.ok(outcome);
        return outcome.job;
      };

      it('creates, reads, replaces (keeping what ticks wrote) and removes schedules', async () => {
        const { store } = await openStore();
        assert.deepEqual(await store.schedules(), []);
        assert.equal(await store.getSchedule('nightly'), null);
        const first = await store.putSchedule(definition());
        assert.equal(first.created, true);
        assert.deepEqual(first.schedule, { ...definition(), lastRunAt: null, lastJobId: null, createdAt: T0 });
        const job = created(await fireFirstTick(store));
        const replaced = await store.putSchedule(
          definition({
            cron: '*/5 * * * * *',
            timezone: 'Europe/Berlin',
            paused: true,
            nextRunAt: null,
            updatedAt: T0 + 7,
          }),
        );
        assert.equal(replaced.created, false);
        assert.deepEqual(replaced.schedule, {
          ...definition({ cron: '*/5 * * * * *', timezone: 'Europe/Berlin', paused: true, nextRunAt: null }),
          updatedAt: T0 + 7,
          lastRunAt: T0 + 1000,
          lastJobId: job.id,
          createdAt: T0,
        });
        await store.putSchedule(definition({ name: 'a-first', overlap: 'skip', catchUp: 'last' }));
        assert.deepEqual(
          (await store.schedules()).map((schedule) => [schedule.name, schedule.overlap, schedule.catchUp]),
          [
            ['a-first', 'skip', 'last'],
            ['nightly', 'allow', 'none'],
          ],
        );
        assert.deepEqual(await store.getSchedule('nightly'), replaced.schedule);
        assert.equal(await store.removeSchedule('nightly'), true);
        assert.equal(await store.removeSchedule('nightly'), false);
        assert.equal(await store.getSchedule('nightly'), null);
        assert.equal((await mustGet(store, job.id)).schedule, 'nightly', 'its jobs keep its name');
      });

      it('fires a tick once: the compare-and-set of nextRunAt lets one caller through', async () => {
        const { store } = await openStore();
        await store.putSchedule(definition());
        const fire = {
          name: 'nightly',
          expected: { nextRunAt: T0 + 1000, updatedAt: T0 },
          nextRunAt: T0 + 2000,
          runAt: T0 + 1000,
          skipOverlap: false,
        };
        const [one, two] = await Promise.all([
          store.fireSchedule({ ...fire, job: tickJob('nightly', T0 + 1000) }),
          store.fireSchedule({ ...fire, job: tickJob('nightly', T0 + 1000) }),
        ]);
        assert.equal([one, two].filter((result) => result?.fired === true).length, 1);
        const winner = (one?.fired === true ? one : two) as FireResult;
        const job = created(winner);
        assert.equal(job.schedule, 'nightly');
        assert.equal(job.idempotencyKey, `schedule:nightly:${new Date(T0 + 1000).toISOString()}`);
        assert.equal(job.status, 'queued');
        const after = fired(winner).schedule;
        assert.equal(after.nextRunAt, T0 + 2000);
        assert.equal(after.lastRunAt, T0 + 1000);
        assert.equal(after.lastJobId, job.id);
        const listed = await store.list({ limit: 10, schedule: 'nightly' });
        assert.deepEqual(
          listed.jobs.map((j) => j.id),
          [job.id],
        );
        // A schedule changed since it was read (replaced, paused) is not fired from the old reading.
        await store.putSchedule(definition({ nextRunAt: T0 + 2000, updatedAt: T0 + 1 }));
        const stale = await store.fireSchedule({
          ...fire,
          expected: { nextRunAt: T0 + 2000, updatedAt: T0 },
          nextRunAt: T0 + 3000,
          runAt: T0 + 2000,
          job: tickJob('nightly', T0 + 2000),
        });
        assert.deepEqual(stale, { fired: false });
        assert.deepEqual(await store.fireSchedule({ ...fire, name: 'missing', job: null }), { fired: false });
        assert.equal((await store.list({ limit: 10, schedule: 'nightly' })).jobs.length, 1);
      });

      it('holds a tick back while the last job is unfinished (overlap: skip), and fires a trigger without a check', async () => {
        const { store } = await openStore();
        await store.putSchedule(definition({ overlap: 'skip' }));
        const tick = (at: number, job: NewJob | null, updatedAt = T0) =>
          store.fireSchedule({
            name: 'nightly',
            expected: { nextRunAt: at, updatedAt },
            nextRunAt: at + 1000,
            runAt: at,
            job,
            skipOverlap: true,
          });
        const first = created(await tick(T0 + 1000, tickJob('nightly', T0 + 1000)));
        const held = fired(await tick(T0 + 2000, tickJob('nightly', T0 + 2000)));
        assert.equal(held.overlap, true);
        assert.equal(held.insert, null);
        assert.equal(held.schedule.nextRunAt, T0 + 3000, 'the tick is spent');
        assert.equal(held.schedule.lastJobId, first.id);
        // A tick without a job (its task type is not registered) only moves nextRunAt.
        const none = fired(await tick(T0 + 3000, null));
        assert.equal(none.overlap, true);
        changes(await store.cancel(first.id));
        const second = created(await tick(T0 + 4000, tickJob('nightly', T0 + 4000)));
        assert.notEqual(second.id, first.id);
        // A trigger: one job now, nextRunAt untouched, lastJobId and lastRunAt recorded.
        const triggered = await store.fireSchedule({
          name: 'nightly',
          expected: null,
          nextRunAt: null,
          runAt: T0 + 4500,
          job: newJob({ schedule: 'nightly' }),
          skipOverlap: false,
        });
        const third = created(triggered);
        assert.equal(fired(triggered).schedule.nextRunAt, T0 + 5000);
        assert.equal(fired(triggered).schedule.lastJobId, third.id);
        assert.equal(fired(triggered).schedule.lastRunAt, T0 + 4500);
        const listed = await store.list({ limit: 10, schedule: 'nightly', statuses: ['queued'] });
        assert.deepEqual(
          listed.jobs.map((j) => j.id),
          [third.id, second.id],
        );
        assert.deepEqual((await store.list({ limit: 10, schedule: 'other' })).jobs, []);
      });

      it('spends a tick whose job does not fit (queue full) without recording a job', async () => {
        const { store } = await openStore(1);
        await insertOne(store);
        await store.putSchedule(definition());
        const result = fired(await fireFirstTick(store));
        assert.equal(result.insert?.ok, false);
        assert.equal(result.schedule.nextRunAt, T0 + 2000);
        assert.equal(result.schedule.lastJobId, null);
        assert.deepEqual((await store.list({ limit: 10, schedule: 'nightly' })).jobs, []);
      });
    });

    describe('life cycle', () => {
      it('is available once open; closes twice safely and refuses calls after close', async () => {
        const { store } = await openStore();
        assert.equal(store.available, true);
        const job = await insertOne(store);
        await store.close();
        await store.close();
        assert.equal(store.available, false);
        const closed = { name: 'StoreError', code: 'store_closed' };
        await assert.rejects(store.get(job.id), closed);
        await assert.rejects(store.insert([newJob()]), closed);
        await assert.rejects(store.claim(claimRequest(1)), closed);
        await assert.rejects(store.finish([{ id: job.id, attempt: 1, owner: OWNER, outcome: completed(1) }]), closed);
        await assert.rejects(store.cancel(job.id), closed);
        await assert.rejects(store.counts(), closed);
        await assert.rejects(store.list({ limit: 1 }), closed);
      });
    });
  });
}
