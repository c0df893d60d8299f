import type { Answers } from './protocol.js';
import { JOB_STATUSES, type JobStatus, PRIORITY_LEVELS } from '../../contract/job.js';
import { isPending } from '../core/statuses.js';

/**
 * The job counts per status, queued per priority, and pending, kept exact on every
 * transition (admission reads them for every insert) and rebuilt from the file whenever
 * a transaction is rolled back.
 */
export class StatusCounters {
  #byStatus = emptyByStatus();
  #queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
  #pending = 0;

  get pending(): number {
    return this.#pending;
  }

  /** Counts from the file: one row per status and priority. */
  rebuild(rows: readonly { status: JobStatus; priority: number; n: number }[]): void {
    this.#byStatus = emptyByStatus();
    this.#queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
    this.#pending = 0;
    for (const row of rows) {
      if (!(row.status in this.#byStatus)) continue;
      this.#byStatus[row.status] += row.n;
      if (isPending(row.status)) this.#pending += row.n;
      if (row.status === 'queued') {
        this.#queuedByPriority[row.priority] = (this.#queuedByPriority[row.priority] ?? 0) + row.n;
      }
    }
  }

  /** A job of `priority` moved from one status to another (null: it was created or removed). */
  track(priority: number, from: JobStatus | null, to: JobStatus | null): void {
    if (from !== null) {
      this.#byStatus[from]--;
      if (isPending(from)) this.#pending--;
      if (from === 'queued') this.#queuedByPriority[priority] = (this.#queuedByPriority[priority] ?? 0) - 1;
    }
    if (to !== null) {
      this.#byStatus[to]++;
      if (isPending(to)) this.#pending++;
      if (to === 'queued') this.#queuedByPriority[priority] = (this.#queuedByPriority[priority] ?? 0) + 1;
    }
  }

  /** Finished jobs of `status` purged. */
  purged(status: JobStatus, n: number): void {
    this.#byStatus[status] -= n;
  }

  counts(): Answers['counts']['counts'] {
    return {
      byStatus: { ...this.#byStatus },
      queuedByPriority: [...this.#queuedByPriority],
      pending: this.#pending,
    };
  }
}

function emptyByStatus(): Record<JobStatus, number> {
  const counts = {} as Record<JobStatus, number>;
  for (const status of JOB_STATUSES) counts[status] = 0;
  return counts;
}
