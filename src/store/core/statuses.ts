import type { JobStatus } from '../../contract/job.js';

/** Statuses that count against the queue's capacity: a job that is to run and does not run yet. */
export const PENDING_STATUSES: readonly JobStatus[] = ['waiting', 'scheduled', 'queued', 'retrying'];

export function isPending(status: JobStatus): boolean {
  return PENDING_STATUSES.includes(status);
}

/** The pending jobs among counts by status. */
export function pendingOf(byStatus: Readonly<Record<JobStatus, number>>): number {
  let pending = 0;
  for (const status of PENDING_STATUSES) pending += byStatus[status];
  return pending;
}
