import type { Job } from '../../contract/job.js';

/**
 * Why a store refused an attempt's outcome, read from the job as it is after the refusal.
 * Every finish is fenced on the job's status, attempt and lease owner; a refusal means the
 * attempt was no longer this server's to end, which an operator needs to hear of:
 *
 *   gone        the job was deleted
 *   cancelled   it was cancelled while the attempt ran
 *   rescued     its lease ran out and it was rescued (retrying, queued or failed by the rescuer)
 *   rerun       a later attempt has started since
 *   finished    it already ended (completed or failed) by another write
 *   lease_lost  it runs under the same attempt with another owner's lease
 */
export const REFUSAL_REASONS = ['gone', 'cancelled', 'rescued', 'rerun', 'finished', 'lease_lost'] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

export function refusalReason(attempt: number, job: Pick<Job, 'status' | 'attempts'> | null): RefusalReason {
  if (job === null) return 'gone';
  if (job.status === 'cancelled') return 'cancelled';
  if (job.attempts > attempt) return 'rerun';
  if (job.status === 'running') return 'lease_lost';
  if (job.status === 'completed') return 'finished';
  return 'rescued';
}
