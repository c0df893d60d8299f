import type { z } from 'zod';
import type { Job, JobSummary } from '../contract/job.js';
import type { DeliveryRecord } from '../contract/delivery.js';
import type { Schedule } from '../contract/schedule.js';
import type { batchSchema, deliveriesSchema, jobSchema, jobSummarySchema } from '../contract/schemas.js';
import type { scheduleSchema } from '../contract/schedule-schemas.js';
import type { Batch } from '../contract/batch.js';

export type ApiJob = z.output<typeof jobSchema>;
export type ApiJobSummary = z.output<typeof jobSummarySchema>;
export type ApiSchedule = z.output<typeof scheduleSchema>;
export type ApiDelivery = z.output<typeof deliveriesSchema>['deliveries'][number];
export type ApiBatch = z.output<typeof batchSchema>;

const DAY_MS = 86_400_000;
/** 10000-01-01T00:00:00Z: from there on a year has more than four digits. */
const YEAR_10000_MS = 253_402_300_800_000;
const TWO_DIGITS = Array.from({ length: 60 }, (_, n) => String(n).padStart(2, '0'));
const THREE_DIGITS = Array.from({ length: 1000 }, (_, n) => String(n).padStart(3, '0'));
let day = Number.NaN;
let dayPrefix = '';

/**
 * A time as RFC 3339, as `Date.toISOString` writes it. The date is formatted once a day
 * and the time of day from tables: a job has up to four times, all different, and
 * `toISOString` for each was a fifth of a status poll's rendering.
 */
export function isoTime(ms: number): string {
  if (ms < 0 || ms >= YEAR_10000_MS || !Number.isInteger(ms)) return new Date(ms).toISOString();
  const today = Math.floor(ms / DAY_MS);
  if (today !== day) {
    dayPrefix = new Date(today * DAY_MS).toISOString().slice(0, 11);
    day = today;
  }
  let rest = ms - today * DAY_MS;
  const hours = Math.floor(rest / 3_600_000);
  rest -= hours * 3_600_000;
  const minutes = Math.floor(rest / 60_000);
  rest -= minutes * 60_000;
  const seconds = Math.floor(rest / 1000);
  return `${dayPrefix}${TWO_DIGITS[hours]}:${TWO_DIGITS[minutes]}:${TWO_DIGITS[seconds]}.${THREE_DIGITS[rest - seconds * 1000]}Z`;
}

function iso(ms: number | null): string | null {
  return ms === null ? null : isoTime(ms);
}

/** A job as API.md shows it: times as RFC 3339, internal fields left out. */
export function renderJob(job: Job): ApiJob {
  return {
    id: job.id,
    type: job.type,
    status: job.status,
    priority: job.priority,
    payload: job.payload,
    result: job.result ?? null,
    ...renderRest(job),
  };
}

/** A list item: the job without payload and result. */
export function renderSummary(job: JobSummary): ApiJobSummary {
  return { id: job.id, type: job.type, status: job.status, priority: job.priority, ...renderRest(job) };
}

function renderRest(job: JobSummary) {
  return {
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
    schedule: job.schedule,
    callback: job.callback,
    batch: job.batch,
    runAt: iso(job.runAt),
    createdAt: isoTime(job.createdAt),
    startedAt: iso(job.startedAt),
    finishedAt: iso(job.finishedAt),
  };
}

/** A batch as API.md shows it. */
export function renderBatch(batch: Batch): ApiBatch {
  return {
    id: batch.id,
    total: batch.total,
    counts: batch.counts,
    createdAt: new Date(batch.createdAt).toISOString(),
    finishedAt: iso(batch.finishedAt),
    callback: batch.callback,
  };
}

/** A schedule as API.md shows it. */
export function renderSchedule(schedule: Schedule): ApiSchedule {
  return {
    name: schedule.name,
    cron: schedule.cron,
    timezone: schedule.timezone,
    job: schedule.job,
    overlap: schedule.overlap,
    catchUp: schedule.catchUp,
    paused: schedule.paused,
    nextRunAt: iso(schedule.nextRunAt),
    lastRunAt: iso(schedule.lastRunAt),
    lastJobId: schedule.lastJobId,
    createdAt: new Date(schedule.createdAt).toISOString(),
    updatedAt: new Date(schedule.updatedAt).toISOString(),
  };
}

/** One attempt of a callback delivery (GET /v1/jobs/{id}/callbacks): the event as Kiln-Event names it. */
export function renderDelivery(record: DeliveryRecord): ApiDelivery {
  return {
    id: record.id,
    event: `job.${record.event}`,
    attempt: record.attempt,
    status: record.status,
    httpStatus: record.httpStatus,
    error: record.error,
    at: new Date(record.at).toISOString(),
  };
}
