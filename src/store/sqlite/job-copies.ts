import type { InsertRow } from './protocol.js';
import type { NewJob } from '../../contract/job.js';
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
    batch: job.batch ?? null,
    trace: job.trace ?? null,
  };
}
