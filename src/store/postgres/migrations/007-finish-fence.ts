/**
 * The finish function fenced in its UPDATE's own WHERE (id, status, attempt, owner,
 * lease) instead of joining on the ctid its locking read saw: that join matched nothing
 * when a heartbeat renewed the row and committed while the finish waited for its lock,
 * and an attempt whose handler had completed was taken for a void one.
 */
export default `
CREATE OR REPLACE FUNCTION {{schema}}.finish(
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

  -- Each item's row is found by its id alone and locked (in id order: the caller sorts),
  -- then fenced on what it holds now: a plan that went by status could read every row that
  -- was ever running (dead index entries included) whenever the statistics think few are.
  -- LIMIT 1 (the id is unique) keeps the planner from pushing the fence into the lookup.
  -- The UPDATE finds the row by id again and repeats the fence: when another transaction
  -- (a heartbeat) wrote the row and committed while this one waited for the lock, the
  -- statement's snapshot still sees the older version, and only a lookup by key is
  -- followed to the newest one (READ COMMITTED re-checks the WHERE there); a join on the
  -- locked version's ctid would match nothing and void a finish that held.
  WITH i AS (
    SELECT * FROM unnest(p_ids, p_attempts, p_owners, p_kinds, p_results, p_errors, p_progress, p_retry_in,
                         p_expired, p_started)
      AS i(id, attempt, owner, kind, result, error, progress, retry_in, expired, started)),
  t AS MATERIALIZED (
    SELECT i.* FROM i CROSS JOIN LATERAL (
      SELECT j.status, j.attempts, j.lease_owner, j.lease_expires_at
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
    WHERE j.id = t.id AND j.status = 'running' AND j.attempts = t.attempt AND j.lease_owner = t.owner
      AND (NOT t.expired OR j.lease_expires_at < at_ms)
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
