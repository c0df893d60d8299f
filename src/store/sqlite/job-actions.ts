import type { Answers, ChangesWire } from './protocol.js';
import type { FileState } from './file-state.js';
import type { InvalidState } from '../store.js';
import { CLEAR_LEASE, type Preparer } from './prepare.js';
import { cancelledError, cancelRefusal, dedupeRival, removeRefusal, retryTarget } from '../core/rules.js';
import { failDependents, parentsOf } from './dependencies.js';
import { isTerminal, type JobStatus } from '../../contract/job.js';
import { type JobRow, parseDependsOn, toWire } from '../core/rows.js';

/** What a client does to one job (cancel, retry, remove), and retention's purge of many. */

export function cancel(file: FileState, id: string, now: number): ChangesWire | InvalidState | null {
  const state = file.s.selectState.get(id);
  if (state === undefined) return null;
  const refusal = cancelRefusal(state.status);
  if (refusal !== null) return refusal;
  const row = file.s.cancel.get(JSON.stringify(cancelledError(state.attempts)), now, id, state.status);
  if (row === undefined) return null;
  file.counters.track(row.priority, state.status, 'cancelled');
  return { job: toWire(row), others: failDependents(file, id, 'cancelled', now) };
}

export function retry(file: FileState, id: string, now: number): ChangesWire | InvalidState | null {
  const { s } = file;
  const state = s.selectState.get(id);
  if (state === undefined) return null;
  const dependsOn = parseDependsOn(state.depends_on);
  const target = retryTarget(state.status, dependsOn, (parent) => s.selectStatus.get(parent));
  if (typeof target !== 'string') return target;
  const rival = s.selectDedupeRival.get(id);
  if (rival !== undefined) return dedupeRival(state.status, rival);
  const waiting = target === 'waiting';
  const row = waiting ? s.retry.get('waiting', null, id, state.status) : s.retry.get('queued', now, id, state.status);
  if (row === undefined) return null;
  file.counters.track(row.priority, state.status, row.status);
  const job = toWire(row);
  if (row.status === 'queued') job.parents = parentsOf(file, dependsOn);
  return { job, others: [] };
}

export function remove(file: FileState, id: string): Answers['remove'] {
  const state = file.s.selectState.get(id);
  if (state === undefined) return null;
  const refusal = removeRefusal(state.status);
  if (refusal !== null) return refusal;
  file.s.deleteJob.run(id);
  file.s.deleteDeps.run(id);
  file.counters.track(state.priority, state.status, null);
  return { removed: true, status: state.status };
}

export function purge(file: FileState, status: JobStatus, olderThan: number, limit: number): number {
  if (!isTerminal(status)) return 0;
  const ids = file.s.purgeChunk.all(status, olderThan, limit);
  for (const id of ids) file.s.deleteDeps.run(id);
  file.counters.purged(status, ids.length);
  return ids.length;
}

/** The statements of cancel, retry, remove and purge, prepared once. */
export function prepareJobActionStatements({ pluck, prepare }: Preparer) {
  return {
    /** Another unfinished job with the job's dedupe key (a retry would make two). */
    selectDedupeRival: pluck<string>(
      `SELECT l.id FROM jobs j JOIN jobs l ON l.dedupe_key = j.dedupe_key AND l.id <> j.id
       WHERE j.id = ? AND l.status NOT IN ('completed', 'failed', 'cancelled')`,
    ),
    cancel: prepare<JobRow>(
      `UPDATE jobs SET status = 'cancelled', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
    retry: prepare<JobRow>(
      `UPDATE jobs SET status = ?, ready_at = ?, attempts = 0, snoozes = 0, interruptions = 0, interrupted_by = NULL, finished_at = NULL, result = NULL, progress = NULL,
         run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
    deleteJob: prepare('DELETE FROM jobs WHERE id = ?'),
    deleteDeps: prepare('DELETE FROM job_deps WHERE child = ?'),
    purgeChunk: pluck<string>(
      `DELETE FROM jobs WHERE id IN
         (SELECT id FROM jobs WHERE status = ? AND finished_at < ? LIMIT ?) RETURNING id`,
    ),
  };
}
