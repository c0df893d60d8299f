/** Reads on PostgreSQL: jobs by id, the list a page at a time, and the counts. */
import type { ListFilter, Page } from '../store.js';
import type { QueueCounts } from '../../contract/queue.js';
import type { StoreContext } from './context.js';
import { inBothTables, JOB_COLUMNS, prepared, SUMMARY_COLUMNS } from './sql.js';
import { UUID } from './connection.js';
import { decodeCursor, invalidCursor, pageOf, pageSize } from '../core/page.js';
import {
  countsAsSeen,
  jobFromWire,
  type JobRow,
  seenWire,
  statusesAsStored,
  type UnstartedCount,
} from '../core/rows.js';
import { pendingOf } from '../core/statuses.js';
import { type BatchCountRow, type BatchRow, batchOf } from '../core/batches.js';
import type { Batch } from '../../contract/batch.js';
import { type Job, JOB_STATUSES, type JobStatus, PRIORITY_LEVELS } from '../../contract/job.js';

export function readStatements(schema: string) {
  const s = `"${schema}"`;
  /**
   * The jobs of batch `param` (a uuid), by its range of ids (migration 020) and then its
   * column; a batch with no range (written before the step, or gone) is looked for
   * everywhere. `prefix`: the jobs table's alias with its dot, or ''.
   */
  const inBatch = (prefix: string, param: string) => {
    const end = (column: string, otherwise: string) =>
      `coalesce((SELECT b.${column} FROM ${s}.batches b WHERE b.id = ${param}), '${otherwise}'::uuid)`;
    return `${prefix}batch = ${param} AND ${prefix}id BETWEEN ${end('first_job_id', '00000000-0000-0000-0000-000000000000')}
      AND ${end('last_job_id', 'ffffffff-ffff-ffff-ffff-ffffffffffff')}`;
  };
  return {
    /** $2: since (PgConnection.readByIds). */
    get: prepared(inBothTables(s, JOB_COLUMNS, 'id = $1', '$2')),
    counts: `SELECT status, priority, sum(n)::bigint AS n FROM ${s}.counts GROUP BY status, priority HAVING sum(n) <> 0`,
    /** Running attempts not started, by priority (running rows are few: the cluster's attempts). */
    unstarted: `SELECT priority, count(*)::int AS n, min(ready_at) AS oldest FROM ${s}.jobs
      WHERE status = 'running' AND NOT attempt_started GROUP BY priority`,
    /** When the oldest queued job became ready: one probe of the claim index per priority. */
    oldestQueued: `
SELECT min(q.ready_at) AS at FROM generate_series(0, 9) AS p(priority),
LATERAL (SELECT ready_at FROM ${s}.jobs WHERE status = 'queued' AND priority = p.priority
         ORDER BY priority DESC, round, ready_at, ready_seq LIMIT 1) AS q`,
    batch: `SELECT id::text AS id, total, remaining, created_at, finished_at, callback, trace FROM ${s}.batches WHERE id = $1`,
    /**
     * By the batch's range of ids (migration 020: a walk of the primary key from its first
     * job to its last, passing over the jobs submitted between them), but for its running
     * jobs (a claimed job not started counts as queued: core/batches.ts, batchOf): this
     * store keeps every batch's `finished_at` on its row (migration 012), so no job's finish
     * time is read.
     */
    batchCounts: `WITH r AS (SELECT j.status, j.attempt_started FROM ${s}.jobs j WHERE ${inBatch('j.', '$1::uuid')}
  UNION ALL SELECT d.status, d.attempt_started FROM ${s}.jobs_done d WHERE ${inBatch('d.', '$1::uuid')})
SELECT status, count(*) AS n, NULL::bigint AS last FROM r GROUP BY status
UNION ALL SELECT 'unstarted', count(*), NULL FROM r WHERE status = 'running' AND NOT attempt_started`,
    inBatch,
    /** Newest first, both tables walked backwards by id and merged. */
    list: (where: string[], limitParam: number) => {
      const condition = where.length > 0 ? `WHERE ${where.join(' AND ')}` : '';
      return `SELECT ${SUMMARY_COLUMNS} FROM (
  SELECT * FROM ${s}.jobs ${condition} UNION ALL SELECT * FROM ${s}.jobs_done ${condition}) j
ORDER BY j.id DESC LIMIT $${limitParam}`;
    },
  };
}

export class PgReads {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof readStatements>;

  constructor(ctx: StoreContext) {
    this.#ctx = ctx;
    this.#sql = readStatements(ctx.options.schema);
  }

  async get(id: string): Promise<Job | null> {
    if (!UUID.test(id)) return null;
    const [row] = await this.#ctx.db.readByIds<JobRow>(this.#sql.get, id);
    return row === undefined ? null : this.#jobOf(row);
  }

  async getMany(ids: readonly string[]): Promise<Job[]> {
    const valid = ids.filter((id) => UUID.test(id));
    if (valid.length === 0) return [];
    const rows = await this.#ctx.db.readByIds<JobRow>(this.#ctx.shared.getMany, valid);
    return rows.map((row) => this.#jobOf(row));
  }

  /** A job as read, with the progress of its attempt here if that is newer than the stored one. */
  #jobOf(row: JobRow): Job {
    const job = jobFromWire(seenWire(row));
    const running = this.#ctx.running.get(job.id);
    if (running !== undefined && job.status === 'running' && running.wire.attempts === job.attempts) {
      job.progress = running.wire.progress;
    }
    return job;
  }

  async list(filter: ListFilter): Promise<Page> {
    const limit = pageSize(filter.limit);
    if (limit === null) return { jobs: [], nextCursor: null };
    const before = filter.cursor === undefined ? null : decodeCursor(filter.cursor);
    if (before !== null && !UUID.test(before)) throw invalidCursor(filter.cursor as string);
    const where: string[] = [];
    const params: unknown[] = [];
    const statuses = filter.statuses !== undefined && filter.statuses.length > 0 ? [...new Set(filter.statuses)] : null;
    if (statuses !== null) {
      const stored = statusesAsStored(statuses);
      params.push(stored.others);
      const running =
        stored.started && stored.unstarted
          ? ` OR status = 'running'`
          : stored.started
            ? ` OR (status = 'running' AND attempt_started)`
            : stored.unstarted
              ? ` OR (status = 'running' AND NOT attempt_started)`
              : '';
      where.push(`(status = ANY($${params.length}::text[])${running})`);
    }
    if (filter.type !== undefined) {
      params.push(filter.type);
      where.push(`type = $${params.length}`);
    }
    if (filter.group !== undefined) {
      params.push(filter.group);
      where.push(`group_key = $${params.length}`);
    }
    if (filter.schedule !== undefined) {
      params.push(filter.schedule);
      where.push(`schedule = $${params.length}`);
    }
    if (filter.batch !== undefined) {
      // An id that is no uuid names no batch.
      if (!UUID.test(filter.batch)) return { jobs: [], nextCursor: null };
      params.push(filter.batch);
      where.push(this.#sql.inBatch('', `$${params.length}::uuid`));
    }
    if (before !== null) {
      params.push(before);
      where.push(`id < $${params.length}::uuid`);
    }
    params.push(limit + 1);
    const rows = (await this.#ctx.db.query<JobRow>(this.#sql.list(where, params.length), params)).rows;
    return pageOf(rows, limit);
  }

  /** A batch with its jobs counted by status; null: no such batch. */
  async batch(id: string): Promise<Batch | null> {
    if (!UUID.test(id)) return null;
    const [row, counts] = await Promise.all([
      this.#ctx.db.query<BatchRow>(this.#sql.batch, [id]),
      this.#ctx.db.query<BatchCountRow>(this.#sql.batchCounts, [id]),
    ]);
    const found = row.rows[0];
    return found === undefined ? null : batchOf(found, counts.rows);
  }

  async counts(): Promise<QueueCounts> {
    const [counts, oldest, unstarted] = await Promise.all([
      this.#ctx.db.query<{ status: JobStatus; priority: number; n: number }>(this.#sql.counts),
      this.#ctx.db.query<{ at: number | null }>(this.#sql.oldestQueued),
      this.#ctx.db.query<UnstartedCount>(this.#sql.unstarted),
    ]);
    const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>;
    const queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
    for (const row of counts.rows) {
      if (!(row.status in byStatus)) continue;
      byStatus[row.status] += Number(row.n);
      if (row.status === 'queued')
        queuedByPriority[row.priority] = (queuedByPriority[row.priority] ?? 0) + Number(row.n);
    }
    const seen = {
      byStatus,
      queuedByPriority,
      pending: pendingOf(byStatus),
      oldestQueuedReadyAt: oldest.rows[0]?.at ?? null,
    };
    return { ...countsAsSeen(seen, unstarted.rows), exact: true };
  }
}
