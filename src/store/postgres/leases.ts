/**
 * Leases of the PostgreSQL store (docs/postgres-store.md §5): a job's lease is its
 * node's lease. A node renews all of its leases with one heartbeat statement; the
 * rescuer on every node marks nodes whose lease ran out dead (final: a dead node can
 * renew nothing) and lists the jobs they were running. Every time is the database's
 * `now()`.
 */

/** $1 id, $2 host, $3 pid, $4 version, $5 threads, $6 lease ms. */
export function registerNodeStatement(schema: string): string {
  return `INSERT INTO "${schema}".nodes (id, host, pid, version, threads, busy, lease_expires_at)
VALUES ($1, $2, $3, $4, $5, 0, now() + $6 * interval '1 ms')`;
}

/**
 * $1 node id, $2 lease ms, $3 busy threads, $4 threads, $5 the job ids the node runs.
 * Answers whether the lease was renewed, the ids it no longer holds (cancelled or
 * rescued elsewhere), and the database's clock.
 */
export function heartbeatStatement(schema: string): string {
  const s = `"${schema}"`;
  return `
WITH renewed AS (
  UPDATE ${s}.nodes SET lease_expires_at = now() + $2 * interval '1 ms', last_seen_at = now(), busy = $3, threads = $4
  WHERE id = $1 AND dead_at IS NULL AND lease_expires_at > now()
  RETURNING id),
held AS (SELECT id FROM ${s}.jobs WHERE lease_owner = $1 AND status = 'running')
SELECT EXISTS (SELECT FROM renewed) AS renewed,
       ARRAY(SELECT unnest($5::uuid[]) EXCEPT SELECT id FROM held) AS lost,
       (extract(epoch FROM now()) * 1000)::bigint AS db_now`;
}

/** Nodes whose lease ran out become dead; answers their ids. */
export function markDeadStatement(schema: string): string {
  return `UPDATE "${schema}".nodes SET dead_at = now()
WHERE dead_at IS NULL AND lease_expires_at < now() RETURNING id`;
}

/** $1 limit. The running jobs of dead nodes, as the rescuer needs them. */
export function expiredJobsStatement(schema: string): string {
  const s = `"${schema}"`;
  return `SELECT j.id, j.type, j.lease_owner, j.attempts, j.max_attempts, j.backoff
FROM ${s}.nodes n JOIN ${s}.jobs j ON j.lease_owner = n.id AND j.status = 'running'
WHERE n.dead_at IS NOT NULL LIMIT $1`;
}
