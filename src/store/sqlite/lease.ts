import { type ExpiredRow, toExpiredAttempt } from '../core/rows.js';
import type { ExpiredAttempt, StartedAttempt } from '../store.js';
import type { FileState } from './file-state.js';
import { FENCE, type Preparer } from './prepare.js';

/**
 * Leases of running attempts on the file: extended by heartbeats, an attempt's start
 * recorded (a rescued attempt that never started goes back uncounted), the leases that
 * ran out listed for the rescuer, and every lease expired when the file is opened.
 */

export function heartbeat(file: FileState, owner: string, ids: string[], expiresAt: number): string[] {
  const lost: string[] = [];
  for (const id of ids) {
    if (file.s.heartbeat.run(expiresAt, id, owner).changes === 0) lost.push(id);
  }
  return lost;
}

export function started(file: FileState, rows: StartedAttempt[]): void {
  for (const row of rows) file.s.started.run(row.startedAt, row.id, row.attempt, row.owner);
}

export function expired(file: FileState, now: number, limit: number): ExpiredAttempt[] {
  return file.s.selectExpired.all(now, limit).map(toExpiredAttempt);
}

/** The statements of leases, prepared once. */
export function prepareLeaseStatements({ prepare }: Preparer) {
  return {
    heartbeat: prepare(`UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND status = 'running' AND lease_owner = ?`),
    started: prepare(`UPDATE jobs SET started_at = ?, attempt_started = 1 WHERE ${FENCE}`),
    expireAll: prepare(`UPDATE jobs SET lease_expires_at = 0 WHERE status = 'running'`),
    selectExpired: prepare<ExpiredRow>(
      `SELECT id, type, lease_owner, attempts, attempt_started, max_attempts, backoff_initial_ms, backoff_factor,
         backoff_max_ms, backoff_jitter, interruptions, interrupted_by
       FROM jobs WHERE status = 'running' AND lease_expires_at < ? LIMIT ?`,
    ),
  };
}
