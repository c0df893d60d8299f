import type { DeliveryRecord } from '../../contract/delivery.js';
import type { CallbackEvent, Job } from '../../contract/job.js';
import type { Batch, BatchCallbackEvent } from '../../contract/batch.js';

/**
 * Callback deliveries (API.md "Callbacks"). A job with a callback that reaches one of
 * its events gets a `pending` delivery in the same write that makes it terminal,
 * whatever makes it so (finish, cancel, a failed dependency, an insert that fails at
 * once); the delivery goes when the job's record goes. A batch with a callback gets one
 * `batch.finished` delivery in the same write that makes its last job terminal (or in
 * its insert, when none is left to run), never a second. Announced by a `deliveries` event.
 */
export interface DeliveriesFacet {
  /**
   * Lease up to `limit` pending deliveries that are due and not leased by a live owner,
   * oldest due first: no other caller gets them until `leaseMs` has passed or the attempt
   * is recorded. A first attempt comes with the job as it is now (to render the body).
   */
  claimDeliveries(owner: string, leaseMs: number, limit: number): Promise<DueDelivery[]>;

  /**
   * Record an attempt, fenced on delivery, attempt and owner (false: the fence refused it,
   * another owner took the delivery over). `retry` keeps it pending, due in `retryInMs`.
   */
  recordDeliveryAttempt(attempt: DeliveryAttempt): Promise<boolean>;

  /** When the next pending delivery is due (or its lease runs out); null when none is pending. */
  nextDeliveryAt(): Promise<number | null>;

  /** The job's deliveries, attempt by attempt (GET /v1/jobs/{id}/callbacks); null: no such job. */
  deliveries(jobId: string): Promise<DeliveryRecord[] | null>;
}

/** A pending callback delivery leased to its caller. */
export interface DueDelivery {
  /** The Kiln-Delivery id, the same for every attempt. */
  id: string;
  /** The job's id, or for `batch.finished` the batch's. */
  jobId: string;
  event: CallbackEvent | BatchCallbackEvent;
  /** The attempt to make now, 1-based. */
  attempt: number;
  url: string;
  /** The body an earlier attempt sent (retries send the same); null for a first attempt. */
  body: string | null;
  /** For a first attempt of a job's delivery, the job as it is now; else null. */
  job: Job | null;
  /** For a first attempt of a batch's delivery, the batch as it is now; else null. */
  batch: Batch | null;
}

export interface DeliveryAttempt {
  id: string;
  attempt: number;
  owner: string;
  /** The body sent, kept for the retries. */
  body: string;
  httpStatus: number | null;
  error: string | null;
  /** `delivered`: a 2xx came; `retry`: it failed, another attempt follows; `failed`: it failed for good. */
  outcome: 'delivered' | 'retry' | 'failed';
  /** With `retry`: ms until the next attempt. */
  retryInMs: number;
}
