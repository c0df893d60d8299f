import type { JobRow } from '../../src/store/core/rows.js';

/** A row of jobs as a store reads it: a queued `resize` job, with `fields` over it. */
export function jobRow(id: string, fields: Partial<JobRow> = {}): JobRow {
  return {
    id,
    type: 'resize',
    status: 'queued',
    priority: 5,
    payload: '{"w":1}',
    result: null,
    error: null,
    attempts: 0,
    max_attempts: 3,
    snoozes: 0,
    interruptions: 0,
    timeout_ms: 1000,
    backoff_initial_ms: 100,
    backoff_factor: 2,
    backoff_max_ms: 1000,
    backoff_jitter: 'none',
    progress: null,
    idempotency_key: null,
    depends_on: '[]',
    metadata: '{}',
    run_at: null,
    created_at: 0,
    started_at: null,
    finished_at: null,
    ready_at: 0,
    lease_owner: null,
    lease_expires_at: null,
    group_key: null,
    schedule: null,
    callback: null,
    batch: null,
    ...fields,
  };
}
