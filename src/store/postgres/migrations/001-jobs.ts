/**
 * Live jobs, finished jobs (partitioned by hour of finishing), dependency edges,
 * settings, nodes and their leases, counts as per-writer deltas (docs/postgres-store.md §2).
 * `{{schema}}` is replaced with the quoted schema name.
 */
export default `
CREATE TABLE {{schema}}.jobs (
  id uuid PRIMARY KEY,
  type text NOT NULL,
  priority smallint NOT NULL,
  status text NOT NULL CHECK (status IN ('waiting', 'scheduled', 'queued', 'running', 'retrying')),
  payload text NOT NULL,
  error text,
  progress text,
  metadata text NOT NULL,
  backoff jsonb NOT NULL,
  attempts int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL,
  timeout_ms int NOT NULL,
  idempotency_key text,
  idempotency_hash bytea,
  depends_on uuid[] NOT NULL DEFAULT '{}',
  run_at timestamptz,
  ready_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  lease_owner text
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000,
        autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_insert_scale_factor = 0);

CREATE INDEX jobs_claim ON {{schema}}.jobs (priority DESC, ready_at, id) WHERE status = 'queued';
CREATE INDEX jobs_due ON {{schema}}.jobs (run_at) WHERE status IN ('scheduled', 'retrying');
CREATE INDEX jobs_owner ON {{schema}}.jobs (lease_owner, type) WHERE status = 'running';
CREATE INDEX jobs_list ON {{schema}}.jobs (status, id);
CREATE UNIQUE INDEX jobs_idem ON {{schema}}.jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE {{schema}}.jobs_done (
  LIKE {{schema}}.jobs INCLUDING DEFAULTS,
  result text,
  finished_at timestamptz NOT NULL,
  CHECK (status IN ('completed', 'failed', 'cancelled'))
) PARTITION BY RANGE (finished_at);
CREATE INDEX ON {{schema}}.jobs_done (id);
CREATE INDEX ON {{schema}}.jobs_done (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE TABLE {{schema}}.jobs_done_default PARTITION OF {{schema}}.jobs_done DEFAULT;
CREATE TABLE {{schema}}.jobs_kept (LIKE {{schema}}.jobs_done INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
CREATE INDEX ON {{schema}}.jobs_kept (id);
CREATE INDEX ON {{schema}}.jobs_kept (status, finished_at);

CREATE TABLE {{schema}}.job_deps (
  child uuid NOT NULL,
  parent uuid NOT NULL,
  position smallint NOT NULL,
  PRIMARY KEY (child, position)
);
CREATE INDEX job_deps_parent ON {{schema}}.job_deps (parent);

CREATE TABLE {{schema}}.settings (key text PRIMARY KEY, value jsonb NOT NULL);

CREATE TABLE {{schema}}.nodes (
  id text PRIMARY KEY,
  host text NOT NULL,
  pid int NOT NULL,
  version text NOT NULL,
  threads int NOT NULL,
  busy int NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  lease_expires_at timestamptz NOT NULL,
  dead_at timestamptz
);

CREATE TABLE {{schema}}.counts (
  slot text NOT NULL,
  status text NOT NULL,
  priority smallint NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (slot, status, priority)
);
`;
