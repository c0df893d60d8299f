import { functionOf as functionIn, rewritten as rewrittenIn } from './step-text.js';
import { statusIs } from '../sql.js';
import groups from './004-groups.js';
import finishFence from './007-finish-fence.js';

/**
 * Jobs named by id, found by id, whatever the statistics say. On a table analyzed while no
 * job ran or waited (a new schema's first ANALYZE), the planner counted on one running and
 * one waiting job, and read a status's partial index in place of the ids: every entry of
 * `jobs_running_type` (dead ones included) for each finish, every waiting job in
 * `jobs_status` for each finish's children and each release of them. Each function is the
 * one an earlier step made, with the statements below rewritten:
 *
 * - the finish function of step 7: its UPDATE fenced with `statusIs` (sql.ts), and the
 *   waiting children of the finished jobs locked each by its id (LATERAL … LIMIT 1, in id
 *   order, fenced with `statusIs`) instead of read in `jobs_status`;
 * - `release_dependents` of step 4: its children found the same way and each child's
 *   parents by their ids (a plan that hashed every job to find them was as likely), its
 *   UPDATE fenced with `statusIs` and given the ids as an array (joined to them, it read
 *   the whole table to hash it), its children's turns worked out once (`MATERIALIZED`: a
 *   nested loop otherwise ran `round_base` for every child once per child).
 */
const rewritten = (text: string, rewrites: [from: string, to: string][]) => rewrittenIn('015', text, rewrites);
const functionOf = (step: string, create: string) => functionIn('015', step, create);

const finish = rewritten(finishFence, [
  [
    `  PERFORM 1 FROM {{schema}}.jobs c
  WHERE c.id IN (SELECT d.child FROM {{schema}}.job_deps d WHERE d.parent = ANY(p_ids)) AND c.status = 'waiting'
  ORDER BY c.id FOR UPDATE;`,
    `  PERFORM 1 FROM (SELECT DISTINCT d.child FROM {{schema}}.job_deps d WHERE d.parent = ANY(p_ids) ORDER BY d.child) k
  CROSS JOIN LATERAL (
    SELECT c.id FROM {{schema}}.jobs c WHERE c.id = k.child AND ${statusIs('c', 'waiting')} LIMIT 1 FOR UPDATE) c;`,
  ],
  ["WHERE j.id = t.id AND j.status = 'running' AND", `WHERE j.id = t.id AND ${statusIs('j', 'running')} AND`],
]);

const releaseDependents = rewritten(functionOf(groups, 'CREATE OR REPLACE FUNCTION {{schema}}.release_dependents('), [
  [
    `    FROM {{schema}}.jobs c
    WHERE c.id IN (SELECT child FROM {{schema}}.job_deps WHERE parent = ANY(parents))
      AND c.status = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_deps d JOIN {{schema}}.jobs p ON p.id = d.parent
                      WHERE d.child = c.id AND p.status <> 'completed')),`,
    `    FROM (SELECT DISTINCT d.child FROM {{schema}}.job_deps d WHERE d.parent = ANY(parents)) k
    CROSS JOIN LATERAL (
      SELECT c.id, c.run_at, c.priority, c.group_key FROM {{schema}}.jobs c
      WHERE c.id = k.child AND ${statusIs('c', 'waiting')} LIMIT 1) c
    WHERE NOT EXISTS (
      SELECT 1 FROM {{schema}}.job_deps d
      CROSS JOIN LATERAL (SELECT p.status FROM {{schema}}.jobs p WHERE p.id = d.parent LIMIT 1) p
      WHERE d.child = c.id AND p.status <> 'completed')),`,
  ],
  ['  turns AS (', '  turns AS MATERIALIZED ('],
  [
    "  WHERE c.id = ready.id AND c.status = 'waiting'",
    `  WHERE c.id = ANY (ARRAY(SELECT id FROM ready)) AND c.id = ready.id AND ${statusIs('c', 'waiting')}`,
  ],
]);

export default `${finish}\n${releaseDependents}`;
