/** Settings on PostgreSQL: dispatch paused cluster-wide, task limit overrides and group limits. */
import type { LimitKind, LimitOverride } from '../../contract/limits.js';
import type { GroupCount } from '../store.js';
import type { StoreContext } from './context.js';
import { limitsKey, limitsPrefix, parseOverrides } from '../core/settings-codec.js';

function settingStatements(schema: string) {
  const s = `"${schema}"`;
  return {
    paused: `SELECT value FROM ${s}.settings WHERE key = 'paused'`,
    settingsByPrefix: `SELECT key, value FROM ${s}.settings WHERE starts_with(key, $1)`,
    putSetting: `INSERT INTO ${s}.settings (key, value) VALUES ($1, $2)
      ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
    deleteSetting: `DELETE FROM ${s}.settings WHERE key = $1`,
    groupCounts: `SELECT group_key AS "group", count(*) FILTER (WHERE status = 'queued' OR NOT attempt_started)::int AS queued,
      count(*) FILTER (WHERE status = 'running' AND attempt_started)::int AS running
      FROM ${s}.jobs WHERE group_key IS NOT NULL AND status IN ('queued', 'running') GROUP BY group_key ORDER BY group_key`,
    setPaused: `INSERT INTO ${s}.settings (key, value) VALUES ('paused', $1)
ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
  };
}

export class PgSettings {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof settingStatements>;

  constructor(ctx: StoreContext) {
    this.#ctx = ctx;
    this.#sql = settingStatements(ctx.options.schema);
  }

  async setPaused(paused: boolean): Promise<void> {
    await this.#ctx.db.query(this.#sql.setPaused, [String(paused)]);
    this.#ctx.news.announcePaused(paused);
  }

  async paused(): Promise<boolean> {
    const row = (await this.#ctx.db.query<{ value: string }>(this.#sql.paused)).rows[0];
    return row?.value === 'true';
  }

  async limitOverrides(kind: LimitKind): Promise<Map<string, LimitOverride>> {
    const rows = await this.#ctx.db.query<{ key: string; value: string }>(this.#sql.settingsByPrefix, [
      limitsPrefix(kind),
    ]);
    return parseOverrides(
      rows.rows.map((row) => [row.key, row.value]),
      kind,
    );
  }

  async setLimitOverride(key: string, override: LimitOverride | null, kind: LimitKind): Promise<void> {
    if (override === null) await this.#ctx.db.query(this.#sql.deleteSetting, [limitsKey(kind, key)]);
    else await this.#ctx.db.query(this.#sql.putSetting, [limitsKey(kind, key), JSON.stringify(override)]);
  }

  /** Queued and running jobs of each group that has any. */
  async groupCounts(): Promise<GroupCount[]> {
    return (await this.#ctx.db.query<GroupCount>(this.#sql.groupCounts)).rows;
  }
}
