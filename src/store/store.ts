import type {
  CallbackEvent,
  Job,
  JobError,
  JobStatus,
  JobSummary,
  NewJob,
  ParentResult,
  Progress,
} from '../contract/job.js';
import type { DeliveryRecord } from '../contract/delivery.js';
import type { LimitOverride, TaskLimits } from '../contract/limits.js';
import type { NodeInfo } from '../contract/node.js';
import type { QueueCounts } from '../contract/queue.js';
import type { Schedule, ScheduleDefinition } from '../contract/schedule.js';

// The domain's types live in the contract; named here too for the stores and their tests.
export type { DeliveryRecord, LimitOverride, NodeInfo, QueueCounts, Schedule, ScheduleDefinition, TaskLimits };
export { CATCH_UP_RULES, OVERLAP_RULES } from '../contract/schedule.js';

/**
 * The persistence boundary, shaped so that one embedded file (SQLite) and one database
 * shared by many servers (PostgreSQL) can both implement it:
 *
 * - Times that decide leases, due jobs and retention come from the store's own clock
 *   (`now()`); callers pass durations, never instants.
 * - A claim takes its filter as data and answers whole micro-batches in one call.
 * - Every attempt is fenced: a finish names the job, the attempt and the lease owner,
 *   and is refused when the job is no longer running under exactly that, so a late
 *   outcome of a timed-out, cancelled or rescued attempt changes nothing.
 * - Recovery is not the store's business: `expiredLeases` lists attempts whose lease
 *   ran out, and the scheduler's rescuer decides what becomes of them (retry policy
 *   lives above the store, in one place) and writes that with a fenced finish.
 * - Changes and progress are events the store publishes (`subscribe`), so listeners
 *   see what other servers did, not only what this process did.
 */
export interface JobStore {
  /** The store's clock, ms since the epoch. */
  now(): number;

  /**
   * Insert a batch atomically: all or nothing. Applies idempotency (a key used before
   * with the same type and payload replays the existing job) and the capacity (pending
   * jobs after the insert may not exceed it; replays do not count). The initial
   * status: `failed` (dependency_failed) if a dependency is failed or cancelled,
   * `waiting` if a dependency is not completed, `scheduled` if `runAt` is in the
   * future, else `queued`. A dependency may name an earlier job of the same batch.
   * Resolves only once the jobs are durable.
   */
  insert(jobs: NewJob[]): Promise<InsertResult>;

  /**
   * Claim ready jobs, best first (priority desc, then ready time asc, then id), as up
   * to `request.batches` micro-batches (one per free thread). Claimed jobs become
   * `running` under the owner's lease, `attempts` + 1. Resolves without waiting for
   * durability: a claim lost in a crash leaves the job queued, which at-least-once allows.
   */
  claim(request: ClaimRequest): Promise<ClaimedJob[][]>;

  /**
   * Extend the owner's leases on `ids` by `leaseMs` from now; answers the ids no longer
   * held. A shared store also records that the owner's server is alive (its node lease):
   * with no ids, that alone.
   */
  heartbeat(owner: string, ids: string[], leaseMs: number): Promise<string[]>;

  /**
   * Record that these attempts' handlers started (a look-ahead starts well after its
   * claim): each job's `startedAt` becomes the time given, and a rescue of its lease
   * then counts the attempt. Fenced like a finish. Written with the store's next group
   * of writes, never on its own: callers need not wait (tests do, to know it is stored).
   */
  started(items: StartedAttempt[]): Promise<void>;

  /** Progress of a running attempt; published as an event, kept with the result. Never waits. */
  progress(id: string, attempt: number, owner: string, progress: Progress): void;

  /**
   * End attempts, each fenced on job id, attempt and owner (and, with `expired`, on the
   * lease having run out). Answers one entry per item: null when the fence refused it.
   * A `completed` outcome releases dependents whose dependencies are now all completed;
   * a terminal failure fails the dependents (dependency_failed), transitively.
   */
  finish(items: FinishItem[]): Promise<(Finished | null)[]>;

  /**
   * Give back claims whose attempts never started (a recalled look-ahead, a thread that
   * died before it got to them): each job is `queued` again, first in line among its
   * priority, its attempt not counted. Fenced like a finish.
   */
  release(items: { id: string; attempt: number; owner: string }[]): Promise<void>;

  /** A non-terminal job becomes `cancelled`; its dependents fail. */
  cancel(id: string): Promise<Changes | InvalidState | null>;

  /**
   * A `failed` or `cancelled` job gets a fresh attempt budget (`attempts` = 0, `error`
   * kept) and becomes `queued`, or `waiting` if its dependencies are not all completed.
   */
  retry(id: string): Promise<Changes | InvalidState | null>;

  /** Remove a terminal job's record. */
  remove(id: string): Promise<'removed' | InvalidState | null>;

  get(id: string): Promise<Job | null>;
  /**
   * The jobs with these ids, in any order (ids with no job are left out): how the
   * scheduler reads the jobs long polls and event streams watch again (JobEvents.sweep).
   */
  getMany(ids: readonly string[]): Promise<Job[]>;
  list(filter: ListFilter): Promise<Page>;
  counts(): Promise<QueueCounts>;

  /** Whether dispatch is paused; kept across restarts. */
  paused(): Promise<boolean>;
  setPaused(paused: boolean): Promise<void>;

  /** Task limits set at run time (PUT /v1/tasks/{name}/limits), by task type; kept across restarts. */
  limitOverrides(): Promise<Map<string, LimitOverride>>;
  /** Set a type's override, or remove it (null: back to the task module's own limits). */
  setLimitOverride(type: string, override: LimitOverride | null): Promise<void>;

  /** Every schedule (API.md "Schedules"), by name. */
  schedules(): Promise<Schedule[]>;
  getSchedule(name: string): Promise<Schedule | null>;
  /**
   * Create a schedule, or replace the definition of one of that name (its `createdAt`,
   * `lastRunAt` and `lastJobId` are kept).
   */
  putSchedule(schedule: ScheduleDefinition): Promise<{ created: boolean; schedule: Schedule }>;
  /** Answers whether there was such a schedule. Its jobs keep its name. */
  removeSchedule(name: string): Promise<boolean>;
  /**
   * One tick of a schedule, in one transaction: a compare-and-set of `nextRunAt` (only the
   * caller that still sees the schedule as `expected` fires; with many servers, one does),
   * then, unless the overlap rule holds it back, the insert of `job` (as `insert` does,
   * idempotency included) and the schedule's `lastRunAt` and `lastJobId`.
   */
  fireSchedule(fire: ScheduleFire): Promise<FireResult>;

  /** The earliest `runAt` of a `scheduled` or `retrying` job, or null (the dispatcher's one timer). */
  nextDueAt(): Promise<number | null>;

  /** Attempts whose lease ran out (at most `limit`), for the rescuer. */
  expiredLeases(limit: number): Promise<ExpiredAttempt[]>;

  /**
   * Callback deliveries (API.md "Callbacks"). A job with a callback that reaches one of
   * its events gets a `pending` delivery in the same write that makes it terminal,
   * whatever makes it so (finish, cancel, a failed dependency, an insert that fails at
   * once); the delivery goes when the job's record goes. Announced by a `deliveries` event.
   *
   * Lease up to `limit` pending deliveries that are due and not leased by a live owner,
   * oldest due first: no other caller gets them until `leaseMs` has passed or the attempt
   * is recorded. A first attempt comes with the job as it is now (to render the body).
   */
  claimDeliveries(owner: string, leaseMs: number, limit: number): Promise<DueDelivery[]>;
  /**
   * Record an attempt, fenced on delivery, attempt and owner (false: the fence refused it,
   * another owner took the delivery over). `retry` keeps it pending, due in `retryInMs`.
   */
  recordDeliveryAttempt(attempt: DeliveryAttempt): Promise<boolean>;
  /** When the next pending delivery is due (or its lease runs out); null when none is pending. */
  nextDeliveryAt(): Promise<number | null>;
  /** The job's deliveries, attempt by attempt (GET /v1/jobs/{id}/callbacks); null: no such job. */
  deliveries(jobId: string): Promise<DeliveryRecord[] | null>;

  /** Delete up to `limit` terminal jobs in `status` that finished more than `ageMs` ago. */
  purge(status: 'completed' | 'failed' | 'cancelled', ageMs: number, limit: number): Promise<number>;

  /**
   * Listen to every change and progress report; answers the function that unsubscribes.
   * `watching` tells a store shared by several servers which jobs someone here watches
   * (long polls, event streams): it reads those when another server changes them, so
   * their events carry the whole job; others arrive with their id and status only.
   */
  subscribe(listener: StoreListener, options?: SubscribeOptions): () => void;

  /** The servers sharing this store, seen within the last three lease periods (null: this process only). */
  nodes?(): Promise<NodeInfo[]>;

  /** Report how long each commit of a write took, in seconds (kiln_store_commit_seconds). */
  observeCommits(observer: ((seconds: number) => void) | null): void;

  /** Whether writes can be stored now (false while the store thread or database is down). */
  readonly available: boolean;

  close(): Promise<void>;
}

export interface ClaimRequest {
  owner: string;
  leaseMs: number;
  /** How many micro-batches (free threads). */
  batches: number;
  /**
   * Micro-batching: a batch whose first job's type is in `costs` (expected ms per
   * attempt) grows with the next-best jobs while they are of such types too, are not
   * in `solo`, the expected time of the jobs taken so far is under `budgetMs` (the
   * last one taken may carry it past) and its size is under `maxJobs`. It stops at the first job that does not qualify: that job stays
   * first in line. Null: one job per batch.
   */
  micro: { costs: ReadonlyMap<string, number>; budgetMs: number; maxJobs: number; solo: ReadonlySet<string> } | null;
  /**
   * Task limits as this server sees them: at most this many more jobs of each named type
   * in this claim (0: none now); types not named are not limited, and a limited type is
   * never micro-batched. A job held back holds back nothing else: the claim takes the
   * next-best job of another type, and the held job stays first of its type.
   */
  allowance?: ReadonlyMap<string, number> | null;
  /**
   * The limits themselves, for a store shared by several servers, which applies them
   * across all of them (running attempts of the type in the whole store, one rate
   * window for all); a store of one process has nothing to add to `allowance`.
   */
  limits?: ReadonlyMap<string, TaskLimits> | null;
  /** Every registered task type, with `limits`: a shared store claims type by type while some are limited. */
  types?: readonly string[];
  /** Hears of each type whose job the claim passed over because of its limit (kiln_task_limited_total). */
  passedOver?: (type: string) => void;
}

export interface ScheduleFire {
  name: string;
  /**
   * The schedule as the caller read it: the tick applies only while its `nextRunAt` and
   * `updatedAt` are still these. Null: a trigger (one job now; `nextRunAt` is not touched).
   */
  expected: { nextRunAt: number | null; updatedAt: number } | null;
  /** `nextRunAt` after the tick. */
  nextRunAt: number | null;
  /** The tick time (or the trigger's), recorded as `lastRunAt` with the job. */
  runAt: number;
  /** The job to make; null: the tick makes none (dropped, or its task type is not registered). */
  job: NewJob | null;
  /** No job while the last job the schedule made is not terminal. */
  skipOverlap: boolean;
}

export type FireResult =
  /** Another caller fired this tick first, the schedule changed, or it is gone. */
  | { fired: false }
  /**
   * `overlap`: the last job is not finished, so no job was made. `insert`: what inserting
   * the job answered (a refusal leaves the tick fired, without a job); null when there was none.
   */
  | { fired: true; schedule: Schedule; overlap: boolean; insert: InsertResult | null };

export type InsertResult =
  | { ok: true; outcomes: InsertOutcome[] }
  | { ok: false; reason: 'queue_full'; pending: number; capacity: number }
  | { ok: false; reason: 'idempotency_conflict'; index: number; existingId: string }
  | { ok: false; reason: 'unknown_dependency'; index: number; dependency: string };

/** `created`: a new job; `replayed`: the idempotency key matched an existing job. */
export interface InsertOutcome {
  created: boolean;
  job: Job;
  /**
   * Answered by dedupe: `inflight`, a job of the same key that is not finished;
   * `result`, one that completed within the item's `reuseMs`.
   */
  dedupe?: 'inflight' | 'result';
}

export interface ClaimedJob extends JobSummary {
  /** The payload as JSON text, handed to the thread as it is stored. */
  payloadText: string;
  /** The completed dependencies, in `dependsOn` order. */
  parents: ParentResult[];
}

/** What the retry policy decided for an attempt. */
export type AttemptOutcome =
  /** `resultText`: the result as JSON text. */
  | { kind: 'completed'; resultText: string }
  /** `retryAt` null: the job fails for good; else it is `retrying` until then. */
  | { kind: 'failed'; error: JobError; retryAt: number | null }
  /** Give the job back without using up the attempt (shutdown, a batch that broke): `retrying` at `retryAt`. */
  | { kind: 'released'; error: JobError; retryAt: number }
  /**
   * The attempt's handler never started (a claim rescued before its start was recorded):
   * the job is `queued` again as it was before the claim, its attempt not counted, no
   * error charged. Applies only while no start is recorded for the attempt.
   */
  | { kind: 'unstarted' };

export interface FinishItem {
  id: string;
  attempt: number;
  owner: string;
  outcome: AttemptOutcome;
  /** Rescue: applies only if the lease has run out by the store's clock. */
  expired?: boolean;
  /** When the attempt really started, if later than its claim (a look-ahead waits for the one before it). */
  startedAt?: number;
}

export interface Finished {
  status: JobStatus;
  /** Dependents that became ready or failed. */
  others: number;
}

/** An attempt whose handler started: the job, the attempt and the lease owner that claimed it. */
export interface StartedAttempt {
  id: string;
  attempt: number;
  owner: string;
  /** When the handler started (ms since the epoch). */
  startedAt: number;
}

/** An attempt whose lease ran out, as the rescuer needs it. */
export interface ExpiredAttempt {
  id: string;
  type: string;
  owner: string;
  attempt: number;
  /** Whether a start of its handler was recorded (`started`); if not, the attempt is given back. */
  started: boolean;
  maxAttempts: number;
  backoff: Job['backoff'];
}

/** A pending callback delivery leased to its caller. */
export interface DueDelivery {
  /** The Kiln-Delivery id, the same for every attempt. */
  id: string;
  jobId: string;
  event: CallbackEvent;
  /** The attempt to make now, 1-based. */
  attempt: number;
  url: string;
  /** The body an earlier attempt sent (retries send the same); null for a first attempt. */
  body: string | null;
  /** For a first attempt, the job as it is now; else null. */
  job: Job | null;
}

export interface DeliveryAttempt {
  id: string;
  attempt: number;
  owner: string;
  /** The body sent, kept for the retries. */
  body: string;
  httpStatus: number | null;
  error: string | null;
  /** `delivered`: a 2xx came; `retry`: it failed, another attempt follows; `failed`: it failed for good. */
  outcome: 'delivered' | 'retry' | 'failed';
  /** With `retry`: ms until the next attempt. */
  retryInMs: number;
}

export interface Changes {
  /** The job the call was about, as it is now. */
  job: Job;
  /** Other jobs the call changed (dependents released or failed). */
  others: Job[];
}

export interface InvalidState {
  invalidState: true;
  status: JobStatus;
  message: string;
}

export function isInvalidState(value: unknown): value is InvalidState {
  return typeof value === 'object' && value !== null && (value as InvalidState).invalidState === true;
}

export interface ListFilter {
  statuses?: JobStatus[];
  type?: string;
  group?: string;
  /** Jobs made by the schedule of this name. */
  schedule?: string;
  limit: number;
  /** Opaque, from a previous page's `nextCursor`. */
  cursor?: string;
}

export interface Page {
  jobs: JobSummary[];
  nextCursor: string | null;
}

/**
 * One change of one job. `job()` builds the whole job object only for a listener that
 * wants it (most changes have nobody watching).
 */
export type StoreEvent =
  /**
   * `remote`: another server made the change (it already counted it in its metrics and
   * stopped its own attempts); `job()` of a remote change is whole only for watched jobs.
   */
  | { kind: 'changed'; id: string; type: string; status: JobStatus; job: () => Job; remote?: boolean }
  | { kind: 'progress'; id: string; attempt: number; progress: Progress; job: () => Job }
  /** A claim of this process that the store could not keep (its transaction was lost): abandon the attempt. */
  | { kind: 'lost'; id: string; attempt: number }
  /** The store takes claims again (after a restart or a rebuild), or another server made jobs ready. */
  | { kind: 'ready' }
  /** Another server paused or resumed dispatch. */
  | { kind: 'paused'; paused: boolean }
  /** Callback deliveries were stored (by this server or, on a shared store, another). */
  | { kind: 'deliveries' };

export type StoreListener = (event: StoreEvent) => void;

export interface SubscribeOptions {
  watching?(id: string): boolean;
}

export interface StoreOptions {
  /** Pending jobs admitted at most. */
  capacity: number;
  /** The store's clock (tests pass a fake one). */
  clock?: () => number;
  /**
   * Priority aging (KILN_PRIORITY_AGING_MS): a queued job's effective priority rises by
   * one level per full period waited since it became ready, up to 9; claims order by
   * effective priority desc, then ready time asc. 0 or absent: off.
   */
  priorityAgingMs?: number;
}
