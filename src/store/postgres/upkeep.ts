import type pg from 'pg';
import type { PgConnection } from './connection.js';

const FOLD_EVERY_MS = 60_000;
/** How often one server looks whether the jobs table needs ANALYZE or VACUUM. */
const UPKEEP_EVERY_MS = 5_000;

/** The upkeep's advisory lock for `schema`, as an SQL expression (one server at a time upkeeps). */
export function upkeepLockKey(schema: string): string {
  return `('x' || left(md5('kiln:upkeep:' || '${schema}'), 16))::bit(64)::bigint`;
}

function upkeepStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  return {
    /** Folds the count rows of connections that are gone into slot 0, so the table stays small. */
    foldCounts: `
WITH gone AS (
  DELETE FROM ${s}.counts WHERE slot <> 0 AND slot NOT IN (SELECT pid FROM pg_stat_activity)
  RETURNING status, priority, n)
INSERT INTO ${s}.counts (slot, status, priority, n)
SELECT 0, status, priority, sum(n) FROM gone GROUP BY status, priority
ON CONFLICT (slot, status, priority) DO UPDATE SET n = ${s}.counts.n + excluded.n`,
    /** Rows of servers gone for a week (each start of a server is a row of its own). */
    forgetNodes: `DELETE FROM ${s}.nodes WHERE last_seen_at < ${now} - 7 * 86400000`,
    /**
     * Takes the upkeep lock if no other server holds it (a session lock, given back by
     * upkeepDone on the same connection) and says whether `jobs` wants ANALYZE (1,000
     * changes and a tenth of its rows since the last) or VACUUM (10,000 dead row versions
     * and a fifth of its live ones), by the table's own statistics counters.
     */
    upkeepDue: `
SELECT locked,
  locked AND coalesce(s.n_mod_since_analyze > greatest(1000, s.n_live_tup / 10), false) AS analyze,
  locked AND coalesce(s.n_dead_tup > greatest(10000, s.n_live_tup / 5), false) AS vacuum
FROM (SELECT pg_try_advisory_lock(${upkeepLockKey(schema)}) AS locked) l
LEFT JOIN pg_stat_user_tables s ON s.schemaname = '${schema}' AND s.relname = 'jobs'`,
    upkeepDone: `SELECT pg_advisory_unlock(${upkeepLockKey(schema)})`,
    analyze: `ANALYZE ${s}.jobs`,
    vacuum: `VACUUM (ANALYZE, SKIP_LOCKED) ${s}.jobs`,
  };
}

/**
 * The jobs table churns: every job is updated at least twice and deleted once. Where
 * autovacuum is off or slow to come (its defaults wait a minute, and scale with the
 * table), the claim index fills with dead entries and the planner's statistics go
 * stale. So one server at a time (an advisory lock) looks every few seconds and runs
 * ANALYZE or VACUUM on `jobs` itself when the table's own counters say it is due; it
 * forgets the rows of servers gone for a week too. Every minute each server folds the
 * count rows of connections that are gone.
 */
export class PgUpkeep {
  readonly #db: PgConnection;
  readonly #sql: ReturnType<typeof upkeepStatements>;
  #foldTimer: NodeJS.Timeout | null = null;
  #upkeepTimer: NodeJS.Timeout | null = null;
  #upkeeping = false;

  constructor(db: PgConnection) {
    this.#db = db;
    this.#sql = upkeepStatements(db.schema);
  }

  start(): void {
    this.#foldTimer = setInterval(() => {
      this.#db.poolQuery(this.#sql.foldCounts).catch(() => undefined);
    }, FOLD_EVERY_MS);
    this.#foldTimer.unref();
    this.#upkeepTimer = setInterval(() => void this.#upkeep(), UPKEEP_EVERY_MS);
    this.#upkeepTimer.unref();
  }

  stop(): void {
    if (this.#foldTimer !== null) clearInterval(this.#foldTimer);
    if (this.#upkeepTimer !== null) clearInterval(this.#upkeepTimer);
  }

  /** One look, under the upkeep lock, at whether `jobs` wants ANALYZE or VACUUM. */
  async #upkeep(): Promise<void> {
    if (this.#upkeeping || !this.#db.available) return;
    this.#upkeeping = true;
    try {
      // One connection for the lock, the work and the unlock: the lock is the session's.
      await this.#db.withClient(async (client) => {
        const due = await client.query<{ locked: boolean; analyze: boolean; vacuum: boolean }>(this.#sql.upkeepDue);
        const row = due.rows[0];
        if (row === undefined || !row.locked) return;
        try {
          await client.query(this.#sql.forgetNodes);
          // A VACUUM of a large table may take longer than any statement of the hot path.
          const long = (text: string) => ({ text, query_timeout: 3_600_000 }) as pg.QueryConfig;
          if (row.vacuum) await client.query(long(this.#sql.vacuum));
          else if (row.analyze) await client.query(long(this.#sql.analyze));
        } finally {
          await client.query(this.#sql.upkeepDone);
        }
      });
    } catch {
      // A missed turn is taken again in a few seconds.
    } finally {
      this.#upkeeping = false;
    }
  }
}
