/**
 * Groups and fair share. `round` is a queued job's turn among the groups of its
 * priority, given by the statement that makes it queued (insert, promotion, release of
 * dependents, retry): one after the last queued job of its group at that priority, or,
 * when its group has none queued there, the lowest round queued at that priority (0
 * when none); jobs of one group made queued by one statement take consecutive rounds.
 * The claim index orders by (priority, round, ready time), so groups take turns and each
 * group is FIFO. Nothing is counted in a shared row: two transactions queueing jobs of
 * one group at once may give the same round, and then ready time decides. A group's
 * last round is read from one of two partial indexes: jobs without a group have their
 * own, because a btree condition `group_key IS NULL` does not let the scan come out in
 * round order (the planner would read every ungrouped queued job and sort). Lists by
 * group walk the primary key, like lists by type: an index on the group would cost a
 * write on every update of a grouped job.
 */
export default `
ALTER TABLE {{schema}}.jobs ADD COLUMN group_key text, ADD COLUMN round bigint NOT NULL DEFAULT 0;
DROP INDEX {{schema}}.jobs_claim;
CREATE INDEX jobs_claim ON {{schema}}.jobs (priority DESC, round, ready_at, ready_seq) WHERE status = 'queued';
DROP INDEX {{schema}}.jobs_claim_type;
CREATE INDEX jobs_claim_type ON {{schema}}.jobs (type, priority DESC, round, ready_at, ready_seq)
  WHERE status = 'queued';
CREATE INDEX jobs_group_round ON {{schema}}.jobs (priority, group_key, round DESC)
  WHERE status = 'queued' AND group_key IS NOT NULL;
CREATE INDEX jobs_ungrouped_round ON {{schema}}.jobs (priority, round DESC) WHERE status = 'queued' AND group_key IS NULL;

-- The first round a job of group g at priority p takes now (two probes of an index).
-- A SQL function, planned at each statement that calls it: a plan kept by a connection
-- (PL/pgSQL) was made when the table was small and stayed a sequential scan as it grew.
CREATE FUNCTION {{schema}}.round_base(p smallint, g text) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    CASE WHEN g IS NULL THEN
      (SELECT j.round + 1 FROM {{schema}}.jobs j
       WHERE j.status = 'queued' AND j.group_key IS NULL AND j.priority = p ORDER BY j.round DESC LIMIT 1)
    ELSE
      (SELECT j.round + 1 FROM {{schema}}.jobs j
       WHERE j.status = 'queued' AND j.group_key = g AND j.priority = p ORDER BY j.round DESC LIMIT 1)
    END,
    (SELECT j.round FROM {{schema}}.jobs j
     WHERE j.status = 'queued' AND j.priority = p ORDER BY j.priority DESC, j.round LIMIT 1),
    0)
$$;

CREATE OR REPLACE FUNCTION {{schema}}.release_dependents(parents uuid[])
RETURNS SETOF {{schema}}.jobs LANGUAGE sql AS $$
  WITH ready AS (
    SELECT c.id, c.run_at > {{schema}}.now_ms() AS later, c.priority, c.group_key
    FROM {{schema}}.jobs c
    WHERE c.id IN (SELECT child FROM {{schema}}.job_deps WHERE parent = ANY(parents))
      AND c.status = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_deps d JOIN {{schema}}.jobs p ON p.id = d.parent
                      WHERE d.child = c.id AND p.status <> 'completed')),
  turns AS (
    SELECT r.id, {{schema}}.round_base(r.priority, r.group_key)
      + row_number() OVER (PARTITION BY r.priority, r.group_key ORDER BY r.id) - 1 AS round
    FROM ready r WHERE NOT coalesce(r.later, false))
  UPDATE {{schema}}.jobs c
  SET status = CASE WHEN coalesce(ready.later, false) THEN 'scheduled' ELSE 'queued' END,
      ready_at = CASE WHEN coalesce(ready.later, false) THEN NULL ELSE {{schema}}.now_ms() END,
      ready_seq = CASE WHEN coalesce(ready.later, false) THEN NULL ELSE nextval('{{schema}}.ready_order') END,
      run_at = CASE WHEN coalesce(ready.later, false) THEN c.run_at ELSE NULL END,
      round = coalesce(turns.round, c.round)
  FROM ready LEFT JOIN turns ON turns.id = ready.id
  WHERE c.id = ready.id AND c.status = 'waiting'
  RETURNING c.*
$$;
`;
