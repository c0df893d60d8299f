import type { JobStatus } from '../../jobs/model.js';
import { canonicalJson } from '../canonical-json.js';
import { dependencyMessage } from '../core/rules.js';
import { type JobRow, type JobWire, parseJson, toWire } from '../core/rows.js';
import { parentResults } from './dependencies.js';
import type { FileState } from './file-state.js';
import type { CreatedState, InsertAnswer, InsertRow } from './protocol.js';

import { type Preparer } from './prepare.js';

/**
 * A batch of new jobs, all or none: each is an idempotency replay, a dedupe stand-in,
 * or created as queued, scheduled, waiting (a dependency is not completed yet) or
 * failed (a dependency failed or was cancelled). Refused whole on an idempotency
 * conflict, an unknown dependency, or when the pending jobs would pass `capacity`.
 */
export function insertJobs(file: FileState, rows: InsertRow[], now: number, capacity: number): InsertAnswer {
  const { s } = file;
  const outcomes: Extract<InsertAnswer, { ok: true }>['outcomes'] = [];
  const created: { row: InsertRow; state: CreatedState }[] = [];
  /** Status of each job created earlier in this batch. */
  const batchStatus = new Map<string, JobStatus>();
  /** A replayed item's new id → the id of the job it replays, for later items' dependsOn. */
  const alias = new Map<string, string>();
  const batchKeys = new Map<string, { type: string; payload: string; id: string; index: number }>();
  /** Dedupe key → the item of this batch that holds it. */
  const batchDedupe = new Map<string, string>();
  let newPending = 0;

  for (let index = 0; index < rows.length; index++) {
    const item = rows[index] as InsertRow;
    const key = item.idempotencyKey;
    if (key !== null) {
      const canonical = item.canonicalPayload ?? canonicalJson(parseJson(item.payloadText));
      const earlier = batchKeys.get(key);
      if (earlier !== undefined) {
        if (earlier.type !== item.type || earlier.payload !== canonical) {
          return { ok: false, reason: 'idempotency_conflict', index, existingId: earlier.id };
        }
        alias.set(item.id, earlier.id);
        // Answered as the earlier item's job once the batch is known to be stored.
        outcomes.push({ created: false, job: { id: earlier.id } as JobWire });
        continue;
      }
      const existing = s.selectByKey.get(key);
      if (existing !== undefined) {
        if (existing.type !== item.type || canonicalJson(parseJson(existing.payload)) !== canonical) {
          return { ok: false, reason: 'idempotency_conflict', index, existingId: existing.id };
        }
        alias.set(item.id, existing.id);
        outcomes.push({ created: false, job: toWire(existing) });
        continue;
      }
      batchKeys.set(key, { type: item.type, payload: canonical, id: item.id, index });
    }
    if (item.dedupeKey !== null) {
      const standIn = dedupeStandIn(file, item, now, batchDedupe);
      if (standIn !== null) {
        alias.set(item.id, standIn.job.id);
        outcomes.push(standIn);
        continue;
      }
      batchDedupe.set(item.dedupeKey, item.id);
    }

    const dependsOn = item.dependsOn.map((id) => alias.get(id) ?? id);
    let failedParent: { id: string; status: JobStatus } | null = null;
    let waiting = false;
    for (const parent of dependsOn) {
      const status = batchStatus.get(parent) ?? s.selectStatus.get(parent);
      if (status === undefined) return { ok: false, reason: 'unknown_dependency', index, dependency: parent };
      if (status === 'failed' || status === 'cancelled') failedParent ??= { id: parent, status };
      else if (status !== 'completed') waiting = true;
    }

    let status: JobStatus;
    if (failedParent !== null) status = 'failed';
    else if (waiting) status = 'waiting';
    else if (item.runAt !== null && item.runAt > now) status = 'scheduled';
    else status = 'queued';

    const state: CreatedState = {
      status,
      error:
        failedParent === null
          ? null
          : {
              code: 'dependency_failed',
              message: dependencyMessage(failedParent.id, failedParent.status),
              attempt: 0,
            },
      runAt: status === 'scheduled' || status === 'waiting' ? item.runAt : null,
      readyAt: status === 'queued' ? now : null,
      finishedAt: status === 'failed' ? now : null,
      dependsOn,
      parents: null,
    };
    if (status !== 'failed') newPending++;
    batchStatus.set(item.id, status);
    created.push({ row: item, state });
    outcomes.push({ created: true, state });
  }

  const pending = file.counters.pending;
  if (newPending > 0 && pending + newPending > capacity) {
    return { ok: false, reason: 'queue_full', pending, capacity };
  }

  for (const { row, state } of created) {
    s.insertJob.run(
      row.id,
      row.type,
      state.status,
      row.priority,
      row.payloadText,
      state.error === null ? null : JSON.stringify(state.error),
      row.maxAttempts,
      row.timeoutMs,
      row.backoff.initialMs,
      row.backoff.factor,
      row.backoff.maxMs,
      row.backoff.jitter,
      row.idempotencyKey,
      JSON.stringify(state.dependsOn),
      row.metadataText,
      state.runAt,
      row.createdAt,
      state.finishedAt,
      state.readyAt,
      row.dedupeKey,
      row.group,
      row.schedule,
      row.callbackText,
    );
    for (let position = 0; position < state.dependsOn.length; position++) {
      const parent = state.dependsOn[position] as string;
      s.insertDep.run(row.id, parent, position);
      file.parentIds.add(parent);
    }
    file.counters.track(row.priority, null, state.status);
    // A ready job's dependencies are all completed: it runs with their results.
    if ((state.status === 'queued' || state.status === 'scheduled') && state.dependsOn.length > 0) {
      state.parents = parentResults(file, state.dependsOn);
    }
  }
  // Items that replayed an earlier item of this batch answer with that item's job.
  for (const outcome of outcomes) {
    if (outcome.created || outcome.job.type !== undefined) continue;
    const row = s.selectJob.get(outcome.job.id);
    if (row !== undefined) outcome.job = toWire(row);
  }
  return { ok: true, outcomes };
}

/** The job that stands in for a dedupe item: an earlier item of the batch, an unfinished job, a reusable result. */
function dedupeStandIn(
  file: FileState,
  item: InsertRow,
  now: number,
  batch: ReadonlyMap<string, string>,
): { created: false; job: JobWire; dedupe: 'inflight' | 'result' } | null {
  const key = item.dedupeKey as string;
  const earlier = batch.get(key);
  // Answered as the earlier item's job once the batch is known to be stored.
  if (earlier !== undefined) return { created: false, job: { id: earlier } as JobWire, dedupe: 'inflight' };
  const live = file.s.selectLiveByDedupe.get(key);
  if (live !== undefined) return { created: false, job: toWire(live), dedupe: 'inflight' };
  if (item.reuseMs === null) return null;
  const done = file.s.selectDoneByDedupe.get(key, now - item.reuseMs);
  return done === undefined ? null : { created: false, job: toWire(done), dedupe: 'result' };
}

/** The statements of an insert, prepared once. */
export function prepareInsertStatements({ prepare }: Preparer) {
  return {
    insertJob: prepare(
      `INSERT INTO jobs (id, type, status, priority, payload, result, error, attempts, max_attempts, timeout_ms,
        backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on,
        metadata, run_at, created_at, started_at, finished_at, ready_at, lease_owner, lease_expires_at, dedupe_key,
        group_key, schedule, callback)
       VALUES (?, ?, ?, ?, ?, NULL, ?, 0, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, NULL, ?, ?, NULL, NULL, ?, ?, ?, ?)`,
    ),
    insertDep: prepare('INSERT INTO job_deps (child, parent, position) VALUES (?, ?, ?)'),
    selectByKey: prepare<JobRow>('SELECT * FROM jobs WHERE idempotency_key = ?'),
    selectLiveByDedupe: prepare<JobRow>(
      `SELECT * FROM jobs WHERE dedupe_key = ? AND status NOT IN ('completed', 'failed', 'cancelled')`,
    ),
    selectDoneByDedupe: prepare<JobRow>(
      `SELECT * FROM jobs WHERE dedupe_key = ? AND status = 'completed' AND finished_at >= ?
       ORDER BY finished_at DESC LIMIT 1`,
    ),
  };
}
