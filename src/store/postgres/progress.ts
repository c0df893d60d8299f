/**
 * Progress on PostgreSQL: told here and announced at once, written to the rows at most
 * every 200 ms (the latest report of each attempt, fenced on attempt and owner).
 */
import type { Progress } from '../../contract/job.js';
import type { StoreContext } from './context.js';
import { jobFromWire } from '../core/rows.js';
import { idIn, statusIs } from './sql.js';

const PROGRESS_EVERY_MS = 200;

export function progressStatements(schema: string) {
  const s = `"${schema}"`;
  return {
    progress: `
WITH held AS MATERIALIZED (
  SELECT i.* FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[]) AS i(id, attempt, owner, progress)
  CROSS JOIN LATERAL (
    SELECT j.status, j.attempts, j.lease_owner FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
  WHERE r.status = 'running' AND r.attempts = i.attempt AND r.lease_owner = i.owner)
UPDATE ${s}.jobs j SET progress = held.progress FROM held
WHERE ${idIn('j', 'held')} AND j.id = held.id AND ${statusIs('j', 'running')} AND j.attempts = held.attempt AND j.lease_owner = held.owner`,
  };
}

export class PgProgress {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof progressStatements>;
  #progress = new Map<string, { attempt: number; owner: string; text: string }>();
  #progressTimer: NodeJS.Timeout | null = null;

  constructor(ctx: StoreContext) {
    this.#ctx = ctx;
    this.#sql = progressStatements(ctx.options.schema);
  }

  progress(id: string, attempt: number, owner: string, progress: Progress): void {
    const running = this.#ctx.running.get(id);
    if (running === undefined || running.owner !== owner || running.wire.attempts !== attempt) return;
    running.wire.progress = progress;
    this.#progress.set(id, { attempt, owner, text: JSON.stringify(progress) });
    this.#progressTimer ??= setTimeout(() => void this.#flushProgress(), PROGRESS_EVERY_MS);
    this.#ctx.news.progress(id, attempt, progress, () => jobFromWire(running.wire));
  }

  async #flushProgress(): Promise<void> {
    this.#progressTimer = null;
    if (this.#progress.size === 0 || this.#ctx.db.closed) return;
    const entries = [...this.#progress.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    this.#progress.clear();
    await this.#ctx.db
      .joinById(this.#sql.progress, [
        entries.map(([id]) => id),
        entries.map(([, p]) => p.attempt),
        entries.map(([, p]) => p.owner),
        entries.map(([, p]) => p.text),
      ])
      .catch(() => undefined);
  }

  /** Stops the timer and writes what is left (the store closes). */
  async stop(): Promise<void> {
    if (this.#progressTimer !== null) clearTimeout(this.#progressTimer);
    await this.#flushProgress();
  }
}
