/** The servers of the cluster on PostgreSQL: each beat records its node (lease.ts); these read and stop them. */
import type { NodeInfo } from '../../contract/node.js';
import type { StoreContext } from './context.js';

function nodeStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  return {
    /** Live servers: heard of within their node lease ($1 ms for rows written without one). */
    nodes: `
SELECT id, host, pid, version, threads, busy, started_at, last_seen_at FROM ${s}.nodes
WHERE stopped_at IS NULL AND last_seen_at > ${now} - coalesce(lease_ms, $1) ORDER BY started_at, id`,
    stopNode: `UPDATE ${s}.nodes SET stopped_at = ${now}, busy = 0 WHERE id = ANY($1::text[])`,
  };
}

export class PgNodes {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof nodeStatements>;

  constructor(ctx: StoreContext) {
    this.#ctx = ctx;
    this.#sql = nodeStatements(ctx.options.schema);
  }

  async nodes(): Promise<NodeInfo[]> {
    const rows = await this.#ctx.db.query<{
      id: string;
      host: string;
      pid: number;
      version: string;
      threads: number;
      busy: number;
      started_at: number;
      last_seen_at: number;
    }>(this.#sql.nodes, [3 * (this.#ctx.options.leaseMs ?? 30_000)]);
    return rows.rows.map((row) => ({
      id: row.id,
      host: row.host,
      pid: row.pid,
      version: row.version,
      threads: row.threads,
      busy: row.busy,
      startedAt: row.started_at,
      lastSeenAt: row.last_seen_at,
    }));
  }

  /** Marks the nodes of these owners stopped (the server closes); a failure is ignored. */
  async stop(owners: readonly string[]): Promise<void> {
    if (owners.length > 0) await this.#ctx.db.poolQuery(this.#sql.stopNode, [[...owners]]).catch(() => undefined);
  }
}
