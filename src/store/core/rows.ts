import type {
  Callback,
  Jitter,
  Job,
  JobError,
  JobStatus,
  JobSummary,
  ParentResult,
  Progress,
} from '../../contract/job.js';
import type { ClaimedJob, DueDelivery, ExpiredAttempt } from '../store.js';
import type { Schedule } from '../../contract/schedule.js';
import type { Batch } from '../../contract/batch.js';

/**
 * Rows as both stores read them (each store's statements name their columns alike) and
 * the wire form of a job: a summary with its payload and result still JSON text, parsed
 * only when someone looks.
 */

/** A job with payload and result as JSON text, as a store hands it over. */
export interface JobWire extends JobSummary {
  payloadText: string | null;
  resultText: string | null;
  /** Set for jobs that became ready: the completed dependencies, in dependsOn order. */
  parents?: ParentResult[];
}

/** A leased callback delivery as a store reads it, before its job is attached. */
export interface DeliveryLease {
  id: string;
  jobId: string;
  event: string;
  attempt: number;
  callbackText: string | null;
  body: string | null;
}

/** A row of `jobs`. */
export interface JobRow {
  id: string;
  type: string;
  status: JobStatus;
  priority: number;
  payload: string | null;
  result: string | null;
  error: string | null;
  attempts: number;
  max_attempts: number;
  snoozes: number;
  interruptions: number;
  timeout_ms: number;
  backoff_initial_ms: number;
  backoff_factor: number;
  backoff_max_ms: number;
  backoff_jitter: Jitter;
  progress: string | null;
  idempotency_key: string | null;
  depends_on: string;
  metadata: string;
  run_at: number | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  ready_at: number | null;
  lease_owner: string | null;
  lease_expires_at: number | null;
  group_key: string | null;
  schedule: string | null;
  /** The callback as JSON text, or null. */
  callback: string | null;
  batch: string | null;
  /** Read with the whole job and by claims; lists leave it out. */
  trace?: string | null;
  /** Whether the running attempt's handler started (0 or 1 on SQLite); reads name it. */
  attempt_started?: number | boolean;
  /** `started_at` before the running attempt's claim. */
  prior_started_at?: number | null;
}

export type SummaryRow = Omit<JobRow, 'payload' | 'result'>;

/** What the rescuer needs of a running job whose lease ran out. */
export interface ExpiredRow {
  id: string;
  type: string;
  lease_owner: string;
  attempts: number;
  /** 0 or 1 (SQLite has no boolean); Postgres answers a boolean. */
  attempt_started: number | boolean;
  max_attempts: number;
  backoff_initial_ms: number;
  backoff_factor: number;
  backoff_max_ms: number;
  backoff_jitter: Jitter;
  interruptions: number;
  /** The servers (lease owners) its earlier rescued attempts ran on: a JSON array (SQLite) or an array (Postgres). */
  interrupted_by: string | string[] | null;
}

export function toExpiredAttempt(row: ExpiredRow): ExpiredAttempt {
  return {
    id: row.id,
    type: row.type,
    owner: row.lease_owner,
    attempt: row.attempts,
    started: startedAttempt(row.attempt_started),
    interruptions: row.interruptions,
    interruptedBy:
      row.interrupted_by === null
        ? []
        : typeof row.interrupted_by === 'string'
          ? (JSON.parse(row.interrupted_by) as string[])
          : row.interrupted_by,
    maxAttempts: row.max_attempts,
    backoff: {
      initialMs: row.backoff_initial_ms,
      factor: row.backoff_factor,
      maxMs: row.backoff_max_ms,
      jitter: row.backoff_jitter,
    },
  };
}

export function toWire(row: JobRow): JobWire {
  const wire = toSummary(row) as JobWire;
  wire.payloadText = row.payload;
  wire.resultText = row.result;
  return wire;
}

/** A reader's summary of a row (see asSeen). */
export function seenSummary(row: SummaryRow): JobSummary {
  return asSeen(toSummary(row), row);
}

/** A reader's wire form of a row (see asSeen). */
export function seenWire(row: JobRow): JobWire {
  return asSeen(toWire(row), row);
}

export function toSummary(row: SummaryRow): JobSummary {
  return {
    id: row.id,
    type: row.type,
    status: row.status,
    priority: row.priority,
    error: row.error === null ? null : (JSON.parse(row.error) as JobError),
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    snoozes: row.snoozes,
    interruptions: row.interruptions,
    timeoutMs: row.timeout_ms,
    backoff: {
      initialMs: row.backoff_initial_ms,
      factor: row.backoff_factor,
      maxMs: row.backoff_max_ms,
      jitter: row.backoff_jitter,
    },
    progress: row.progress === null ? null : (JSON.parse(row.progress) as Progress),
    idempotencyKey: row.idempotency_key,
    dependsOn: parseDependsOn(row.depends_on),
    metadata: row.metadata === '{}' ? {} : (JSON.parse(row.metadata) as Record<string, unknown>),
    group: row.group_key,
    callback: row.callback === null ? null : (JSON.parse(row.callback) as Callback),
    runAt: row.run_at,
    createdAt: row.created_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    readyAt: row.ready_at,
    schedule: row.schedule,
    batch: row.batch,
    trace: row.trace ?? null,
  };
}

/**
 * A job as a reader sees it. A running job whose handler has not started (claimed by a
 * server, waiting in its queue for a thread) is shown as it was before the claim: queued,
 * its attempts and `startedAt` as they were. Only a started attempt is running.
 */
export function asSeen<T extends JobSummary>(job: T, row: Pick<JobRow, 'attempt_started' | 'prior_started_at'>): T {
  if (job.status !== 'running' || row.attempt_started === undefined || startedAttempt(row.attempt_started)) return job;
  job.status = 'queued';
  job.attempts -= 1;
  job.startedAt = row.prior_started_at ?? null;
  return job;
}

/** Whether a row's `attempt_started` says its handler started (SQLite answers 0 or 1). */
export function startedAttempt(value: number | boolean | undefined): boolean {
  return value === true || value === 1;
}

/**
 * What a reader asks for as `statuses`, as the rows to read: every status asked but
 * running, and the running rows whose start is (`running`) or is not (`queued`) recorded.
 * `unstarted`/`started`: which running rows to keep; both false: none.
 */
export function statusesAsStored(statuses: readonly JobStatus[]): {
  others: JobStatus[];
  started: boolean;
  unstarted: boolean;
} {
  return {
    others: statuses.filter((status) => status !== 'running'),
    started: statuses.includes('running'),
    unstarted: statuses.includes('queued'),
  };
}

/** Running attempts not started, of one priority: how many, and the earliest time one became ready. */
export interface UnstartedCount {
  priority: number;
  n: number | string;
  oldest: number | string | null;
}

/**
 * Counts as a reader sees them: the running attempts not started (by priority) are
 * counted as queued, so pending too, and the oldest queued is the oldest of both.
 */
export function countsAsSeen<
  T extends {
    byStatus: Record<JobStatus, number>;
    queuedByPriority: number[];
    pending: number;
    oldestQueuedReadyAt: number | null;
  },
>(counts: T, unstarted: readonly UnstartedCount[]): T {
  for (const { priority, n: count, oldest } of unstarted) {
    const n = Number(count);
    counts.byStatus.running -= n;
    counts.byStatus.queued += n;
    counts.pending += n;
    counts.queuedByPriority[priority] = (counts.queuedByPriority[priority] ?? 0) + n;
    if (oldest !== null && (counts.oldestQueuedReadyAt === null || Number(oldest) < counts.oldestQueuedReadyAt)) {
      counts.oldestQueuedReadyAt = Number(oldest);
    }
  }
  return counts;
}

/** The job object a client sees, from the wire form (parses payload and result). */
export function jobFromWire(wire: JobWire): Job {
  const { payloadText, resultText, parents: _parents, ...summary } = wire;
  const job = summary as Job;
  job.payload = parseJson(payloadText);
  job.result = parseJson(resultText);
  return job;
}

export function parseDependsOn(text: string): string[] {
  return text === '[]' ? [] : (JSON.parse(text) as string[]);
}

export function parseJson(text: string | null): unknown {
  return text === null ? null : JSON.parse(text);
}

/** A row of `schedules`, as both stores read it. */
export interface ScheduleRow {
  name: string;
  cron: string;
  timezone: string;
  job: string;
  overlap: Schedule['overlap'];
  catch_up: Schedule['catchUp'];
  paused: number | boolean;
  next_run_at: number | null;
  last_run_at: number | null;
  last_job_id: string | null;
  created_at: number;
  updated_at: number;
}

export function toSchedule(row: ScheduleRow): Schedule {
  return {
    name: row.name,
    cron: row.cron,
    timezone: row.timezone,
    job: JSON.parse(row.job) as Record<string, unknown>,
    overlap: row.overlap,
    catchUp: row.catch_up,
    paused: row.paused === true || row.paused === 1,
    nextRunAt: row.next_run_at,
    lastRunAt: row.last_run_at,
    lastJobId: row.last_job_id,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** A leased delivery as the delivery service takes it; the url comes from the job's callback. */
export function dueDelivery(wire: DeliveryLease, job: Job | null, batch: Batch | null = null): DueDelivery {
  const callback = wire.callbackText === null ? null : (JSON.parse(wire.callbackText) as Callback);
  return {
    id: wire.id,
    jobId: wire.jobId,
    event: wire.event as DueDelivery['event'],
    attempt: wire.attempt,
    // A callback is never taken off a job; an empty url fails its attempt as not http(s).
    url: callback?.url ?? '',
    body: wire.body,
    job,
    batch,
  };
}

/**
 * The completed dependencies a dependent's handler sees, in dependsOn order, from the
 * parents' rows; a parent removed since it completed has no result any more.
 */
export function parentResults(
  dependsOn: readonly string[],
  rowOf: (id: string) => { type: string; result: string | null } | undefined,
): ParentResult[] {
  return dependsOn.map((id) => {
    const row = rowOf(id);
    return row === undefined ? { id, type: '', result: null } : { id, type: row.type, result: parseJson(row.result) };
  });
}

/**
 * A copy of a job with its payload text and parents: what the SQLite ready index keeps,
 * and what a claim hands out on either store (a copy of that copy, so the caller's job stays the record of
 * its attempt). One literal, so every such copy has one object shape.
 */
export function copyOf(job: JobSummary, payloadText: string, parents: ParentResult[]): JobWire & ClaimedJob {
  return {
    id: job.id,
    type: job.type,
    status: job.status,
    priority: job.priority,
    error: job.error,
    attempts: job.attempts,
    maxAttempts: job.maxAttempts,
    snoozes: job.snoozes,
    interruptions: job.interruptions,
    timeoutMs: job.timeoutMs,
    backoff: job.backoff,
    progress: job.progress,
    idempotencyKey: job.idempotencyKey,
    dependsOn: job.dependsOn,
    metadata: job.metadata,
    group: job.group,
    callback: job.callback,
    runAt: job.runAt,
    createdAt: job.createdAt,
    startedAt: job.startedAt,
    finishedAt: job.finishedAt,
    readyAt: job.readyAt,
    schedule: job.schedule,
    batch: job.batch,
    trace: job.trace,
    payloadText,
    resultText: null,
    parents,
  };
}

/** The job a claim hands to the dispatcher, from the wire form of the job claimed. */
export function claimedOf(record: JobWire): ClaimedJob {
  return copyOf(record, record.payloadText ?? 'null', record.parents ?? []);
}
