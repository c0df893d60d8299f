import type { DeliveryAttempt, DeliveryRow } from '../store.js';
import type { FileState } from './file-state.js';
import type { DueDeliveryWire } from './protocol.js';
import { toWire } from './rows.js';

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
    const jobRow = first ? s.selectJob.get(row.job_id) : undefined;
    return {
      id: row.id,
      jobId: row.job_id,
      event: row.event,
      attempt: row.attempts + 1,
      callbackText: jobRow === undefined ? (s.selectCallback.get(row.job_id) ?? null) : jobRow.callback,
      body: row.body,
      job: jobRow === undefined ? null : toWire(jobRow),
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
