import type { ClaimedJob } from '../store.js';
import type { InsertRow } from './protocol.js';
import type { JobSummary, NewJob, ParentResult } from '../../contract/job.js';
import type { JobWire } from '../core/rows.js';
import { canonicalJson } from '../core/canonical-json.js';

/** A new job as it crosses to the store thread: payload, metadata and callback as JSON text. */
export function insertRowOf(job: NewJob): InsertRow {
  return {
    id: job.id,
    type: job.type,
    priority: job.priority,
    payloadText: JSON.stringify(job.payload ?? null),
    canonicalPayload: job.idempotencyKey === null ? null : canonicalJson(job.payload ?? null),
    maxAttempts: job.maxAttempts,
    timeoutMs: job.timeoutMs,
    backoff: job.backoff,
    idempotencyKey: job.idempotencyKey,
    dependsOn: job.dependsOn,
    metadataText: JSON.stringify(job.metadata ?? {}),
    runAt: job.runAt,
    createdAt: job.createdAt,
    dedupeKey: job.dedupeKey ?? null,
    reuseMs: job.reuseMs ?? null,
    group: job.group ?? null,
    schedule: job.schedule ?? null,
    callbackText: job.callback == null ? null : JSON.stringify(job.callback),
  };
}

/**
 * A copy of a job with its payload text and parents: what the ready index keeps, and
 * what a claim hands out (a copy of that copy, so the caller's job stays the record of
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
    payloadText,
    resultText: null,
    parents,
  };
}

export function claimedOf(record: JobWire): ClaimedJob {
  return copyOf(record, record.payloadText ?? 'null', record.parents ?? []);
}
