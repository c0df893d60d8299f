import type { JobStatus } from './job.js';

/**
 * A batch: the jobs one `POST /v1/jobs/batch` created, as a handle (API.md "Batches").
 * Items answered by an existing job (an idempotency replay, a dedupe stand-in) keep that
 * job's own batch and are not counted in this one.
 */
export interface Batch {
  id: string;
  /** The jobs the request created. */
  total: number;
  /** Jobs of the batch by status, every status listed (zeros included); removed jobs are no longer counted. */
  counts: Record<JobStatus, number>;
  createdAt: number;
  /** When the last of its jobs became terminal; null while one is not. */
  finishedAt: number | null;
  callback: BatchCallback | null;
  /** Internal: the trace context the batch was submitted in (as Job.trace), else null. */
  trace: string | null;
}

/** The events a batch callback can be told of (API.md "Batches"). */
export const BATCH_CALLBACK_EVENTS = ['batch.finished'] as const;
export type BatchCallbackEvent = (typeof BATCH_CALLBACK_EVENTS)[number];

/** Where to POST the batch once every job of it is terminal, as the client gave it. */
export interface BatchCallback {
  url: string;
  events?: BatchCallbackEvent[];
}

/** A batch as the scheduler hands it to the store with its jobs. */
export interface NewBatch {
  id: string;
  createdAt: number;
  callback: BatchCallback | null;
  /** The trace context of the request (Batch.trace); absent or null: none. */
  trace?: string | null;
}
