import type { CallbackEvent } from '../../contract/job.js';
import type { DeliveryRecord } from '../../contract/delivery.js';

/** A delivery with its attempts as both stores read them, joined: one row per attempt (or one without). */
export interface DeliveryRow {
  id: string;
  event: CallbackEvent;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  next_at: number | null;
  attempt: number | null;
  attempt_status: 'delivered' | 'failed' | null;
  http_status: number | null;
  error: string | null;
  at: number | null;
}

/** Rows ordered by delivery, then attempt → records, each pending delivery ending with its next attempt. */
export function deliveryRecords(rows: DeliveryRow[]): DeliveryRecord[] {
  const records: DeliveryRecord[] = [];
  for (const [index, row] of rows.entries()) {
    if (row.attempt !== null) {
      records.push({
        id: row.id,
        event: row.event,
        attempt: row.attempt,
        status: row.attempt_status ?? 'failed',
        httpStatus: row.http_status,
        error: row.error,
        at: row.at ?? 0,
      });
    }
    const last = rows[index + 1]?.id !== row.id;
    if (last && row.status === 'pending') {
      records.push({
        id: row.id,
        event: row.event,
        attempt: row.attempts + 1,
        status: 'pending',
        httpStatus: null,
        error: null,
        at: row.next_at ?? 0,
      });
    }
  }
  return records;
}
