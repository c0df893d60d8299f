import type { Batch, BatchCallback, NewBatch } from '../../contract/batch.js';
import { isTerminal, JOB_STATUSES, type JobStatus } from '../../contract/job.js';

/** A row of `batches`, as both stores read it. */
export interface BatchRow {
  id: string;
  total: number;
  remaining: number;
  created_at: number;
  finished_at: number | null;
  /** The callback as JSON text, or null. */
  callback: string | null;
  /** The trace context the batch was submitted in (Batch.trace). */
  trace: string | null;
}

/** The jobs of a batch counted by status, one row per status present, with their latest finish. */
export interface BatchCountRow {
  /** `unstarted`: of the running jobs, those claimed whose handler has not started (shown queued). */
  status: JobStatus | 'unstarted';
  n: number | string;
  last: number | string | null;
}

/**
 * The batch as the API shows it: every status counted, zeros included. It is finished
 * once none of its jobs is left to run, at the latest finish among its jobs and the row's
 * `finished_at` (which a store keeps for a batch with a callback, and which holds the
 * latest finish of its jobs since deleted), so both stores answer alike whichever of the
 * two they keep.
 */
export function batchOf(row: BatchRow, counts: readonly BatchCountRow[]): Batch {
  const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>;
  let open = false;
  let finishedAt = row.finished_at === null ? null : Number(row.finished_at);
  for (const count of counts) {
    if (count.status === 'unstarted') {
      byStatus.running -= Number(count.n);
      byStatus.queued += Number(count.n);
      continue;
    }
    if (!(count.status in byStatus)) continue;
    byStatus[count.status] += Number(count.n);
    if (!isTerminal(count.status)) open = true;
    else if (count.last !== null) finishedAt = Math.max(finishedAt ?? 0, Number(count.last));
  }
  return {
    id: row.id,
    total: Number(row.total),
    counts: byStatus,
    createdAt: Number(row.created_at),
    finishedAt: open ? null : finishedAt,
    callback: row.callback === null ? null : (JSON.parse(row.callback) as BatchCallback),
    trace: row.trace,
  };
}

/**
 * The row an insert writes for its batch, from the statuses of the jobs the request
 * created (replays and dedupe stand-ins keep their own batch): `remaining` counts those
 * not terminal at once; a batch with none remaining is finished when it is made.
 */
export function newBatchRow(batch: NewBatch, statuses: readonly JobStatus[], now: number): BatchRow {
  const remaining = statuses.filter((status) => !isTerminal(status)).length;
  return {
    id: batch.id,
    total: statuses.length,
    remaining,
    created_at: batch.createdAt,
    finished_at: remaining === 0 ? now : null,
    callback: batch.callback === null ? null : JSON.stringify(batch.callback),
    trace: batch.trace ?? null,
  };
}

/** The body of a batch's callback: the event and the batch as the API renders it. */
export function batchCallbackBody(batch: unknown): string {
  return JSON.stringify({ event: 'batch.finished', batch });
}
