/**
 * The claim statement of the PostgreSQL store (docs/postgres-store.md §3): the best
 * queued jobs, priority first, then the time they became ready, locked with SKIP LOCKED
 * so servers claiming at once never wait for or take each other's rows, become
 * `running` under the claiming node's lease, in one statement. It reads `jobs_claim`
 * in index order (no sort), and claims nothing while the node's lease is gone or the
 * cluster is paused. `AS MATERIALIZED` keeps the planner from locking more rows than
 * the LIMIT. Parameters: $1 node id, $2 how many.
 */
export function claimStatement(schema: string): string {
  const s = `"${schema}"`;
  return `
WITH live AS (
  SELECT 1 FROM ${s}.nodes
  WHERE id = $1 AND dead_at IS NULL AND lease_expires_at > now()
    AND NOT coalesce((SELECT value = 'true'::jsonb FROM ${s}.settings WHERE key = 'paused'), false)),
picked AS MATERIALIZED (
  SELECT id FROM ${s}.jobs
  WHERE status = 'queued' AND EXISTS (SELECT FROM live)
  ORDER BY priority DESC, ready_at, id
  LIMIT $2
  FOR UPDATE SKIP LOCKED)
UPDATE ${s}.jobs j SET status = 'running', attempts = j.attempts + 1, started_at = now(),
       lease_owner = $1, progress = NULL
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.type, j.priority, j.attempts, j.ready_at`;
}
