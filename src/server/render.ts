import type { z } from 'zod';
import type { Job, JobSummary } from '../jobs/model.js';
import type { jobSchema, jobSummarySchema } from './schemas.js';

export type ApiJob = z.output<typeof jobSchema>;
export type ApiJobSummary = z.output<typeof jobSummarySchema>;

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
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
    timeoutMs: job.timeoutMs,
    backoff: job.backoff,
    progress: job.progress,
    idempotencyKey: job.idempotencyKey,
    dependsOn: job.dependsOn,
    metadata: job.metadata,
    runAt: iso(job.runAt),
    createdAt: new Date(job.createdAt).toISOString(),
    startedAt: iso(job.startedAt),
    finishedAt: iso(job.finishedAt),
  };
}
