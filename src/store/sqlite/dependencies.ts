import type { FileState } from './file-state.js';
import type { JobError, JobStatus, ParentResult } from '../../contract/job.js';
import { CLEAR_LEASE, type Preparer } from './prepare.js';
import { dependencyMessage } from '../core/rules.js';
import { type JobRow, type JobWire, parentResults, toWire } from '../core/rows.js';

/** Waiting children of `parentId` whose parents are now all completed become ready. */
export function releaseDependents(file: FileState, parentId: string, now: number): JobWire[] {
  const released: JobWire[] = [];
  if (!file.parentIds.has(parentId)) return released;
  const { s } = file;
  for (const child of s.waitingChildren.all(parentId)) {
    if (s.unfinishedParent.get(child.id) !== undefined) continue;
    const scheduled = child.run_at !== null && child.run_at > now;
    const row = scheduled
      ? s.release.get('scheduled', null, child.run_at, child.id)
      : s.release.get('queued', now, null, child.id);
    if (row === undefined) continue;
    file.counters.track(row.priority, 'waiting', row.status);
    const wire = toWire(row);
    wire.parents = parentsOf(file, wire.dependsOn);
    released.push(wire);
  }
  return released;
}

/** Every non-terminal job depending on `rootId`, transitively, fails with dependency_failed. */
export function failDependents(
  file: FileState,
  rootId: string,
  rootStatus: 'failed' | 'cancelled',
  now: number,
): JobWire[] {
  const failed: JobWire[] = [];
  const parents: { id: string; status: 'failed' | 'cancelled' }[] = [{ id: rootId, status: rootStatus }];
  for (let i = 0; i < parents.length; i++) {
    const parent = parents[i] as { id: string; status: 'failed' | 'cancelled' };
    if (!file.parentIds.has(parent.id)) continue;
    for (const child of file.s.liveChildren.all(parent.id)) {
      const error: JobError = {
        code: 'dependency_failed',
        message: dependencyMessage(parent.id, parent.status),
        attempt: child.status === 'running' ? child.attempts : 0,
      };
      const row = file.s.failFrom.get(JSON.stringify(error), now, child.id, child.status);
      if (row === undefined) continue;
      file.counters.track(row.priority, child.status, 'failed');
      failed.push(toWire(row));
      parents.push({ id: row.id, status: 'failed' });
    }
  }
  return failed;
}

/** The results of a ready job's dependencies, in dependsOn order: what it runs with. */
export function parentsOf(file: FileState, dependsOn: string[]): ParentResult[] {
  return parentResults(dependsOn, (id) => file.s.selectParent.get(id));
}

/** The statements that follow dependencies, prepared once. */
export function prepareDependencyStatements({ pluck, prepare }: Preparer) {
  return {
    selectParentIds: pluck<string>('SELECT DISTINCT parent FROM job_deps'),
    selectParent: prepare<{ type: string; result: string | null }>('SELECT type, result FROM jobs WHERE id = ?'),
    release: prepare<JobRow>(
      `UPDATE jobs SET status = ?, ready_at = ?, run_at = ? WHERE id = ? AND status = 'waiting' RETURNING *`,
    ),
    waitingChildren: prepare<{ id: string; run_at: number | null }>(
      `SELECT DISTINCT j.id, j.run_at FROM job_deps d CROSS JOIN jobs j ON j.id = d.child
       WHERE d.parent = ? AND j.status = 'waiting'`,
    ),
    unfinishedParent: prepare(
      `SELECT 1 FROM job_deps d CROSS JOIN jobs p ON p.id = d.parent WHERE d.child = ? AND p.status <> 'completed' LIMIT 1`,
    ),
    liveChildren: prepare<{ id: string; status: JobStatus; attempts: number }>(
      `SELECT DISTINCT j.id, j.status, j.attempts FROM job_deps d CROSS JOIN jobs j ON j.id = d.child
       WHERE d.parent = ? AND j.status NOT IN ('completed', 'failed', 'cancelled')`,
    ),
    failFrom: prepare<JobRow>(
      `UPDATE jobs SET status = 'failed', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
  };
}
