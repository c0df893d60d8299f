/**
 * The first schema of the PostgreSQL store (docs/postgres-store.md §2): jobs with their
 * per-attempt leases, dependency edges, settings, the nodes of the cluster, counts kept
 * as per-connection deltas by statement triggers, and the store's clock.
 * `{{schema}}` is replaced with the quoted schema name.
 *
 * Times are milliseconds since the epoch (bigint), as the API and the SQLite store use
 * them; every one that decides anything is computed in SQL from `now_ms()`.
 */
export default `
-- The database's clock in ms. A session may pin it (kiln.now_ms) so tests can move time;
-- servers never set it.
CREATE FUNCTION {{schema}}.now_ms() RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT coalesce(nullif(current_setting('kiln.now_ms', true), '')::bigint,
                  (extract(epoch FROM now()) * 1000)::bigint)
$$;

CREATE TABLE {{schema}}.jobs (
  id uuid PRIMARY KEY,
  type text NOT NULL,
  status text NOT NULL
    CHECK (status IN ('waiting', 'scheduled', 'queued', 'running', 'retrying', 'completed', 'failed', 'cancelled')),
  priority smallint NOT NULL,
  payload text NOT NULL,
  result text,
  error text,
  attempts int NOT NULL DEFAULT 0,
  max_attempts int NOT NULL,
  timeout_ms bigint NOT NULL,
  backoff_initial_ms bigint NOT NULL,
  backoff_factor float8 NOT NULL,
  backoff_max_ms bigint NOT NULL,
  backoff_jitter text NOT NULL,
  progress text,
  idempotency_key text,
  depends_on text NOT NULL DEFAULT '[]',
  metadata text NOT NULL DEFAULT '{}',
  run_at bigint,
  created_at bigint NOT NULL,
  started_at bigint,
  finished_at bigint,
  ready_at bigint,
  -- Taken from ready_order whenever the job becomes queued: FIFO among jobs ready in the same ms.
  ready_seq bigint,
  lease_owner text,
  lease_expires_at bigint
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 5000,
        autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE SEQUENCE {{schema}}.ready_order;

-- The claim reads this in order: best priority, then oldest ready time, then the order in
-- which jobs became ready. No sort.
CREATE INDEX jobs_claim ON {{schema}}.jobs (priority DESC, ready_at, ready_seq) WHERE status = 'queued';
CREATE INDEX jobs_due ON {{schema}}.jobs (run_at) WHERE status IN ('scheduled', 'retrying');
CREATE INDEX jobs_lease ON {{schema}}.jobs (lease_expires_at) WHERE status = 'running';
-- Lists by status for the statuses a newest-first walk of the primary key may have to go
-- far to find (the others are recent or plentiful). Only jobs entering these statuses
-- write to it: a claim or a completion does not. A list by type walks the primary key.
CREATE INDEX jobs_status ON {{schema}}.jobs (status, id) WHERE status IN ('waiting', 'failed', 'cancelled');
CREATE INDEX jobs_finished ON {{schema}}.jobs (status, finished_at) WHERE finished_at IS NOT NULL;
CREATE UNIQUE INDEX jobs_idem ON {{schema}}.jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE {{schema}}.job_deps (
  child uuid NOT NULL,
  parent uuid NOT NULL,
  position smallint NOT NULL,
  PRIMARY KEY (child, position)
);
CREATE INDEX job_deps_parent ON {{schema}}.job_deps (parent);

CREATE TABLE {{schema}}.settings (key text PRIMARY KEY, value text NOT NULL);

CREATE TABLE {{schema}}.nodes (
  id text PRIMARY KEY,
  host text NOT NULL,
  pid int NOT NULL,
  version text NOT NULL,
  threads int NOT NULL,
  busy int NOT NULL,
  started_at bigint NOT NULL,
  last_seen_at bigint NOT NULL,
  stopped_at bigint
);

-- Jobs per status and priority as deltas: each connection adds to its own rows (slot =
-- its backend pid), so no two transactions wait on one counter; readers sum.
CREATE TABLE {{schema}}.counts (
  slot int NOT NULL,
  status text NOT NULL,
  priority smallint NOT NULL,
  n bigint NOT NULL,
  PRIMARY KEY (slot, status, priority)
);

CREATE FUNCTION {{schema}}.count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.counts (slot, status, priority, n)
  SELECT pg_backend_pid(), status, priority, count(*) FROM new_rows GROUP BY status, priority
  ON CONFLICT (slot, status, priority) DO UPDATE SET n = {{schema}}.counts.n + excluded.n;
  RETURN NULL;
END $$;

CREATE FUNCTION {{schema}}.count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.counts (slot, status, priority, n)
  SELECT pg_backend_pid(), status, priority, sum(d) FROM (
    SELECT status, priority, 1 AS d FROM new_rows
    UNION ALL
    SELECT status, priority, -1 AS d FROM old_rows) changed
  GROUP BY status, priority HAVING sum(d) <> 0
  ON CONFLICT (slot, status, priority) DO UPDATE SET n = {{schema}}.counts.n + excluded.n;
  RETURN NULL;
END $$;

CREATE FUNCTION {{schema}}.count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.counts (slot, status, priority, n)
  SELECT pg_backend_pid(), status, priority, -count(*) FROM old_rows GROUP BY status, priority
  ON CONFLICT (slot, status, priority) DO UPDATE SET n = {{schema}}.counts.n + excluded.n;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON {{schema}}.jobs
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_inserted();
CREATE TRIGGER jobs_count_update AFTER UPDATE ON {{schema}}.jobs
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_updated();
CREATE TRIGGER jobs_count_delete AFTER DELETE ON {{schema}}.jobs
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_deleted();

-- Every non-terminal job that depends on one of roots, transitively, fails with
-- dependency_failed. roots_cancelled: the roots were cancelled (not failed), for the message.
CREATE FUNCTION {{schema}}.fail_dependents(roots uuid[], roots_cancelled boolean)
RETURNS SETOF {{schema}}.jobs LANGUAGE plpgsql AS $$
DECLARE
  frontier uuid[] := roots;
  cancelled boolean := roots_cancelled;
  at_ms bigint := {{schema}}.now_ms();
  next_ids uuid[];
BEGIN
  LOOP
    WITH children AS (
      SELECT DISTINCT ON (d.child) d.child, d.parent FROM {{schema}}.job_deps d
      WHERE d.parent = ANY(frontier) ORDER BY d.child, d.position),
    failed AS (
      UPDATE {{schema}}.jobs c SET status = 'failed', finished_at = at_ms, run_at = NULL,
        lease_owner = NULL, lease_expires_at = NULL,
        error = json_build_object('code', 'dependency_failed',
          'message', 'dependency ' || children.parent || CASE WHEN cancelled THEN ' was cancelled' ELSE ' failed' END,
          'attempt', CASE WHEN c.status = 'running' THEN c.attempts ELSE 0 END)::text
      FROM children WHERE c.id = children.child AND c.status IN ('waiting', 'scheduled', 'queued', 'running', 'retrying')
      RETURNING c.*)
    SELECT coalesce(array_agg(failed.id), '{}') INTO next_ids FROM failed;
    EXIT WHEN cardinality(next_ids) = 0;
    RETURN QUERY SELECT * FROM {{schema}}.jobs WHERE id = ANY(next_ids);
    frontier := next_ids;
    cancelled := false;
  END LOOP;
END $$;

-- Waiting children of parents (which just completed) whose parents are now all completed
-- become ready: scheduled if their runAt is ahead, else queued.
CREATE FUNCTION {{schema}}.release_dependents(parents uuid[])
RETURNS SETOF {{schema}}.jobs LANGUAGE sql AS $$
  UPDATE {{schema}}.jobs c
  SET status = CASE WHEN c.run_at > {{schema}}.now_ms() THEN 'scheduled' ELSE 'queued' END,
      ready_at = CASE WHEN c.run_at > {{schema}}.now_ms() THEN NULL ELSE {{schema}}.now_ms() END,
      ready_seq = CASE WHEN c.run_at > {{schema}}.now_ms() THEN NULL ELSE nextval('{{schema}}.ready_order') END,
      run_at = CASE WHEN c.run_at > {{schema}}.now_ms() THEN c.run_at ELSE NULL END
  WHERE c.id IN (SELECT child FROM {{schema}}.job_deps WHERE parent = ANY(parents))
    AND c.status = 'waiting'
    AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_deps d JOIN {{schema}}.jobs p ON p.id = d.parent
                    WHERE d.child = c.id AND p.status <> 'completed')
  RETURNING c.*
$$;

-- Ends attempts, each fenced on job, attempt, owner and status running (and, for a
-- rescue, on its lease having run out by now_ms()). Kinds: completed, failed (for good),
-- retry, released (retrying at now + retry_in ms; released gives the attempt back).
-- Answers the accepted items, then the dependents they released or failed (is_other).
CREATE FUNCTION {{schema}}.finish(
  p_ids uuid[], p_attempts int[], p_owners text[], p_kinds text[], p_results text[], p_errors text[],
  p_progress text[], p_retry_in bigint[], p_expired boolean[], p_started bigint[])
RETURNS TABLE (job_id uuid, job_status text, job_run_at bigint, job_finished_at bigint, is_other boolean)
LANGUAGE plpgsql AS $$
DECLARE
  at_ms bigint := {{schema}}.now_ms();
  done_ids uuid[];
  done_status text[];
  done_run_at bigint[];
  done_finished bigint[];
  completed_ids uuid[];
  failed_ids uuid[];
BEGIN
  -- Waiting children are locked first: two parents of one child finishing at once take
  -- turns, and the second one's release (a later statement, a fresh snapshot) sees the first.
  PERFORM 1 FROM {{schema}}.jobs c
  WHERE c.id IN (SELECT d.child FROM {{schema}}.job_deps d WHERE d.parent = ANY(p_ids)) AND c.status = 'waiting'
  ORDER BY c.id FOR UPDATE;

  -- Each item's row is found by its id alone and locked, then fenced on what it holds now:
  -- a plan that went by status could read every row that was ever running (dead index
  -- entries included) whenever the statistics think few are. LIMIT 1 (the id is unique)
  -- keeps the planner from pushing the fence into the lookup.
  WITH i AS (
    SELECT * FROM unnest(p_ids, p_attempts, p_owners, p_kinds, p_results, p_errors, p_progress, p_retry_in,
                         p_expired, p_started)
      AS i(id, attempt, owner, kind, result, error, progress, retry_in, expired, started)),
  t AS MATERIALIZED (
    SELECT i.*, r.tid FROM i CROSS JOIN LATERAL (
      SELECT j.ctid AS tid, j.status, j.attempts, j.lease_owner, j.lease_expires_at
      FROM {{schema}}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
    WHERE r.status = 'running' AND r.attempts = i.attempt AND r.lease_owner = i.owner
      AND (NOT i.expired OR r.lease_expires_at < at_ms)),
  u AS (
    UPDATE {{schema}}.jobs j SET
      status = CASE t.kind WHEN 'completed' THEN 'completed' WHEN 'failed' THEN 'failed' ELSE 'retrying' END,
      result = CASE WHEN t.kind = 'completed' THEN t.result ELSE j.result END,
      error = CASE WHEN t.kind = 'completed' THEN j.error ELSE t.error END,
      progress = CASE WHEN t.kind = 'completed' THEN coalesce(t.progress, j.progress) ELSE j.progress END,
      run_at = CASE WHEN t.kind IN ('retry', 'released') THEN at_ms + t.retry_in END,
      finished_at = CASE WHEN t.kind IN ('completed', 'failed') THEN at_ms END,
      attempts = CASE WHEN t.kind = 'released' THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
      started_at = coalesce(t.started, j.started_at),
      lease_owner = NULL, lease_expires_at = NULL
    FROM t
    WHERE j.ctid = t.tid
    RETURNING j.id, j.status, j.run_at, j.finished_at)
  SELECT array_agg(u.id), array_agg(u.status), array_agg(u.run_at), array_agg(u.finished_at)
  INTO done_ids, done_status, done_run_at, done_finished FROM u;

  IF done_ids IS NULL THEN RETURN; END IF;
  RETURN QUERY SELECT x.id, x.st, x.r, x.f, false
    FROM unnest(done_ids, done_status, done_run_at, done_finished) AS x(id, st, r, f);
  completed_ids := ARRAY(SELECT x.id FROM unnest(done_ids, done_status) AS x(id, st) WHERE x.st = 'completed');
  failed_ids := ARRAY(SELECT x.id FROM unnest(done_ids, done_status) AS x(id, st) WHERE x.st = 'failed');
  IF cardinality(completed_ids) > 0 THEN
    RETURN QUERY SELECT r.id, r.status, r.run_at, r.finished_at, true
      FROM {{schema}}.release_dependents(completed_ids) r;
  END IF;
  IF cardinality(failed_ids) > 0 THEN
    RETURN QUERY SELECT r.id, r.status, r.run_at, r.finished_at, true
      FROM {{schema}}.fail_dependents(failed_ids, false) r;
  END IF;
END $$;
`;
