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

let lastMs = Number.NaN;
let lastIso = '';

/**
 * A time as RFC 3339. The last one is kept: the jobs of a batch share their creation
 * time, and formatting a date was a fifth of rendering a job.
 */
function isoTime(ms: number): string {
  if (ms !== lastMs) {
    lastIso = new Date(ms).toISOString();
    lastMs = ms;
  }
  return lastIso;
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
