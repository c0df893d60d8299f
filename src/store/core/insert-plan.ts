import type { InsertResult } from '../store.js';
import type { Job, JobError, JobStatus, NewJob } from '../../contract/job.js';
import { canonicalJson } from './canonical-json.js';
import { dependencyError } from './rules.js';
import { type JobRow, parseJson } from './rows.js';

/**
 * What an insert makes of each item of a batch, decided the same way on every store:
 *
 *   replay   a stored job answers: same idempotency key (type and payload must match,
 *            else the batch is refused as a conflict), or same dedupe key while that job
 *            is unfinished (`inflight`) or completed within the item's reuse window
 *            (`result`)
 *   alias    an earlier item of the same batch answers (same idempotency or dedupe key)
 *   created  a new job, `ready`, `waiting` for its dependencies, or `failed` at once
 *            because one of them failed or was cancelled
 *
 * Later items may depend on earlier ones, by their own ids or by the ids of the items
 * they replayed. A store reads what the plan asks of it and writes what it answers;
 * the capacity check is the store's, with `exceedsCapacity`, where it counts pending jobs.
 */

/** What planning reads of a new job. */
export type PlanItem = Pick<NewJob, 'id' | 'type' | 'idempotencyKey' | 'dedupeKey' | 'reuseMs'> & {
  dependsOn: readonly string[];
};

/** What planning reads of the store, at once. */
export interface PlanLookups {
  /** The stored job holding an idempotency key. */
  byKey(key: string): JobRow | undefined;
  /** The unfinished stored job holding a dedupe key. */
  liveByDedupe(key: string): JobRow | undefined;
  /** The status of a stored job (a dependency from outside the batch). */
  statusOf(id: string): JobStatus | undefined;
  /** Canonical JSON of the payload of item `index` (asked only of items with an idempotency key). */
  canonicalPayload(index: number): string;
}

/**
 * Asked of the store while planning, as the generator's yield, answered through `next()`:
 * the job of `dedupeKey` completed within the last `reuseMs`, if any. A store that reads
 * synchronously answers at once; one that reads over a connection awaits between.
 */
export interface DoneByDedupe {
  dedupeKey: string;
  reuseMs: number;
}

export type ReadyState = 'ready' | 'waiting' | 'failed';

export interface CreatedPlan {
  index: number;
  decided: ReadyState;
  error: JobError | null;
  /** The item's dependencies, replayed ids replaced by the ids of the jobs that answer. */
  dependsOn: string[];
}

export type PlannedOutcome =
  | { replay: JobRow; dedupe?: 'inflight' | 'result' }
  | { alias: string; dedupe?: 'inflight' }
  | { created: CreatedPlan };

export type InsertRefusal = Extract<InsertResult, { ok: false }>;

export type InsertPlan =
  | { ok: true; outcomes: PlannedOutcome[]; created: CreatedPlan[]; newPending: number }
  | Exclude<InsertRefusal, { reason: 'queue_full' }>;

export function* planInsert(
  items: readonly PlanItem[],
  lookups: PlanLookups,
): Generator<DoneByDedupe, InsertPlan, JobRow | undefined> {
  const outcomes: PlannedOutcome[] = [];
  const created: CreatedPlan[] = [];
  /** An item's id → the id of the job that answers for it. */
  const alias = new Map<string, string>();
  const batchKeys = new Map<string, { type: string; payload: string; id: string }>();
  const batchDedupe = new Map<string, string>();
  const batchState = new Map<string, ReadyState>();
  /** Stored jobs replayed by earlier items, which later items may depend on. */
  const replayed = new Map<string, JobStatus>();
  let newPending = 0;
  for (const [index, item] of items.entries()) {
    const key = item.idempotencyKey;
    if (key !== null) {
      const canonical = lookups.canonicalPayload(index);
      const earlier = batchKeys.get(key);
      if (earlier !== undefined) {
        if (earlier.type !== item.type || earlier.payload !== canonical) {
          return { ok: false, reason: 'idempotency_conflict', index, existingId: earlier.id };
        }
        alias.set(item.id, earlier.id);
        outcomes.push({ alias: earlier.id });
        continue;
      }
      const existing = lookups.byKey(key);
      if (existing !== undefined) {
        if (existing.type !== item.type || canonicalJson(parseJson(existing.payload)) !== canonical) {
          return { ok: false, reason: 'idempotency_conflict', index, existingId: existing.id };
        }
        alias.set(item.id, existing.id);
        replayed.set(existing.id, existing.status);
        outcomes.push({ replay: existing });
        continue;
      }
      batchKeys.set(key, { type: item.type, payload: canonical, id: item.id });
    }
    const dedupeKey = item.dedupeKey ?? null;
    if (dedupeKey !== null) {
      const earlier = batchDedupe.get(dedupeKey);
      if (earlier !== undefined) {
        alias.set(item.id, earlier);
        outcomes.push({ alias: earlier, dedupe: 'inflight' });
        continue;
      }
      const live = lookups.liveByDedupe(dedupeKey);
      const done = live !== undefined || item.reuseMs == null ? undefined : yield { dedupeKey, reuseMs: item.reuseMs };
      const standIn = live ?? done;
      if (standIn !== undefined) {
        alias.set(item.id, standIn.id);
        replayed.set(standIn.id, standIn.status);
        outcomes.push({ replay: standIn, dedupe: live !== undefined ? 'inflight' : 'result' });
        continue;
      }
      batchDedupe.set(dedupeKey, item.id);
    }
    const dependsOn = item.dependsOn.map((id) => alias.get(id) ?? id);
    const state = dependencyState(dependsOn, (parent) => {
      const inBatch = batchState.get(parent);
      if (inBatch !== undefined) return inBatch === 'failed' ? 'failed' : 'queued';
      return lookups.statusOf(parent) ?? replayed.get(parent);
    });
    if ('unknown' in state) return { ok: false, reason: 'unknown_dependency', index, dependency: state.unknown };
    if (state.decided !== 'failed') newPending++;
    batchState.set(item.id, state.decided);
    const plan: CreatedPlan = { index, decided: state.decided, error: state.error, dependsOn };
    created.push(plan);
    outcomes.push({ created: plan });
  }
  return { ok: true, outcomes, created, newPending };
}

/**
 * How a new job starts, given the statuses of its dependencies: failed when one of them
 * failed or was cancelled (the first such names the error), waiting while one is not
 * completed, else ready; or the first dependency that does not exist.
 */
export function dependencyState(
  dependsOn: readonly string[],
  statusOf: (id: string) => JobStatus | undefined,
): { decided: ReadyState; error: JobError | null } | { unknown: string } {
  let failedParent: { id: string; status: JobStatus } | null = null;
  let waiting = false;
  for (const parent of dependsOn) {
    const status = statusOf(parent);
    if (status === undefined) return { unknown: parent };
    if (status === 'failed' || status === 'cancelled') failedParent ??= { id: parent, status };
    else if (status !== 'completed') waiting = true;
  }
  if (failedParent !== null) return { decided: 'failed', error: dependencyError(failedParent.id, failedParent.status) };
  return { decided: waiting ? 'waiting' : 'ready', error: null };
}

/** The status a created job starts in: a ready job whose runAt is still ahead is scheduled. */
export function initialStatus(decided: ReadyState, runAt: number | null, now: number): JobStatus {
  if (decided !== 'ready') return decided;
  return runAt !== null && runAt > now ? 'scheduled' : 'queued';
}

/** Whether `newPending` more pending jobs would take the queue past its capacity. */
export function exceedsCapacity(pending: number, newPending: number, capacity: number): boolean {
  return newPending > 0 && pending + newPending > capacity;
}

/** What a created job holds as the store decided it, besides what the NewJob says. */
export interface DecidedState {
  status: JobStatus;
  error: JobError | null;
  dependsOn: string[];
  runAt: number | null;
  readyAt: number | null;
  finishedAt: number | null;
}

/** The job an insert created, from its NewJob and what the store decided. */
export function createdJob(source: NewJob, state: DecidedState): Job {
  return {
    id: source.id,
    type: source.type,
    status: state.status,
    priority: source.priority,
    payload: source.payload ?? null,
    result: null,
    error: state.error,
    attempts: 0,
    maxAttempts: source.maxAttempts,
    snoozes: 0,
    interruptions: 0,
    timeoutMs: source.timeoutMs,
    backoff: source.backoff,
    progress: null,
    idempotencyKey: source.idempotencyKey,
    dependsOn: state.dependsOn,
    metadata: source.metadata ?? {},
    group: source.group ?? null,
    callback: source.callback ?? null,
    runAt: state.runAt,
    createdAt: source.createdAt,
    startedAt: null,
    finishedAt: state.finishedAt,
    readyAt: state.readyAt,
    schedule: source.schedule ?? null,
    batch: source.batch ?? null,
    trace: source.trace ?? null,
  };
}
