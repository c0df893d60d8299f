import type { Job, JobError, JobStatus, JobSummary, NewJob, ParentResult, Progress } from '../jobs/model.js';

/**
 * The persistence boundary. Every method is one atomic transition (or a read); a
 * transition from a state the job is no longer in is refused, which makes a late
 * outcome from a timed-out, cancelled or reclaimed attempt harmless.
 *
 * Methods that change jobs return every job they changed (`changes`), the job the
 * call was about first, so the scheduler can publish events and count metrics
 * without reading them back.
 */
export interface JobStore {
  /**
   * Insert a batch atomically: all or nothing. Applies idempotency (a key used before
   * with the same type and payload replays the existing job) and the capacity (pending
   * jobs after the insert may not exceed it; replays do not count). The initial
   * status: `failed` (dependency_failed) if a dependency is failed or cancelled,
   * `waiting` if a dependency is not completed, `scheduled` if `runAt` is after
   * `now`, else `queued`. A dependency may name an earlier job of the same batch.
   */
  insert(jobs: NewJob[], now: number): Promise<InsertResult>;

  /**
   * Claim up to `limit` ready jobs, best first (priority desc, then ready time asc,
   * then id), after promoting due `scheduled`/`retrying` jobs to `queued`. Claimed
   * jobs become `running` under `lease`, `attempts` + 1, `startedAt` = now. With
   * `accept`, the claim stops at the first best ready job it refuses
   * (that job stays first in line; nothing behind it is taken instead).
   */
  claim(
    limit: number,
    lease: Lease,
    now: number,
    accept?: (job: { id: string; type: string }) => boolean,
  ): Promise<ClaimedJob[]>;

  /** Extend the lease of running jobs; answers the ids whose lease is no longer held. */
  heartbeat(ids: string[], lease: Lease): Promise<string[]>;

  /** Record progress of a running job held under `lease`; null if not held. */
  progress(id: string, lease: Lease, progress: Progress): Promise<Job | null>;

  /**
   * End an attempt of a job running under `lease` (matched by owner); null if the job
   * is no longer running under it. A `completed` outcome releases dependents whose
   * dependencies are now all completed; a terminal failure fails dependents
   * (dependency_failed), transitively.
   */
  finish(id: string, lease: Lease, outcome: AttemptOutcome, now: number): Promise<Changes | null>;

  /** A non-terminal job becomes `cancelled`; its dependents fail. */
  cancel(id: string, now: number): Promise<Changes | InvalidState | null>;

  /**
   * A `failed` or `cancelled` job gets a fresh attempt budget (`attempts` = 0, `error`
   * kept) and becomes `queued`, or `waiting` if its dependencies are not all completed.
   */
  retry(id: string, now: number): Promise<Changes | InvalidState | null>;

  /** Remove a terminal job's record. */
  remove(id: string): Promise<'removed' | InvalidState | null>;

  get(id: string): Promise<Job | null>;
  list(filter: ListFilter): Promise<Page>;
  counts(): Promise<QueueCounts>;

  /** Whether dispatch is paused; kept across restarts. */
  paused(): Promise<boolean>;
  setPaused(paused: boolean): Promise<void>;

  /** The earliest `runAt` of a `scheduled` or `retrying` job, or null. */
  nextDueAt(): Promise<number | null>;

  /**
   * Jobs running under a lease that expired before `now` become `retrying` with
   * error code `interrupted` (at now + backoff), or `failed` if that was their
   * last attempt.
   */
  recoverExpired(now: number): Promise<Job[]>;

  /** Delete terminal jobs in `statuses` that finished before `olderThan`. */
  purge(olderThan: number, statuses: JobStatus[]): Promise<number>;

  close(): Promise<void>;
}

export interface Lease {
  owner: string;
  expiresAt: number;
}

export type InsertResult =
  | { ok: true; outcomes: InsertOutcome[] }
  | { ok: false; reason: 'queue_full'; pending: number; capacity: number }
  | { ok: false; reason: 'idempotency_conflict'; index: number; existingId: string }
  | { ok: false; reason: 'unknown_dependency'; index: number; dependency: string };

/** `created`: a new job; `replayed`: the idempotency key matched an existing job. */
export interface InsertOutcome {
  created: boolean;
  job: Job;
}

export interface ClaimedJob extends Job {
  /** The completed dependencies, in `dependsOn` order. */
  parents: ParentResult[];
}

export type AttemptOutcome =
  | { kind: 'completed'; result: unknown }
  /** `retryAt` null: the job fails for good; else it is `retrying` until then. */
  | { kind: 'failed'; error: JobError; retryAt: number | null }
  /** Give the job back without using up the attempt (shutdown): `retrying` at `retryAt`. */
  | { kind: 'released'; error: JobError; retryAt: number };

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
  limit: number;
  /** Opaque, from a previous page's `nextCursor`. */
  cursor?: string;
}

export interface Page {
  jobs: JobSummary[];
  nextCursor: string | null;
}

export interface QueueCounts {
  byStatus: Record<JobStatus, number>;
  /** Queued jobs per priority, index = priority. */
  queuedByPriority: number[];
  /** waiting + scheduled + queued + retrying. */
  pending: number;
  /** When the oldest queued job became ready; null when none is queued. */
  oldestQueuedReadyAt: number | null;
}

export interface StoreOptions {
  /** Pending jobs admitted at most. */
  capacity: number;
  /** For `interrupted` retries computed by the store. */
  random?: () => number;
}
