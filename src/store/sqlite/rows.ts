/** The columns of a job's summary, in the order of `SummaryRow`. */
export const SUMMARY_COLUMNS =
  'id, type, status, priority, error, attempts, max_attempts, timeout_ms, backoff_initial_ms, backoff_factor, ' +
  'backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on, metadata, run_at, created_at, started_at, ' +
  'finished_at, ready_at, lease_owner, lease_expires_at, group_key, schedule, callback';
