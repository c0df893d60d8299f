import type { FileState } from './file-state.js';
import type { FinishAnswer, FinishRow } from './protocol.js';
import type { JobStatus } from '../../contract/job.js';
import { CLEAR_LEASE, COUNT_INTERRUPTION, FENCE, type Preparer } from './prepare.js';
import { failDependents, parentsOf, releaseDependents } from './dependencies.js';
import { type JobRow, type JobWire, toWire } from '../core/rows.js';

/**
 * Attempts' outcomes on the file, each fenced on job, attempt and lease owner (and, for
 * the rescuer's, on the lease still being expired, and counting an interruption): running
 * → completed | failed | retrying, scheduled for a snooze, or back to queued for an attempt
 * that never started.
 * Null where the fence did not hold.
 */
export function finish(file: FileState, rows: FinishRow[], now: number): (FinishAnswer | null)[] {
  return rows.map((row) => finishOne(file, row, now));
}

function finishOne(file: FileState, item: FinishRow, now: number): FinishAnswer | null {
  const { s } = file;
  const { outcome } = item;
  const fence = [item.id, item.attempt, item.owner];
  const started = item.startedAt;
  const expiry = item.expired ? [now] : [];
  let status: JobStatus;
  let retryAt: number | null = null;
  if (outcome.kind === 'unstarted') {
    const statement = item.expired ? s.returnUnstartedExpired : s.returnUnstarted;
    const row = statement.get(...fence, ...expiry);
    if (row === undefined) return null;
    file.counters.track(row.priority, 'running', 'queued');
    // The main thread puts it back in its ready index from this copy.
    const job = toWire(row);
    job.parents = parentsOf(file, job.dependsOn);
    return { status: 'queued', retryAt: null, job, others: [] };
  }
  if (outcome.kind === 'completed') {
    const statement = item.expired ? s.completeExpired : s.complete;
    if (statement.run(started, outcome.resultText, outcome.progressText, now, ...fence, ...expiry).changes === 0)
      return null;
    status = 'completed';
  } else if (outcome.kind === 'failed' && outcome.retryAt === null) {
    const statement = item.expired ? s.failExpired : s.failRunning;
    if (statement.run(started, outcome.errorText, now, ...fence, ...expiry).changes === 0) return null;
    status = 'failed';
  } else if (outcome.kind === 'snoozed') {
    retryAt = outcome.runAt;
    const statement = item.expired ? s.snoozeExpired : s.snoozeRunning;
    if (statement.run(started, retryAt, ...fence, ...expiry).changes === 0) return null;
    status = 'scheduled';
  } else {
    retryAt = outcome.retryAt;
    const refund = outcome.kind === 'released' ? 1 : 0;
    const statement = item.expired ? s.retryExpired : s.retryRunning;
    if (statement.run(started, outcome.errorText, retryAt, refund, ...fence, ...expiry).changes === 0) return null;
    status = 'retrying';
  }
  // Priority only matters to the counters of queued jobs.
  file.counters.track(0, 'running', status);
  let others: JobWire[] = [];
  if (status === 'completed') others = releaseDependents(file, item.id, now);
  else if (status === 'failed') others = failDependents(file, item.id, 'failed', now);
  let job: JobWire | null = null;
  if (item.wantJob) {
    const row = s.selectJob.get(item.id);
    job = row === undefined ? null : toWire(row);
  }
  return { status, retryAt, job, others };
}

/**
 * The statements of a finish, prepared once: each fenced on job, attempt and owner, the
 * `Expired` ones on the lease having run out too.
 */
export function prepareFinishStatements({ prepare }: Preparer) {
  return {
    /** A rescued attempt whose handler never started: the job as it was before the claim. */
    returnUnstarted: prepare<JobRow>(
      `UPDATE jobs SET status = 'queued', attempts = attempts - 1, started_at = prior_started_at, ${CLEAR_LEASE}
       WHERE ${FENCE} AND attempt_started = 0 RETURNING *`,
    ),
    returnUnstartedExpired: prepare<JobRow>(
      `UPDATE jobs SET status = 'queued', attempts = attempts - 1, started_at = prior_started_at, ${COUNT_INTERRUPTION}, ${CLEAR_LEASE}
       WHERE ${FENCE} AND attempt_started = 0 AND lease_expires_at < ? RETURNING *`,
    ),
    complete: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'completed', result = ?, progress = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
    completeExpired: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'completed', result = ?, progress = ?, finished_at = ?, run_at = NULL, ${COUNT_INTERRUPTION}, ${CLEAR_LEASE}
       WHERE ${FENCE} AND lease_expires_at < ?`,
    ),
    failRunning: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'failed', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
    failExpired: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'failed', error = ?, finished_at = ?, run_at = NULL, ${COUNT_INTERRUPTION}, ${CLEAR_LEASE}
       WHERE ${FENCE} AND lease_expires_at < ?`,
    ),
    retryRunning: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'retrying', error = ?, run_at = ?, attempts = MAX(attempts - ?, 0), ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
    /** A snooze: scheduled again, the attempt given back, one more snooze; the error is kept. */
    snoozeRunning: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'scheduled', run_at = ?, attempts = MAX(attempts - 1, 0), snoozes = snoozes + 1, ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
    snoozeExpired: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'scheduled', run_at = ?, attempts = MAX(attempts - 1, 0), snoozes = snoozes + 1, ${COUNT_INTERRUPTION}, ${CLEAR_LEASE}
       WHERE ${FENCE} AND lease_expires_at < ?`,
    ),
    retryExpired: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'retrying', error = ?, run_at = ?, attempts = MAX(attempts - ?, 0), ${COUNT_INTERRUPTION}, ${CLEAR_LEASE}
       WHERE ${FENCE} AND lease_expires_at < ?`,
    ),
  };
}
