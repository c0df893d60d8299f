import type { Batch, NewBatch } from '../../contract/batch.js';
import type { JobStatus } from '../../contract/job.js';
import { type BatchCountRow, type BatchRow, batchOf, newBatchRow } from '../core/batches.js';
import type { FileState } from './file-state.js';
import type { Preparer } from './prepare.js';

/** The batch row of an insert, in its transaction, counting the jobs it created. */
export function insertBatch(file: FileState, batch: NewBatch, statuses: readonly JobStatus[], now: number): void {
  const row = newBatchRow(batch, statuses, now);
  file.s.insertBatch.run(row.id, row.total, row.remaining, row.created_at, row.finished_at, row.callback, row.trace);
}

/** A batch with its jobs counted by status (the `jobs_batch` index); null: no such batch. */
export function getBatch(file: FileState, id: string): Batch | null {
  const row = file.s.selectBatch.get(id);
  return row === undefined ? null : batchOf(row, file.s.countBatch.all(id, id));
}

/** The statements of batches, prepared once. */
export function prepareBatchStatements({ prepare }: Preparer) {
  return {
    insertBatch: prepare(
      'INSERT INTO batches (id, total, remaining, created_at, finished_at, callback, trace) VALUES (?, ?, ?, ?, ?, ?, ?)',
    ),
    selectBatch: prepare<BatchRow>(
      'SELECT id, total, remaining, created_at, finished_at, callback, trace FROM batches WHERE id = ?',
    ),
    countBatch: prepare<BatchCountRow>(
      // A claimed job not started counts as queued (core/batches.ts, batchOf).
      `SELECT status, COUNT(*) AS n, MAX(finished_at) AS last FROM jobs WHERE batch = ? GROUP BY status
       UNION ALL SELECT 'unstarted', COUNT(*), NULL FROM jobs WHERE batch = ? AND status = 'running' AND attempt_started = 0`,
    ),
  };
}
