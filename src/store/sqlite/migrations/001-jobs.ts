/** Jobs and their dependency edges. */
export default `
CREATE TABLE jobs (
  id TEXT PRIMARY KEY NOT NULL,
  type TEXT NOT NULL,
  status TEXT NOT NULL,
  priority INTEGER NOT NULL,
  payload TEXT,
  result TEXT,
  error TEXT,
  attempts INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL,
  timeout_ms INTEGER NOT NULL,
  backoff_initial_ms INTEGER NOT NULL,
  backoff_factor REAL NOT NULL,
  backoff_max_ms INTEGER NOT NULL,
  backoff_jitter TEXT NOT NULL,
  progress TEXT,
  idempotency_key TEXT,
  depends_on TEXT NOT NULL,
  metadata TEXT NOT NULL,
  run_at INTEGER,
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,
  ready_at INTEGER,
  lease_owner TEXT,
  lease_expires_at INTEGER
);
CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_status_id ON jobs (status, id);
CREATE INDEX jobs_type_id ON jobs (type, id);
CREATE INDEX jobs_status_finished_at ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE job_deps (
  child TEXT NOT NULL,
  parent TEXT NOT NULL,
  position INTEGER NOT NULL,
  PRIMARY KEY (child, position)
) WITHOUT ROWID;
CREATE INDEX job_deps_parent ON job_deps (parent, child);
`;
