import { statusIs } from '../sql.js';
import finishFence from './007-finish-fence.js';

/**
 * Jobs named by id, found by id, whatever the statistics say. On a table analyzed while no
 * job ran or waited (a new schema's first ANALYZE), the planner counted on one running and
 * one waiting job, and read a status's partial index in place of the ids: every entry of
 * `jobs_running_type` (dead ones included) for each finish, every waiting job in
 * `jobs_status` for each finish's children and each release of them.
 *
 * - The finish function of step 7, its UPDATE fenced with `statusIs` (sql.ts), and the
 *   waiting children of the finished jobs locked each by its id (LATERAL … LIMIT 1, in id
 *   order, fenced with `statusIs`) instead of read in `jobs_status`.
 * - `release_dependents` of step 4, its children found the same way and each child's
 *   parents by their ids (a plan that hashed every job to find them was as likely), its
 *   UPDATE fenced with `statusIs` and given the ids as an array (joined to them, it read
 *   the whole table to hash it), its children's turns worked out once (`MATERIALIZED`: a
 *   nested loop otherwise ran `round_base` for every child once per child).
 */
function rewrite(text: string, from: string, to: string): string {
  if (text.split(from).length !== 2) throw new Error(`migration 015: expected one ${JSON.stringify(from)}`);
  return text.replace(from, to);
}

const LOCK_CHILDREN_BY_STATUS = `  PERFORM 1 FROM {{schema}}.jobs c
  WHERE c.id IN (SELECT d.child FROM {{schema}}.job_deps d WHERE d.parent = ANY(p_ids)) AND c.status = 'waiting'
  ORDER BY c.id FOR UPDATE;`;

const LOCK_CHILDREN_BY_ID = `  PERFORM 1 FROM (SELECT DISTINCT d.child FROM {{schema}}.job_deps d WHERE d.parent = ANY(p_ids) ORDER BY d.child) k
  CROSS JOIN LATERAL (
    SELECT c.id FROM {{schema}}.jobs c WHERE c.id = k.child AND ${statusIs('c', 'waiting')} LIMIT 1 FOR UPDATE) c;`;

const finish = rewrite(
  rewrite(finishFence, LOCK_CHILDREN_BY_STATUS, LOCK_CHILDREN_BY_ID),
  "WHERE j.id = t.id AND j.status = 'running' AND",
  `WHERE j.id = t.id AND ${statusIs('j', 'running')} AND`,
);

const releaseDependents = `
CREATE OR REPLACE FUNCTION {{schema}}.release_dependents(parents uuid[])
RETURNS SETOF {{schema}}.jobs LANGUAGE sql AS $$
  WITH ready AS (
    SELECT c.id, c.run_at > {{schema}}.now_ms() AS later, c.priority, c.group_key
    FROM (SELECT DISTINCT d.child FROM {{schema}}.job_deps d WHERE d.parent = ANY(parents)) k
    CROSS JOIN LATERAL (
      SELECT c.id, c.run_at, c.priority, c.group_key FROM {{schema}}.jobs c
      WHERE c.id = k.child AND ${statusIs('c', 'waiting')} LIMIT 1) c
    WHERE NOT EXISTS (
      SELECT 1 FROM {{schema}}.job_deps d
      CROSS JOIN LATERAL (SELECT p.status FROM {{schema}}.jobs p WHERE p.id = d.parent LIMIT 1) p
      WHERE d.child = c.id AND p.status <> 'completed')),
  turns AS MATERIALIZED (
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
  WHERE c.id = ANY (ARRAY(SELECT id FROM ready)) AND c.id = ready.id AND ${statusIs('c', 'waiting')}
  RETURNING c.*
$$;
`;

export default finish + releaseDependents;
