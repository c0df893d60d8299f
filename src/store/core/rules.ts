import type { InvalidState, ScheduleFire } from '../store.js';
import { isTerminal, type JobError, type JobStatus } from '../../contract/job.js';

/** Rules of the job state machine that every store applies the same way. */

export function invalidState(status: JobStatus, message: string): InvalidState {
  return { invalidState: true, status, message };
}

/** The message of a dependent failed because `parentId` ended as `status`. */
export function dependencyMessage(parentId: string, status: JobStatus): string {
  return status === 'cancelled' ? `dependency ${parentId} was cancelled` : `dependency ${parentId} failed`;
}

/** The error of a job that fails at its insert because a dependency failed or was cancelled. */
export function dependencyError(parentId: string, status: JobStatus): JobError {
  return { code: 'dependency_failed', message: dependencyMessage(parentId, status), attempt: 0 };
}

/** Why a job in `status` cannot be cancelled, or null: it can. */
export function cancelRefusal(status: JobStatus): InvalidState | null {
  return isTerminal(status)
    ? invalidState(status, `job is ${status}; only a job that is not finished can be cancelled`)
    : null;
}

/** The error a cancelled job carries; `attempts` is its attempt count when cancelled. */
export function cancelledError(attempts: number): JobError {
  return { code: 'cancelled', message: 'cancelled by request', attempt: attempts };
}

/** Why a job in `status` cannot be removed, or null: it can. */
export function removeRefusal(status: JobStatus): InvalidState | null {
  return isTerminal(status)
    ? null
    : invalidState(status, `job is ${status}; only a finished job (completed, failed or cancelled) can be removed`);
}

/**
 * What a retry of a job in `status` makes of it, given the statuses of its dependencies
 * (undefined: the dependency no longer exists): `queued`, `waiting` while a dependency
 * is not completed yet, or why it cannot be retried.
 */
export function retryTarget(
  status: JobStatus,
  dependsOn: readonly string[],
  statusOf: (id: string) => JobStatus | undefined,
): 'queued' | 'waiting' | InvalidState {
  if (status !== 'failed' && status !== 'cancelled') {
    return invalidState(status, `job is ${status}; only a failed or cancelled job can be retried`);
  }
  let waiting = false;
  for (const parent of dependsOn) {
    const parentStatus = statusOf(parent);
    if (parentStatus === undefined) {
      return invalidState(status, `dependency ${parent} no longer exists, so the job cannot be retried`);
    }
    if (parentStatus === 'failed' || parentStatus === 'cancelled') {
      return invalidState(
        status,
        `dependency ${parent} is ${parentStatus}; retry it first, then this job (it would otherwise wait forever)`,
      );
    }
    if (parentStatus !== 'completed') waiting = true;
  }
  return waiting ? 'waiting' : 'queued';
}

/** A retry refused: another unfinished job holds the job's dedupe key. */
export function dedupeRival(status: JobStatus, rival: string): InvalidState {
  return invalidState(
    status,
    `job ${rival} does the same work (same dedupe key) and is not finished; wait for it or cancel it first`,
  );
}

/**
 * Whether a schedule tick applies to the schedule row as it is now, read under its lock:
 * a trigger always does; a tick only while the row still has the `nextRunAt` and
 * `updatedAt` the caller read (a tick another server fired already, or a schedule
 * changed since, is not fired).
 */
export function tickApplies(
  expected: ScheduleFire['expected'],
  current: { next_run_at: number | null; updated_at: number },
): boolean {
  return expected === null || (current.next_run_at === expected.nextRunAt && current.updated_at === expected.updatedAt);
}

/** Whether a tick is skipped for overlap: asked to, and the schedule's last job is not finished. */
export function tickOverlaps(skipOverlap: boolean, lastJobStatus: JobStatus | undefined): boolean {
  return skipOverlap && lastJobStatus !== undefined && !isTerminal(lastJobStatus);
}
