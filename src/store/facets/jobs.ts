import type { Job, JobStatus, JobSummary, NewJob } from '../../contract/job.js';
import type { QueueCounts } from '../../contract/queue.js';
import type { Batch, NewBatch } from '../../contract/batch.js';

/** Jobs as records: made, read, listed, counted, cancelled, retried, removed and purged. */
export interface JobsFacet {
  /**
   * Insert a batch atomically: all or nothing. Applies idempotency (a key used before
   * with the same type and payload replays the existing job) and the capacity (pending
   * jobs after the insert may not exceed it; replays do not count). The initial
   * status: `failed` (dependency_failed) if a dependency is failed or cancelled,
   * `waiting` if a dependency is not completed, `scheduled` if `runAt` is in the
   * future, else `queued`. A dependency may name an earlier job of the same batch.
   * Resolves only once the jobs are durable. With `batch`, its row is written in the
   * same transaction, counting the jobs created (not the replays); the jobs carry its id.
   */
  insert(jobs: NewJob[], batch?: NewBatch): Promise<InsertResult>;

  /** A batch with its jobs counted by status; null: no such batch. */
  batch(id: string): Promise<Batch | null>;

  get(id: string): Promise<Job | null>;

  /**
   * The jobs with these ids, in any order (ids with no job are left out): how the
   * scheduler reads the jobs long polls and event streams watch again (JobEvents.sweep).
   */
  getMany(ids: readonly string[]): Promise<Job[]>;

  list(filter: ListFilter): Promise<Page>;

  counts(): Promise<QueueCounts>;

  /** A non-terminal job becomes `cancelled`; its dependents fail. */
  cancel(id: string): Promise<Changes | InvalidState | null>;

  /**
   * A `failed` or `cancelled` job gets a fresh attempt budget (`attempts` = 0, `error`
   * kept) and becomes `queued`, or `waiting` if its dependencies are not all completed.
   */
  retry(id: string): Promise<Changes | InvalidState | null>;

  /** Remove a terminal job's record. */
  remove(id: string): Promise<'removed' | InvalidState | null>;

  /** Delete up to `limit` terminal jobs in `status` that finished more than `ageMs` ago. */
  purge(status: 'completed' | 'failed' | 'cancelled', ageMs: number, limit: number): Promise<number>;
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
  /**
   * Answered by dedupe: `inflight`, a job of the same key that is not finished;
   * `result`, one that completed within the item's `reuseMs`.
   */
  dedupe?: 'inflight' | 'result';
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
  /** Jobs created in the batch of this id. */
  batch?: string;
  limit: number;
  /** Opaque, from a previous page's `nextCursor`. */
  cursor?: string;
}

export interface Page {
  jobs: JobSummary[];
  nextCursor: string | null;
}
