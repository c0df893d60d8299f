import assert from 'node:assert/strict';
import type {
  AttemptOutcome,
  ClaimedJob,
  ClaimRequest,
  Finished,
  InsertResult,
  JobStore,
  StoreEvent,
} from '../../src/store/store.js';
import { Rescuer } from '../../src/scheduler/dispatch/rescuer.js';
import {
  type Job,
  JOB_STATUSES,
  type JobError,
  type JobStatus,
  type JobSummary,
  type NewJob,
  PRIORITY_LEVELS,
} from '../../src/contract/job.js';

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

/**
 * Claims up to `batches` single-job batches and records their handlers' starts, as a
 * server's threads would (a reader sees them running); answers the jobs, best first.
 */
export async function claimJobs(
  store: JobStore,
  batches: number,
  owner = OWNER,
  leaseMs = LEASE_MS,
): Promise<ClaimedJob[]> {
  const jobs = await claimUnstarted(store, batches, owner, leaseMs);
  await startAttempts(store, jobs, owner);
  return jobs;
}

/** Claims up to `batches` single-job batches whose handlers have not started (a reader sees them queued). */
export async function claimUnstarted(
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

/** One claimed job whose handler has not started. */
export async function claimOneUnstarted(store: JobStore, owner = OWNER, leaseMs = LEASE_MS): Promise<ClaimedJob> {
  const [job, ...more] = await claimUnstarted(store, 1, owner, leaseMs);
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

/** KILN_MAX_INTERRUPTIONS's default, as the rescuer of the store tests applies it. */
export const MAX_INTERRUPTIONS = 3;

/**
 * One pass of the scheduler's rescuer over the store, as a server runs it. Answers how many
 * attempts it moved; `errors` collects what it logged as errors (none expected unless given).
 */
export async function rescueOnce(store: JobStore, errors?: object[]): Promise<number> {
  const logged: object[] = [];
  const rescuer = new Rescuer({
    store,
    intervalMs: 60_000,
    random: () => 0.5,
    maxInterruptions: MAX_INTERRUPTIONS,
    onRescued: () => {},
    log: { info() {}, warn: (fields) => logged.push(fields), error: (fields) => logged.push(fields) },
  });
  const moved = await rescuer.runOnce();
  if (errors === undefined) assert.deepEqual(logged, []);
  else errors.push(...logged);
  return moved;
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

export interface SeenEvent {
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
