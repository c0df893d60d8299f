import type { CreatedState, InsertAnswer, InsertRow } from './protocol.js';
import type { FileState } from './file-state.js';
import type { Preparer } from './prepare.js';
import { canonicalJson } from '../core/canonical-json.js';
import { exceedsCapacity, initialStatus, planInsert } from '../core/insert-plan.js';
import { parentsOf } from './dependencies.js';
import { insertBatch } from './batches.js';
import type { NewBatch } from '../../contract/batch.js';
import { type JobRow, type JobWire, parseJson, toWire } from '../core/rows.js';

/**
 * A batch of new jobs, all or none, as the core plans it (core/insert-plan.ts): each
 * an idempotency replay, a dedupe stand-in, or created as queued, scheduled, waiting
 * or failed. Refused whole on an idempotency conflict, an unknown dependency, or when
 * the pending jobs would pass `capacity`.
 */
export function insertJobs(
  file: FileState,
  rows: InsertRow[],
  now: number,
  capacity: number,
  batch: NewBatch | null = null,
): InsertAnswer {
  const { s } = file;
  const planning = planInsert(rows, {
    byKey: (key) => s.selectByKey.get(key),
    liveByDedupe: (key) => s.selectLiveByDedupe.get(key),
    statusOf: (id) => s.selectStatus.get(id),
    canonicalPayload: (index) => {
      const row = rows[index] as InsertRow;
      return row.canonicalPayload ?? canonicalJson(parseJson(row.payloadText));
    },
  });
  let step = planning.next();
  while (step.done !== true) {
    step = planning.next(s.selectDoneByDedupe.get(step.value.dedupeKey, now - step.value.reuseMs));
  }
  const plan = step.value;
  if (!plan.ok) return plan;

  const outcomes: Extract<InsertAnswer, { ok: true }>['outcomes'] = [];
  const created: { row: InsertRow; state: CreatedState }[] = [];
  for (const planned of plan.outcomes) {
    if ('replay' in planned) {
      const job = toWire(planned.replay);
      outcomes.push(
        planned.dedupe === undefined ? { created: false, job } : { created: false, job, dedupe: planned.dedupe },
      );
    } else if ('alias' in planned) {
      // Answered as the earlier item's job once the batch is known to be stored.
      const job = { id: planned.alias } as JobWire;
      outcomes.push(
        planned.dedupe === undefined ? { created: false, job } : { created: false, job, dedupe: planned.dedupe },
      );
    } else {
      const { index, decided, error, dependsOn } = planned.created;
      const row = rows[index] as InsertRow;
      const status = initialStatus(decided, row.runAt, now);
      const state: CreatedState = {
        status,
        error,
        runAt: status === 'scheduled' || status === 'waiting' ? row.runAt : null,
        readyAt: status === 'queued' ? now : null,
        finishedAt: status === 'failed' ? now : null,
        dependsOn,
        parents: null,
      };
      created.push({ row, state });
      outcomes.push({ created: true, state });
    }
  }

  const pending = file.counters.pending;
  if (exceedsCapacity(pending, plan.newPending, capacity)) {
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
      row.batch,
      row.batch !== null && batch?.callback != null ? 1 : null,
      row.trace,
    );
    for (let position = 0; position < state.dependsOn.length; position++) {
      const parent = state.dependsOn[position] as string;
      s.insertDep.run(row.id, parent, position);
      file.parentIds.add(parent);
    }
    file.counters.track(row.priority, null, state.status);
    // A ready job's dependencies are all completed: it runs with their results.
    if ((state.status === 'queued' || state.status === 'scheduled') && state.dependsOn.length > 0) {
      state.parents = parentsOf(file, state.dependsOn);
    }
  }
  if (batch !== null) {
    insertBatch(
      file,
      batch,
      created.map(({ state }) => state.status),
      now,
    );
  }
  // Items that replayed an earlier item of this batch answer with that item's job.
  for (const outcome of outcomes) {
    if (outcome.created || outcome.job.type !== undefined) continue;
    const row = s.selectJob.get(outcome.job.id);
    if (row !== undefined) outcome.job = toWire(row);
  }
  return { ok: true, outcomes };
}

/** The statements of an insert, prepared once. */
export function prepareInsertStatements({ prepare }: Preparer) {
  return {
    insertJob: prepare(
      `INSERT INTO jobs (id, type, status, priority, payload, result, error, attempts, max_attempts, timeout_ms,
        backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on,
        metadata, run_at, created_at, started_at, finished_at, ready_at, lease_owner, lease_expires_at, dedupe_key,
        group_key, schedule, callback, batch, batch_callback, trace)
       VALUES (?, ?, ?, ?, ?, NULL, ?, 0, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, NULL, ?, ?, NULL, NULL, ?, ?, ?, ?, ?, ?, ?)`,
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
