/**
 * Requests on single jobs on PostgreSQL: release (an attempt given back uncounted),
 * cancel, retry, remove, and the purge of old finished jobs. Each locks the job's row,
 * asks the core whether the request applies (core/rules.ts), and writes.
 */
import type { Changes, InvalidState } from '../store.js';
import type { JobStatus } from '../../contract/job.js';
import type { StoreContext } from './context.js';
import { JOB_COLUMNS, prefixed, statusIs } from './sql.js';
import { cancelledError, cancelRefusal, dedupeRival, removeRefusal, retryTarget } from '../core/rules.js';
import { inIdOrder, UUID } from './connection.js';
import { jobFromWire, type JobRow, type JobWire, parentResults, toWire } from '../core/rows.js';

export function jobActionStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  return {
    release: `
WITH held AS MATERIALIZED (
  SELECT i.* FROM unnest($1::uuid[], $2::int[], $3::text[], $4::bigint[]) AS i(id, attempt, owner, previous_start)
  CROSS JOIN LATERAL (
    SELECT j.status, j.attempts, j.lease_owner FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
  WHERE r.status = 'running' AND r.attempts = i.attempt AND r.lease_owner = i.owner)
UPDATE ${s}.jobs j SET status = 'queued', attempts = j.attempts - 1, started_at = held.previous_start,
  lease_owner = NULL, lease_expires_at = NULL
FROM held WHERE j.id = held.id AND ${statusIs('j', 'running')} AND j.attempts = held.attempt AND j.lease_owner = held.owner
RETURNING ${prefixed('j')}`,
    lockJob: `SELECT status, attempts, depends_on FROM ${s}.jobs WHERE id = $1 FOR UPDATE`,
    cancel: `
UPDATE ${s}.jobs SET status = 'cancelled', error = $2, finished_at = ${now}, run_at = NULL, lease_owner = NULL,
  lease_expires_at = NULL
WHERE id = $1 RETURNING ${JOB_COLUMNS}`,
    failDependents: `SELECT ${JOB_COLUMNS} FROM ${s}.fail_dependents($1::uuid[], $2)`,
    retry: `
UPDATE ${s}.jobs SET status = $2, ready_at = CASE WHEN $2 = 'queued' THEN ${now} END,
  ready_seq = CASE WHEN $2 = 'queued' THEN nextval('${s}.ready_order') END, attempts = 0, snoozes = 0, interruptions = 0, interrupted_by = NULL,
  round = CASE WHEN $2 = 'queued' THEN ${s}.round_base(priority, group_key) ELSE round END,
  finished_at = NULL, result = NULL, progress = NULL, run_at = NULL, lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 RETURNING ${JOB_COLUMNS}`,
    remove: `
WITH gone AS (DELETE FROM ${s}.jobs WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled') RETURNING id)
DELETE FROM ${s}.job_deps WHERE child IN (SELECT id FROM gone)`,
    /** Another unfinished job with the job's dedupe key (a retry would make two). */
    dedupeRival: `SELECT l.id::text AS id FROM ${s}.jobs j JOIN ${s}.jobs l ON l.dedupe_key = j.dedupe_key AND l.id <> j.id
      WHERE j.id = $1 AND l.status NOT IN ('completed', 'failed', 'cancelled') LIMIT 1`,
    /** A batch of the oldest terminal jobs past their retention; their edges go with them. */
    purge: `
WITH gone AS (
  DELETE FROM ${s}.jobs WHERE id IN (
    SELECT id FROM ${s}.jobs WHERE status = $1 AND finished_at IS NOT NULL AND finished_at < ${now} - $2
    ORDER BY finished_at LIMIT $3)
  RETURNING id),
edges AS (DELETE FROM ${s}.job_deps WHERE child IN (SELECT id FROM gone))
SELECT count(*)::int AS n FROM gone`,
  };
}

export class PgJobActions {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof jobActionStatements>;

  constructor(ctx: StoreContext) {
    this.#ctx = ctx;
    this.#sql = jobActionStatements(ctx.options.schema);
  }

  async release(items: { id: string; attempt: number; owner: string }[]): Promise<void> {
    const rows = inIdOrder(items);
    if (rows.length === 0) return;
    const result = await this.#ctx.db.query<JobRow>(this.#sql.release, [
      rows.map((item) => item.id),
      rows.map((item) => item.attempt),
      rows.map((item) => item.owner),
      rows.map((item) => this.#ctx.running.get(item.id)?.previousStart ?? null),
    ]);
    for (const row of result.rows) {
      this.#ctx.running.delete(row.id);
      const wire = toWire(row);
      this.#ctx.news.changed(wire.id, wire.type, 'queued', () => jobFromWire(wire));
    }
  }

  async cancel(id: string): Promise<Changes | InvalidState | null> {
    if (!UUID.test(id)) return null;
    const answer = await this.#ctx.db.transaction(async (client) => {
      const state = (await client.query<{ status: JobStatus; attempts: number }>(this.#sql.lockJob, [id])).rows[0];
      if (state === undefined) return null;
      const refusal = cancelRefusal(state.status);
      if (refusal !== null) return refusal;
      const error = JSON.stringify(cancelledError(state.attempts));
      const job = (await client.query<JobRow>(this.#sql.cancel, [id, error])).rows[0] as JobRow;
      const others = (await client.query<JobRow>(this.#sql.failDependents, [[id], true])).rows;
      return { job: toWire(job), others: others.map(toWire) };
    });
    if (answer === null || 'invalidState' in answer) return answer;
    this.#ctx.running.delete(id);
    // It may have been the next due job: read the next one again when asked.
    this.#ctx.due.forget();
    return this.#ctx.news.applyChanges(answer.job, answer.others);
  }

  async retry(id: string): Promise<Changes | InvalidState | null> {
    if (!UUID.test(id)) return null;
    const answer = await this.#ctx.db.transaction(async (client) => {
      const state = (await client.query<{ status: JobStatus; depends_on: string }>(this.#sql.lockJob, [id])).rows[0];
      if (state === undefined) return null;
      const dependsOn = JSON.parse(state.depends_on) as string[];
      const parents =
        dependsOn.length === 0
          ? new Map<string, JobStatus>()
          : new Map(
              (
                await client.query<{ id: string; status: JobStatus }>(this.#ctx.shared.lockParents, [dependsOn])
              ).rows.map((row) => [row.id, row.status]),
            );
      const target = retryTarget(state.status, dependsOn, (parent) => parents.get(parent));
      if (typeof target !== 'string') return target;
      const rival = (await client.query<{ id: string }>(this.#sql.dedupeRival, [id])).rows[0];
      if (rival !== undefined) return dedupeRival(state.status, rival.id);
      const waiting = target === 'waiting';
      const job = (await client.query<JobRow>(this.#sql.retry, [id, waiting ? 'waiting' : 'queued'])).rows[0];
      const wire = toWire(job as JobRow);
      if (wire.status === 'queued' && dependsOn.length > 0) {
        const parents = await client.query<{ id: string; type: string; result: string | null }>(
          this.#ctx.shared.parents,
          [dependsOn],
        );
        const byId = new Map(parents.rows.map((row) => [row.id, row]));
        wire.parents = parentResults(dependsOn, (parent) => byId.get(parent));
      }
      return { job: wire, others: [] as JobWire[] };
    });
    if (answer === null || 'invalidState' in answer) return answer;
    return this.#ctx.news.applyChanges(answer.job, answer.others);
  }

  async remove(id: string): Promise<'removed' | InvalidState | null> {
    if (!UUID.test(id)) return null;
    return this.#ctx.db.transaction(async (client) => {
      const state = (await client.query<{ status: JobStatus }>(this.#sql.lockJob, [id])).rows[0];
      if (state === undefined) return null;
      const refusal = removeRefusal(state.status);
      if (refusal !== null) return refusal;
      await client.query(this.#sql.remove, [id]);
      return 'removed' as const;
    });
  }

  async purge(status: 'completed' | 'failed' | 'cancelled', ageMs: number, limit: number): Promise<number> {
    const result = await this.#ctx.db.query<{ n: number }>(this.#sql.purge, [status, ageMs, limit]);
    return result.rows[0]?.n ?? 0;
  }
}
