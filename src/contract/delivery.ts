import type { CallbackEvent } from './job.js';

/** One attempt of a delivery as GET /v1/jobs/{id}/callbacks lists it (pending: the next, not made yet). */
export interface DeliveryRecord {
  id: string;
  event: CallbackEvent;
  attempt: number;
  status: 'pending' | 'delivered' | 'failed';
  httpStatus: number | null;
  error: string | null;
  /** When the attempt was made, or, pending, when it is due. */
  at: number;
}
