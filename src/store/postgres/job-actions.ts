/**
 * Requests on single jobs on PostgreSQL: release (an attempt given back uncounted),
 * cancel, retry, remove, and the purge of old finished jobs. Each locks the job's row,
 * asks the core whether the request applies (core/rules.ts), and writes.
 */
import type { Changes, InvalidState } from '../store.js';
import type { JobStatus } from '../../contract/job.js';
import type { StoreContext } from './context.js';
import type pg from 'pg';
import { idIn, JOB_COLUMNS, lockParents, prefixed, statusIs } from './sql.js';
import { cancelledError, cancelRefusal, dedupeRival, removeRefusal, retryTarget } from '../core/rules.js';
import { inIdOrder, UUID } from './connection.js';
import { jobFromWire, type JobRow, type JobWire, parentResults, toWire } from '../core/rows.js';

const HOUR_MS = 3_600_000;

/**
 * Hours of finish time a partition of `jobs_done` spans for a retention of `ageMs`: a 24th
 * of it, at least one. A job stays at most that much past its retention, and a table kept
 * for its retention has about 25 partitions, each of which a read by id looks in.
 */
export function partitionHours(ageMs: number): number {
  return Math.max(1, Math.floor(ageMs / 24 / HOUR_MS));
}

export function jobActionStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  const before = `CASE WHEN $4::bigint IS NULL THEN ${now} - $2 ELSE least(${now} - $2, $4::bigint) END`;
  return {
    release: `
WITH held AS MATERIALIZED (
  SELECT i.* FROM unnest($1::uuid[], $2::int[], $3::text[], $4::bigint[]) AS i(id, attempt, owner, previous_start)
  CROSS JOIN LATERAL (
    SELECT j.status, j.attempts, j.lease_owner FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
  WHERE r.status = 'running' AND r.attempts = i.attempt AND r.lease_owner = i.owner)
UPDATE ${s}.jobs j SET status = 'queued', attempts = j.attempts - 1, started_at = held.previous_start,
  lease_owner = NULL, lease_expires_at = NULL
FROM held WHERE ${idIn('j', 'held')} AND j.id = held.id AND ${statusIs('j', 'running')} AND j.attempts = held.attempt
  AND j.lease_owner = held.owner
RETURNING ${prefixed('j')}`,
    lockJob: `SELECT status, attempts, depends_on FROM ${s}.jobs WHERE id = $1 FOR UPDATE`,
    /**
     * A finished job in `jobs_done` (migration 021) moved back into `jobs` as it is: a
     * cancel, retry or removal then finds it there. The two tables' columns are the same, in
     * the same order.
     */
    restore: `
WITH back AS (DELETE FROM ${s}.jobs_done WHERE id = $1 RETURNING *)
INSERT INTO ${s}.jobs SELECT * FROM back`,
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
    /**
     * Retention's partitions of `jobs_done` for a status ($1 the partitioned table, $2 its
     * retention in ms, $3 hours a partition): those whose whole span is past it dropped, and
     * the next ones made ahead of need. Answers the jobs dropped, and up to when the rows left
     * in the table are all in partitions (the default partition's, older, are deleted by rows).
     */
    partitions: `
SELECT ${s}.drop_done_partitions($1, ${now} - $2)::int AS dropped,
  ${s}.prepare_done_partitions($1, $3, $3 + 1) AS made,
  (SELECT min(p.from_h) * 3600000 FROM ${s}.done_partitions($1) p) AS spans_from`,
    /**
     * A batch of the oldest terminal jobs past their retention ($1 status, $2 retention, $3
     * at most): in `jobs`, and in `jobs_done` those also finished before $4 when it is not
     * null (where its partitions start: the rows of its default partition); their edges go
     * with them.
     */
    purge: `
WITH gone AS (
  DELETE FROM ${s}.jobs WHERE id IN (
    SELECT id FROM ${s}.jobs WHERE status = $1 AND finished_at IS NOT NULL AND finished_at < ${now} - $2
    ORDER BY finished_at LIMIT $3)
  RETURNING id),
done AS (
  DELETE FROM ${s}.jobs_done WHERE status = $1 AND finished_at < ${before}
    AND id = ANY (ARRAY(SELECT id FROM ${s}.jobs_done WHERE status = $1 AND finished_at < ${before} LIMIT $3))
  RETURNING id),
edges AS (DELETE FROM ${s}.job_deps WHERE child IN (SELECT id FROM gone UNION ALL SELECT id FROM done))
SELECT (SELECT count(*) FROM gone)::int + (SELECT count(*) FROM done)::int AS n`,
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
    const result = await this.#ctx.db.joinById<JobRow>(this.#sql.release, [
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
      const state = await this.#lock(client, id);
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
      const state = await this.#lock(client, id);
      if (state === undefined) return null;
      const dependsOn = JSON.parse(state.depends_on) as string[];
      const parents =
        dependsOn.length === 0 ? new Map<string, JobStatus>() : await lockParents(client, this.#ctx.shared, dependsOn);
      const target = retryTarget(state.status, dependsOn, (parent) => parents.get(parent));
      if (typeof target !== 'string') return target;
      const rival = (await client.query<{ id: string }>(this.#sql.dedupeRival, [id])).rows[0];
      if (rival !== undefined) return dedupeRival(state.status, rival.id);
      const waiting = target === 'waiting';
      const job = (await client.query<JobRow>(this.#sql.retry, [id, waiting ? 'waiting' : 'queued'])).rows[0];
      const wire = toWire(job as JobRow);
      if (wire.status === 'queued' && dependsOn.length > 0) {
        const parents = await this.#ctx.db.readByIds<{ id: string; type: string; result: string | null }>(
          this.#ctx.shared.parents,
          dependsOn,
        );
        const byId = new Map(parents.map((row) => [row.id, row]));
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
      const state = await this.#lock(client, id);
      if (state === undefined) return null;
      const refusal = removeRefusal(state.status);
      if (refusal !== null) return refusal;
      await client.query(this.#sql.remove, [id]);
      return 'removed' as const;
    });
  }

  /**
   * The job's row locked in `jobs`, a finished one moved back from `jobs_done` first; a
   * job whose finish moved it while the lock was awaited is found there the same way.
   */
  async #lock(
    client: pg.PoolClient,
    id: string,
  ): Promise<{ status: JobStatus; attempts: number; depends_on: string } | undefined> {
    type Locked = { status: JobStatus; attempts: number; depends_on: string };
    const state = (await client.query<Locked>(this.#sql.lockJob, [id])).rows[0];
    if (state !== undefined) return state;
    await client.query(this.#sql.restore, [id]);
    return (await client.query<Locked>(this.#sql.lockJob, [id])).rows[0];
  }

  /**
   * Finished jobs past their retention: first the partitions of `jobs_done` wholly past
   * it (one DROP each, however many jobs they hold), then rows, `limit` at most, in `jobs`
   * (finished jobs that stay there) and in what `jobs_done` holds outside its partitions.
   */
  async purge(status: 'completed' | 'failed' | 'cancelled', ageMs: number, limit: number): Promise<number> {
    const table = status === 'completed' ? 'jobs_done_completed' : 'jobs_done_ended';
    const parts = await this.#ctx.db.query<{ dropped: number; made: number; spans_from: string | null }>(
      this.#sql.partitions,
      [table, ageMs, partitionHours(ageMs)],
    );
    const row = parts.rows[0];
    // Under an hour's retention every partition may hold jobs past it: rows go one by one.
    const rowsBefore = ageMs < HOUR_MS || row?.spans_from == null ? null : Number(row.spans_from);
    const result = await this.#ctx.db.query<{ n: number }>(this.#sql.purge, [status, ageMs, limit, rowsBefore]);
    return (row?.dropped ?? 0) + (result.rows[0]?.n ?? 0);
  }
}
