import type { JobStatus } from '../../jobs/model.js';
import { failDependents, parentResults, releaseDependents } from './dependencies.js';
import type { FileState } from './file-state.js';
import type { FinishAnswer, FinishRow, JobWire } from './protocol.js';
import { toWire } from './rows.js';

/**
 * Attempts' outcomes on the file, each fenced on job, attempt and lease owner (and, for
 * the rescuer's, on the lease still being expired): running → completed | failed |
 * retrying, or back to queued for an attempt that never started. Null where the fence
 * did not hold.
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
    job.parents = parentResults(file, job.dependsOn);
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
  } else {
    retryAt = outcome.retryAt as number;
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
