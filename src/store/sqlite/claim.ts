import { type JobWire, toWire } from '../core/rows.js';
import { parentsOf } from './dependencies.js';
import type { FileState } from './file-state.js';
import { CLEAR_LEASE, FENCE, type Preparer } from './prepare.js';

/**
 * Claims on the file: queued → running under a lease, back to queued when an attempt
 * never started, due jobs promoted to queued.
 */

/** Queued jobs become running under the lease; answers the ids that were not queued. */
export function claim(
  file: FileState,
  ids: string[],
  priorities: number[],
  owner: string,
  expiresAt: number,
  now: number,
): string[] {
  const missed: string[] = [];
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as string;
    if (file.s.claim.run(now, owner, expiresAt, id).changes !== 1) {
      missed.push(id);
      continue;
    }
    file.counters.track(priorities[i] ?? 0, 'queued', 'running');
  }
  return missed;
}

/** Claims jobs and reads them whole (for jobs the main thread holds no copy of); null where not queued. */
export function claimRead(
  file: FileState,
  ids: string[],
  priorities: number[],
  owner: string,
  expiresAt: number,
  now: number,
): (JobWire | null)[] {
  const missed = new Set(claim(file, ids, priorities, owner, expiresAt, now));
  return ids.map((id) => {
    if (missed.has(id)) return null;
    const row = file.s.selectJob.get(id);
    if (row === undefined) return null;
    const wire = toWire(row);
    wire.parents = parentsOf(file, wire.dependsOn);
    return wire;
  });
}

export function promote(file: FileState, items: { id: string; runAt: number }[], now: number): void {
  for (const { id, runAt } of items) {
    const state = file.s.selectState.get(id);
    if (state === undefined) continue;
    if (file.s.promote.run(now, id, runAt).changes === 1) {
      file.counters.track(state.priority, state.status, 'queued');
    }
  }
}

/** Claims whose attempt never started become queued again, their attempt not counted. */
export function unclaim(
  file: FileState,
  rows: { id: string; attempt: number; owner: string; priority: number; startedAt: number | null }[],
): number {
  let released = 0;
  for (const row of rows) {
    if (file.s.unclaim.run(row.startedAt, row.id, row.attempt, row.owner).changes !== 1) continue;
    file.counters.track(row.priority, 'running', 'queued');
    released++;
  }
  return released;
}

/** The statements of claims and promotions, prepared once. */
export function prepareClaimStatements({ prepare }: Preparer) {
  return {
    promote: prepare(
      `UPDATE jobs SET status = 'queued', ready_at = ?, run_at = NULL
       WHERE id = ? AND status IN ('scheduled', 'retrying') AND run_at = ?`,
    ),
    claim: prepare(
      `UPDATE jobs SET status = 'running', attempts = attempts + 1, started_at = ?, prior_started_at = started_at,
         attempt_started = 0, lease_owner = ?, lease_expires_at = ?, progress = NULL, run_at = NULL
       WHERE id = ? AND status = 'queued'`,
    ),
    unclaim: prepare(
      `UPDATE jobs SET status = 'queued', attempts = attempts - 1, started_at = ?, ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
  };
}
