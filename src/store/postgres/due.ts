import type { PgConnection } from './connection.js';
import type { StoreNews } from './notify.js';
import { ROUND_BASES } from './sql.js';

const DUE_CACHE_MS = 1000;

function dueStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  return {
    /** Due jobs become queued, ready since their runAt; the last row answers the next due time. */
    promote: `
WITH due AS MATERIALIZED (
  SELECT id, priority, group_key, run_at FROM ${s}.jobs WHERE status IN ('scheduled', 'retrying') AND run_at <= ${now}
  ORDER BY run_at LIMIT 1000 FOR UPDATE SKIP LOCKED),
${ROUND_BASES(s, 'due')},
turns AS (
  SELECT d.id, b.base + row_number() OVER (PARTITION BY d.priority, d.group_key ORDER BY d.run_at, d.id) - 1 AS round
  FROM due d JOIN bases b ON b.priority = d.priority AND b.group_key IS NOT DISTINCT FROM d.group_key),
promoted AS (
  UPDATE ${s}.jobs j SET status = 'queued', ready_at = j.run_at, ready_seq = nextval('${s}.ready_order'), run_at = NULL,
    round = turns.round
  FROM turns WHERE j.id = turns.id
  RETURNING j.id::text AS id, j.type)
SELECT id, type, NULL::bigint AS next_due FROM promoted
UNION ALL
SELECT NULL, NULL, (SELECT min(run_at) FROM ${s}.jobs
                    WHERE status IN ('scheduled', 'retrying') AND id NOT IN (SELECT id FROM due))`,

    nextDue: `SELECT min(run_at) AS at FROM ${s}.jobs WHERE status IN ('scheduled', 'retrying')`,
  };
}

/**
 * Scheduled jobs and retries becoming ready: the next due time as this server knows it,
 * and the promotion of the due jobs before a claim. A job is due when its runAt passed
 * on the database's clock; other servers' due times arrive with their announcements.
 */
export class DueJobs {
  readonly #db: PgConnection;
  readonly #news: StoreNews;
  readonly #sql: ReturnType<typeof dueStatements>;
  #due: { at: number | null; readAt: number } | null = null;
  #lastPromote = 0;

  constructor(db: PgConnection, news: StoreNews) {
    this.#db = db;
    this.#news = news;
    this.#sql = dueStatements(db.schema);
  }

  /** A job is due at `at`: the next claim after it promotes. Unknown until read, the rest stays unknown. */
  lowerDue(at: number): void {
    if (this.#due === null) this.#due = { at, readAt: 0 };
    else if (this.#due.at === null || at < this.#due.at) this.#due = { at, readAt: this.#due.readAt };
  }

  /** The next due job may have gone (a cancel): read the next one again when asked. */
  forget(): void {
    this.#due = null;
  }

  async promoteIfDue(): Promise<void> {
    // Promote when a known due time has passed, when nothing is known (start, after a
    // cancel), and once a second for what other servers scheduled without a word.
    const due = this.#due;
    const promote = due === null || (due.at !== null && due.at <= this.#db.now());
    if (!promote && Date.now() - this.#lastPromote < DUE_CACHE_MS) return;
    this.#lastPromote = Date.now();
    const readAt = Date.now();
    const promoted = await this.#db.query<{ id: string | null; type: string; next_due: number | null }>(
      this.#sql.promote,
    );
    for (const row of promoted.rows) {
      if (row.id === null) this.#due = { at: row.next_due, readAt };
      else this.#news.changed(row.id, row.type, 'queued', null);
    }
  }

  async nextDueAt(): Promise<number | null> {
    if (this.#due !== null && Date.now() - this.#due.readAt < DUE_CACHE_MS) return this.#due.at;
    const readAt = Date.now();
    const at = (await this.#db.query<{ at: number | null }>(this.#sql.nextDue)).rows[0]?.at ?? null;
    this.#due = { at, readAt };
    return at;
  }
}
