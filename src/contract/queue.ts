import type { JobStatus } from './job.js';

/** What the queue holds, by status and priority (GET /v1/queue, the metrics, admission). */
export interface QueueCounts {
  byStatus: Record<JobStatus, number>;
  /** Queued jobs per priority, index = priority. */
  queuedByPriority: number[];
  /** waiting + scheduled + queued + retrying. */
  pending: number;
  /** When the oldest queued job became ready; null when none is queued. */
  oldestQueuedReadyAt: number | null;
  /**
   * Whether the figures are exact at the moment they were read. A store that cannot
   * keep exact counts cheaply answers an estimate that is never below the truth for
   * `pending` (admission stays safe) and says so here.
   */
  exact: boolean;
}
