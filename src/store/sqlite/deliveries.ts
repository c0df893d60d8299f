import type { DeliveryAttempt } from '../store.js';
import type { DeliveryRow } from '../core/delivery-records.js';
import type { DueDeliveryWire } from './protocol.js';
import type { FileState } from './file-state.js';
import type { Preparer } from './prepare.js';
import { toWire } from '../core/rows.js';
import { getBatch } from './batches.js';

/** Whether deliveries were stored since the last call (the triggers of migration 006 make them). */
export function deliveriesAdded(file: FileState): boolean {
  const seq = file.s.lastDeliverySeq.get() ?? 0;
  if (seq === file.deliverySeq) return false;
  file.deliverySeq = seq;
  return true;
}

export function claimDeliveries(
  file: FileState,
  owner: string,
  expiresAt: number,
  now: number,
  limit: number,
): DueDeliveryWire[] {
  const { s } = file;
  return s.claimDeliveries.all(owner, expiresAt, now, now, limit).map((row) => {
    const first = row.body === null;
    if (row.event === 'batch.finished') {
      return {
        id: row.id,
        jobId: row.job_id,
        event: row.event,
        attempt: row.attempts + 1,
        callbackText: s.selectBatch.get(row.job_id)?.callback ?? null,
        body: row.body,
        job: null,
        batch: first ? getBatch(file, row.job_id) : null,
      };
    }
    const jobRow = first ? s.selectJob.get(row.job_id) : undefined;
    return {
      id: row.id,
      jobId: row.job_id,
      event: row.event,
      attempt: row.attempts + 1,
      callbackText: jobRow === undefined ? (s.selectCallback.get(row.job_id) ?? null) : jobRow.callback,
      body: row.body,
      job: jobRow === undefined ? null : toWire(jobRow),
      batch: null,
    };
  });
}

export function recordDelivery(file: FileState, attempt: DeliveryAttempt, now: number): boolean {
  const status = attempt.outcome === 'retry' ? 'pending' : attempt.outcome;
  const nextAt = attempt.outcome === 'retry' ? now + attempt.retryInMs : null;
  const changed = file.s.recordDelivery.run(
    status,
    attempt.attempt,
    nextAt,
    attempt.body,
    attempt.id,
    attempt.attempt - 1,
    attempt.owner,
  );
  if (changed.changes !== 1) return false;
  file.s.insertDeliveryAttempt.run(
    attempt.id,
    attempt.attempt,
    attempt.outcome === 'delivered' ? 'delivered' : 'failed',
    attempt.httpStatus,
    attempt.error,
    now,
  );
  return true;
}

export function nextDelivery(file: FileState): number | null {
  return file.s.nextDelivery.get() ?? null;
}

export function deliveries(file: FileState, jobId: string): DeliveryRow[] | null {
  if (file.s.selectStatus.get(jobId) === undefined) return null;
  return file.s.deliveriesOf.all(jobId);
}

/** The statements of callback deliveries, prepared once. */
export function prepareDeliveryStatements({ pluck, prepare }: Preparer) {
  return {
    claimDeliveries: prepare<{ id: string; job_id: string; event: string; attempts: number; body: string | null }>(
      `UPDATE callback_deliveries SET lease_owner = ?, lease_expires_at = ?
       WHERE seq IN (SELECT seq FROM callback_deliveries
                     WHERE status = 'pending' AND next_at <= ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)
                     ORDER BY next_at LIMIT ?)
       RETURNING id, job_id, event, attempts, body`,
    ),
    selectCallback: pluck<string | null>('SELECT callback FROM jobs WHERE id = ?'),
    recordDelivery: prepare(
      `UPDATE callback_deliveries SET status = ?, attempts = ?, next_at = ?, body = ?, lease_owner = NULL,
         lease_expires_at = NULL
       WHERE id = ? AND status = 'pending' AND attempts = ? AND lease_owner = ?`,
    ),
    insertDeliveryAttempt: prepare(
      'INSERT INTO callback_attempts (delivery_id, attempt, status, http_status, error, at) VALUES (?, ?, ?, ?, ?, ?)',
    ),
    nextDelivery: pluck<number | null>(
      `SELECT min(max(next_at, coalesce(lease_expires_at, 0))) FROM callback_deliveries WHERE status = 'pending'`,
    ),
    deliveriesOf: prepare<DeliveryRow>(
      `SELECT d.id, d.event, d.status, d.attempts, d.next_at, a.attempt, a.status AS attempt_status, a.http_status,
         a.error, a.at
       FROM callback_deliveries d LEFT JOIN callback_attempts a ON a.delivery_id = d.id
       WHERE d.job_id = ? ORDER BY d.seq, a.attempt`,
    ),
    lastDeliverySeq: pluck<number>(`SELECT seq FROM sqlite_sequence WHERE name = 'callback_deliveries'`),
    freeDeliveries: prepare(
      `UPDATE callback_deliveries SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner IS NOT NULL`,
    ),
  };
}
