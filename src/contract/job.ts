/**
 * The job model shared by every layer.
 *
 * A job moves through these statuses (API.md, "The job object"):
 *
 *   waiting    its dependencies are not all `completed` yet
 *   scheduled  `runAt` is in the future (a delayed job)
 *   queued     ready; waits for a free thread
 *   running    an attempt executes under a lease
 *   retrying   the last attempt failed; the next becomes ready at `runAt`
 *   completed, failed, cancelled   terminal
 *
 * Times are epoch milliseconds inside the process; the HTTP layer renders them as
 * RFC 3339 strings.
 */

export const JOB_STATUSES = [
  'waiting',
  'scheduled',
  'queued',
  'running',
  'retrying',
  'completed',
  'failed',
  'cancelled',
] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];

export function isTerminal(status: JobStatus): boolean {
  return status === 'completed' || status === 'failed' || status === 'cancelled';
}

export const MIN_PRIORITY = 0;
export const MAX_PRIORITY = 9;
export const PRIORITY_LEVELS = MAX_PRIORITY - MIN_PRIORITY + 1;

export const JITTER_MODES = ['full', 'equal', 'none'] as const;
export type Jitter = (typeof JITTER_MODES)[number];

export interface Backoff {
  initialMs: number;
  factor: number;
  maxMs: number;
  jitter: Jitter;
}

export const JOB_ERROR_CODES = [
  'handler_error',
  'timeout',
  'worker_crashed',
  'interrupted',
  'result_too_large',
  'dependency_failed',
  'cancelled',
  'evicted',
  'snooze_limit',
  'too_many_interruptions',
] as const;
export type JobErrorCode = (typeof JOB_ERROR_CODES)[number];

export interface JobError {
  code: JobErrorCode;
  message: string;
  /** The attempt that failed; 0 when no attempt ran (cancelled while queued, dependency failed). */
  attempt: number;
}

export interface Progress {
  percent: number;
  message: string | null;
}

/** The terminal statuses a callback can be told of (API.md "Callbacks"). */
export const CALLBACK_EVENTS = ['completed', 'failed', 'cancelled'] as const;
export type CallbackEvent = (typeof CALLBACK_EVENTS)[number];

/** Where to POST the job when it ends, as the client gave it (`events` absent: all three). */
export interface Callback {
  url: string;
  events?: CallbackEvent[];
}

export interface Job {
  id: string;
  type: string;
  status: JobStatus;
  priority: number;
  payload: unknown;
  result: unknown;
  error: JobError | null;
  attempts: number;
  maxAttempts: number;
  /** How many times a handler snoozed the job (`ctx.snooze`); a snooze gives its attempt back. */
  snoozes: number;
  /**
   * How many times an attempt of the job was rescued (its server died or stopped answering
   * while it ran it), whether the attempt counted or was given back.
   */
  interruptions: number;
  timeoutMs: number;
  backoff: Backoff;
  progress: Progress | null;
  idempotencyKey: string | null;
  dependsOn: string[];
  metadata: Record<string, unknown>;
  /** Who the job is for (fair share between groups); null: the group of jobs without one. */
  group: string | null;
  callback: Callback | null;
  /** When a `scheduled` or `retrying` job becomes ready; otherwise null. */
  runAt: number | null;
  createdAt: number;
  /** When the latest attempt started. */
  startedAt: number | null;
  finishedAt: number | null;
  /** Internal: when the job last became `queued` (orders FIFO, measures wait time). */
  readyAt: number | null;
  /** The name of the schedule that created the job, else null. */
  schedule: string | null;
  /** The batch the job was created in (POST /v1/jobs/batch), else null. */
  batch: string | null;
  /**
   * Internal: the trace context the job was submitted in (a W3C traceparent, then a space
   * and the tracestate if any; src/tracing/trace-context.ts), else null.
   */
  trace: string | null;
}

/** What a list page holds: the job without its payload and result. */
export type JobSummary = Omit<Job, 'payload' | 'result'>;

/**
 * A job as the scheduler hands it to the store: every default applied, batch refs
 * resolved to ids. The store decides the initial status.
 */
export interface NewJob {
  id: string;
  type: string;
  priority: number;
  payload: unknown;
  maxAttempts: number;
  timeoutMs: number;
  backoff: Backoff;
  idempotencyKey: string | null;
  dependsOn: string[];
  metadata: Record<string, unknown>;
  /** Fair share: ready jobs of one priority are taken round-robin across groups; absent or null: none. */
  group?: string | null;
  /** Not before this time; null for now. */
  runAt: number | null;
  createdAt: number;
  /** Dedupe: the key of the work (API.md "Deduplication"); absent or null: none. */
  dedupeKey?: string | null;
  /** With a dedupe key: a job of that key completed within this many ms is answered instead. */
  reuseMs?: number | null;
  /** The schedule that creates the job (absent or null: none). */
  schedule?: string | null;
  /** Where to POST the job when it reaches one of the callback's events; absent or null: none. */
  callback?: Callback | null;
  /** The batch the job is created in; absent or null: none. */
  batch?: string | null;
  /** The trace context the job is created in (Job.trace); absent or null: none. */
  trace?: string | null;
}

/** A completed dependency, as a dependent's handler sees it in `ctx.parents`. */
export interface ParentResult {
  id: string;
  type: string;
  result: unknown;
}

/** What a job gets when neither the request nor its task says otherwise (API.md). */
export const JOB_DEFAULTS = {
  priority: 5,
  maxAttempts: 3,
  timeoutMs: 60_000,
  backoff: { initialMs: 1000, factor: 2, maxMs: 300_000, jitter: 'full' } as Backoff,
} as const;
