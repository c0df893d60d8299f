/** Settings on PostgreSQL: dispatch paused cluster-wide, and task limit overrides. */
import type { LimitOverride } from '../../contract/limits.js';
import type { StoreContext } from './context.js';
import { LIMITS_PREFIX, parseOverrides } from '../core/settings-codec.js';

function settingStatements(schema: string) {
  const s = `"${schema}"`;
  return {
    paused: `SELECT value FROM ${s}.settings WHERE key = 'paused'`,
    settingsByPrefix: `SELECT key, value FROM ${s}.settings WHERE starts_with(key, $1)`,
    putSetting: `INSERT INTO ${s}.settings (key, value) VALUES ($1, $2)
      ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
    deleteSetting: `DELETE FROM ${s}.settings WHERE key = $1`,
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

  async limitOverrides(): Promise<Map<string, LimitOverride>> {
    const rows = await this.#ctx.db.query<{ key: string; value: string }>(this.#sql.settingsByPrefix, [LIMITS_PREFIX]);
    return parseOverrides(rows.rows.map((row) => [row.key, row.value]));
  }

  async setLimitOverride(type: string, override: LimitOverride | null): Promise<void> {
    if (override === null) await this.#ctx.db.query(this.#sql.deleteSetting, [LIMITS_PREFIX + type]);
    else await this.#ctx.db.query(this.#sql.putSetting, [LIMITS_PREFIX + type, JSON.stringify(override)]);
  }
}
