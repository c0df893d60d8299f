/**
 * The job state machine on the SQLite file; runs in the store thread.
 *
 *   insert  → queued | scheduled | waiting | failed (a dependency failed or was cancelled)
 *   waiting → queued | scheduled        when the last dependency completes
 *   scheduled, retrying → queued        promote, when runAt is reached
 *   queued  → running                   claim, under a lease
 *   running → completed | failed | retrying   finish (fenced on job, attempt and owner)
 *   non-terminal → cancelled            cancel; non-terminal → failed when a dependency fails
 *   failed, cancelled → queued | waiting   retry
 *
 * Every transition is a compare-and-set on the status (and, for a running job, the
 * attempt and lease owner), so an outcome from an attempt that lost its job changes
 * nothing. The counters are kept exact on every transition (admission reads them for
 * every insert) and rebuilt from the file whenever a transaction is rolled back.
 */
import { isTerminal, JOB_STATUSES, type JobError, type JobStatus, PRIORITY_LEVELS } from '../../contract/job.js';
import { canonicalJson } from '../canonical-json.js';
import { dedupeRival, dependencyMessage, invalidState, retryTarget, tickApplies, tickOverlaps } from '../rules.js';
import type {
  DeliveryAttempt,
  ExpiredAttempt,
  InvalidState,
  ListFilter,
  Page,
  Schedule,
  ScheduleDefinition,
  ScheduleFire,
  StartedAttempt,
} from '../store.js';
import type { DeliveryRow } from '../delivery-records.js';
import type {
  Answers,
  ChangesWire,
  CreatedState,
  DueDeliveryWire,
  FinishAnswer,
  FinishRow,
  InsertAnswer,
  InsertRow,
  JobWire,
  Snapshot,
} from './protocol.js';
import {
  decodeCursor,
  encodeCursor,
  parseDependsOn,
  parseJson,
  type SummaryRow,
  toExpiredAttempt,
  toSchedule,
  toSummary,
  toWire,
} from './rows.js';
import type { ListColumn, Statements } from './statements.js';

export class SqliteTransitions {
  readonly #s: Statements;
  /** Ids that some job depends on: a finish of any other job skips the dependents query. */
  readonly #parentIds = new Set<string>();
  #byStatus = emptyByStatus();
  #queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
  #pending = 0;
  /** The highest callback delivery seq seen: a higher one means new deliveries. */
  #deliverySeq = 0;

  constructor(statements: Statements) {
    this.#s = statements;
    this.rebuild();
    this.#deliverySeq = this.#s.lastDeliverySeq.get() ?? 0;
  }

  /** Whether deliveries were stored since the last call (the triggers of migration 006 make them). */
  deliveriesAdded(): boolean {
    const seq = this.#s.lastDeliverySeq.get() ?? 0;
    if (seq === this.#deliverySeq) return false;
    this.#deliverySeq = seq;
    return true;
  }

  claimDeliveries(owner: string, expiresAt: number, now: number, limit: number): DueDeliveryWire[] {
    return this.#s.claimDeliveries.all(owner, expiresAt, now, now, limit).map((row) => {
      const first = row.body === null;
      const jobRow = first ? this.#s.selectJob.get(row.job_id) : undefined;
      return {
        id: row.id,
        jobId: row.job_id,
        event: row.event,
        attempt: row.attempts + 1,
        callbackText: jobRow === undefined ? (this.#s.selectCallback.get(row.job_id) ?? null) : jobRow.callback,
        body: row.body,
        job: jobRow === undefined ? null : toWire(jobRow),
      };
    });
  }

  recordDelivery(attempt: DeliveryAttempt, now: number): boolean {
    const status = attempt.outcome === 'retry' ? 'pending' : attempt.outcome;
    const nextAt = attempt.outcome === 'retry' ? now + attempt.retryInMs : null;
    const changed = this.#s.recordDelivery.run(
      status,
      attempt.attempt,
      nextAt,
      attempt.body,
      attempt.id,
      attempt.attempt - 1,
      attempt.owner,
    );
    if (changed.changes !== 1) return false;
    this.#s.insertDeliveryAttempt.run(
      attempt.id,
      attempt.attempt,
      attempt.outcome === 'delivered' ? 'delivered' : 'failed',
      attempt.httpStatus,
      attempt.error,
      now,
    );
    return true;
  }

  nextDelivery(): number | null {
    return this.#s.nextDelivery.get() ?? null;
  }

  deliveries(jobId: string): DeliveryRow[] | null {
    if (this.#s.selectStatus.get(jobId) === undefined) return null;
    return this.#s.deliveriesOf.all(jobId);
  }

  /** Counters and parent ids from the file, as after a rollback. */
  rebuild(): void {
    this.#byStatus = emptyByStatus();
    this.#queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
    this.#pending = 0;
    this.#parentIds.clear();
    for (const parent of this.#s.selectParentIds.all()) this.#parentIds.add(parent);
    for (const row of this.#s.countByStatus.all()) {
      if (!(row.status in this.#byStatus)) continue;
      this.#byStatus[row.status] += row.n;
      if (isPending(row.status)) this.#pending += row.n;
      if (row.status === 'queued') {
        this.#queuedByPriority[row.priority] = (this.#queuedByPriority[row.priority] ?? 0) + row.n;
      }
    }
  }

  snapshot(): Snapshot {
    return {
      queued: this.#s.selectQueued.all().map((row) => ({
        id: row.id,
        type: row.type,
        priority: row.priority,
        group: row.group_key,
        readyAt: row.ready_at ?? 0,
      })),
      due: this.#s.selectDelayed.all().map((row) => ({
        id: row.id,
        type: row.type,
        priority: row.priority,
        group: row.group_key,
        runAt: row.run_at ?? 0,
      })),
    };
  }

  counts(): Answers['counts'] {
    return {
      byStatus: { ...this.#byStatus },
      queuedByPriority: [...this.#queuedByPriority],
      pending: this.#pending,
    };
  }

  insert(rows: InsertRow[], now: number, capacity: number): InsertAnswer {
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
        const existing = this.#s.selectByKey.get(key);
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
        const standIn = this.#dedupe(item, now, batchDedupe);
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
        const status = batchStatus.get(parent) ?? this.#s.selectStatus.get(parent);
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

    if (newPending > 0 && this.#pending + newPending > capacity) {
      return { ok: false, reason: 'queue_full', pending: this.#pending, capacity };
    }

    for (const { row, state } of created) {
      this.#s.insertJob.run(
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
        this.#s.insertDep.run(row.id, parent, position);
        this.#parentIds.add(parent);
      }
      this.#track(row.priority, null, state.status);
      // A ready job's dependencies are all completed: it runs with their results.
      if ((state.status === 'queued' || state.status === 'scheduled') && state.dependsOn.length > 0) {
        state.parents = this.#parents(state.dependsOn);
      }
    }
    // Items that replayed an earlier item of this batch answer with that item's job.
    for (const outcome of outcomes) {
      if (outcome.created || outcome.job.type !== undefined) continue;
      const row = this.#s.selectJob.get(outcome.job.id);
      if (row !== undefined) outcome.job = toWire(row);
    }
    return { ok: true, outcomes };
  }

  /** The job that stands in for a dedupe item: an earlier item of the batch, an unfinished job, a reusable result. */
  #dedupe(
    item: InsertRow,
    now: number,
    batch: ReadonlyMap<string, string>,
  ): { created: false; job: JobWire; dedupe: 'inflight' | 'result' } | null {
    const key = item.dedupeKey as string;
    const earlier = batch.get(key);
    // Answered as the earlier item's job once the batch is known to be stored.
    if (earlier !== undefined) return { created: false, job: { id: earlier } as JobWire, dedupe: 'inflight' };
    const live = this.#s.selectLiveByDedupe.get(key);
    if (live !== undefined) return { created: false, job: toWire(live), dedupe: 'inflight' };
    if (item.reuseMs === null) return null;
    const done = this.#s.selectDoneByDedupe.get(key, now - item.reuseMs);
    return done === undefined ? null : { created: false, job: toWire(done), dedupe: 'result' };
  }

  /** Queued jobs become running under the lease; answers the ids that were not queued. */
  claim(ids: string[], priorities: number[], owner: string, expiresAt: number, now: number): string[] {
    const missed: string[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i] as string;
      if (this.#s.claim.run(now, owner, expiresAt, id).changes !== 1) {
        missed.push(id);
        continue;
      }
      this.#track(priorities[i] ?? 0, 'queued', 'running');
    }
    return missed;
  }

  /** Claims jobs and reads them whole (for jobs the main thread holds no copy of); null where not queued. */
  claimRead(ids: string[], priorities: number[], owner: string, expiresAt: number, now: number): (JobWire | null)[] {
    const missed = new Set(this.claim(ids, priorities, owner, expiresAt, now));
    return ids.map((id) => {
      if (missed.has(id)) return null;
      const row = this.#s.selectJob.get(id);
      if (row === undefined) return null;
      const wire = toWire(row);
      wire.parents = this.#parents(wire.dependsOn);
      return wire;
    });
  }

  promote(items: { id: string; runAt: number }[], now: number): void {
    for (const { id, runAt } of items) {
      const state = this.#s.selectState.get(id);
      if (state === undefined) continue;
      if (this.#s.promote.run(now, id, runAt).changes === 1) {
        this.#track(state.priority, state.status, 'queued');
      }
    }
  }

  /** Claims whose attempt never started become queued again, their attempt not counted. */
  unclaim(rows: { id: string; attempt: number; owner: string; priority: number; startedAt: number | null }[]): number {
    let released = 0;
    for (const row of rows) {
      if (this.#s.unclaim.run(row.startedAt, row.id, row.attempt, row.owner).changes !== 1) continue;
      this.#track(row.priority, 'running', 'queued');
      released++;
    }
    return released;
  }

  heartbeat(owner: string, ids: string[], expiresAt: number): string[] {
    const lost: string[] = [];
    for (const id of ids) {
      if (this.#s.heartbeat.run(expiresAt, id, owner).changes === 0) lost.push(id);
    }
    return lost;
  }

  started(rows: StartedAttempt[]): void {
    for (const row of rows) this.#s.started.run(row.startedAt, row.id, row.attempt, row.owner);
  }

  finish(rows: FinishRow[], now: number): (FinishAnswer | null)[] {
    return rows.map((row) => this.#finishOne(row, now));
  }

  #finishOne(item: FinishRow, now: number): FinishAnswer | null {
    const { outcome } = item;
    const fence = [item.id, item.attempt, item.owner];
    const started = item.startedAt;
    const expiry = item.expired ? [now] : [];
    let status: JobStatus;
    let retryAt: number | null = null;
    if (outcome.kind === 'unstarted') {
      const statement = item.expired ? this.#s.returnUnstartedExpired : this.#s.returnUnstarted;
      const row = statement.get(...fence, ...expiry);
      if (row === undefined) return null;
      this.#track(row.priority, 'running', 'queued');
      // The main thread puts it back in its ready index from this copy.
      const job = toWire(row);
      job.parents = this.#parents(job.dependsOn);
      return { status: 'queued', retryAt: null, job, others: [] };
    }
    if (outcome.kind === 'completed') {
      const statement = item.expired ? this.#s.completeExpired : this.#s.complete;
      if (statement.run(started, outcome.resultText, outcome.progressText, now, ...fence, ...expiry).changes === 0)
        return null;
      status = 'completed';
    } else if (outcome.kind === 'failed' && outcome.retryAt === null) {
      const statement = item.expired ? this.#s.failExpired : this.#s.failRunning;
      if (statement.run(started, outcome.errorText, now, ...fence, ...expiry).changes === 0) return null;
      status = 'failed';
    } else {
      retryAt = outcome.retryAt as number;
      const refund = outcome.kind === 'released' ? 1 : 0;
      const statement = item.expired ? this.#s.retryExpired : this.#s.retryRunning;
      if (statement.run(started, outcome.errorText, retryAt, refund, ...fence, ...expiry).changes === 0) return null;
      status = 'retrying';
    }
    // Priority only matters to the counters of queued jobs.
    this.#track(0, 'running', status);
    let others: JobWire[] = [];
    if (status === 'completed') others = this.#releaseDependents(item.id, now);
    else if (status === 'failed') others = this.#failDependents(item.id, 'failed', now);
    let job: JobWire | null = null;
    if (item.wantJob) {
      const row = this.#s.selectJob.get(item.id);
      job = row === undefined ? null : toWire(row);
    }
    return { status, retryAt, job, others };
  }

  /** Waiting children of `parentId` whose parents are now all completed become ready. */
  #releaseDependents(parentId: string, now: number): JobWire[] {
    const released: JobWire[] = [];
    if (!this.#parentIds.has(parentId)) return released;
    for (const child of this.#s.waitingChildren.all(parentId)) {
      if (this.#s.unfinishedParent.get(child.id) !== undefined) continue;
      const scheduled = child.run_at !== null && child.run_at > now;
      const row = scheduled
        ? this.#s.release.get('scheduled', null, child.run_at, child.id)
        : this.#s.release.get('queued', now, null, child.id);
      if (row === undefined) continue;
      this.#track(row.priority, 'waiting', row.status);
      const wire = toWire(row);
      wire.parents = this.#parents(wire.dependsOn);
      released.push(wire);
    }
    return released;
  }

  /** Every non-terminal job depending on `rootId`, transitively, fails with dependency_failed. */
  #failDependents(rootId: string, rootStatus: 'failed' | 'cancelled', now: number): JobWire[] {
    const failed: JobWire[] = [];
    const parents: { id: string; status: 'failed' | 'cancelled' }[] = [{ id: rootId, status: rootStatus }];
    for (let i = 0; i < parents.length; i++) {
      const parent = parents[i] as { id: string; status: 'failed' | 'cancelled' };
      if (!this.#parentIds.has(parent.id)) continue;
      for (const child of this.#s.liveChildren.all(parent.id)) {
        const error: JobError = {
          code: 'dependency_failed',
          message: dependencyMessage(parent.id, parent.status),
          attempt: child.status === 'running' ? child.attempts : 0,
        };
        const row = this.#s.failFrom.get(JSON.stringify(error), now, child.id, child.status);
        if (row === undefined) continue;
        this.#track(row.priority, child.status, 'failed');
        failed.push(toWire(row));
        parents.push({ id: row.id, status: 'failed' });
      }
    }
    return failed;
  }

  #parents(dependsOn: string[]) {
    return dependsOn.map((id) => {
      const row = this.#s.selectParent.get(id);
      // A parent removed since it completed: its result is gone.
      return row === undefined ? { id, type: '', result: null } : { id, type: row.type, result: parseJson(row.result) };
    });
  }

  cancel(id: string, now: number): ChangesWire | InvalidState | null {
    const state = this.#s.selectState.get(id);
    if (state === undefined) return null;
    if (isTerminal(state.status)) {
      return invalidState(state.status, `job is ${state.status}; only a job that is not finished can be cancelled`);
    }
    const error: JobError = { code: 'cancelled', message: 'cancelled by request', attempt: state.attempts };
    const row = this.#s.cancel.get(JSON.stringify(error), now, id, state.status);
    if (row === undefined) return null;
    this.#track(row.priority, state.status, 'cancelled');
    return { job: toWire(row), others: this.#failDependents(id, 'cancelled', now) };
  }

  retry(id: string, now: number): ChangesWire | InvalidState | null {
    const state = this.#s.selectState.get(id);
    if (state === undefined) return null;
    const dependsOn = parseDependsOn(state.depends_on);
    const target = retryTarget(state.status, dependsOn, (parent) => this.#s.selectStatus.get(parent));
    if (typeof target !== 'string') return target;
    const rival = this.#s.selectDedupeRival.get(id);
    if (rival !== undefined) return dedupeRival(state.status, rival);
    const waiting = target === 'waiting';
    const row = waiting
      ? this.#s.retry.get('waiting', null, id, state.status)
      : this.#s.retry.get('queued', now, id, state.status);
    if (row === undefined) return null;
    this.#track(row.priority, state.status, row.status);
    const job = toWire(row);
    if (row.status === 'queued') job.parents = this.#parents(dependsOn);
    return { job, others: [] };
  }

  remove(id: string): Answers['remove'] {
    const state = this.#s.selectState.get(id);
    if (state === undefined) return null;
    if (!isTerminal(state.status)) {
      return invalidState(
        state.status,
        `job is ${state.status}; only a finished job (completed, failed or cancelled) can be removed`,
      );
    }
    this.#s.deleteJob.run(id);
    this.#s.deleteDeps.run(id);
    this.#track(state.priority, state.status, null);
    return { removed: true, status: state.status };
  }

  get(id: string): JobWire | null {
    const row = this.#s.selectJob.get(id);
    return row === undefined ? null : toWire(row);
  }

  paused(): boolean {
    return this.#s.selectSetting.get('paused') === 'true';
  }

  /** Settings whose key starts with `prefix`, as [key, value] pairs. */
  settings(prefix: string): [string, string][] {
    return this.#s.selectSettings
      .all(prefix)
      .filter((row) => row.key.startsWith(prefix))
      .map((row) => [row.key, row.value]);
  }

  /** Set a setting, or delete it (null). */
  putSetting(key: string, value: string | null): null {
    if (value === null) this.#s.deleteSetting.run(key);
    else this.#s.upsertSetting.run(key, value);
    return null;
  }

  setPaused(paused: boolean): null {
    this.#s.upsertSetting.run('paused', String(paused));
    return null;
  }

  expired(now: number, limit: number): ExpiredAttempt[] {
    return this.#s.selectExpired.all(now, limit).map(toExpiredAttempt);
  }

  purge(status: JobStatus, olderThan: number, limit: number): number {
    if (!isTerminal(status)) return 0;
    const ids = this.#s.purgeChunk.all(status, olderThan, limit);
    for (const id of ids) this.#s.deleteDeps.run(id);
    this.#byStatus[status] -= ids.length;
    return ids.length;
  }

  list(filter: ListFilter): Page {
    const limit = Math.floor(filter.limit);
    if (!(limit > 0)) return { jobs: [], nextCursor: null };
    const before = filter.cursor === undefined ? null : decodeCursor(filter.cursor);
    const fetch = limit + 1;
    const statuses = filter.statuses !== undefined && filter.statuses.length > 0 ? [...new Set(filter.statuses)] : null;
    const columns: ListColumn[] = [];
    const values: unknown[] = [];
    if (filter.type !== undefined) {
      columns.push('type');
      values.push(filter.type);
    }
    if (filter.group !== undefined) {
      columns.push('group_key');
      values.push(filter.group);
    }
    if (filter.schedule !== undefined) {
      columns.push('schedule');
      values.push(filter.schedule);
    }
    const tail = before === null ? [fetch] : [before, fetch];
    let rows: SummaryRow[];
    if (statuses === null) {
      rows = this.#s.list(columns, before !== null).all(...values, ...tail);
    } else {
      // One index range per status, newest first, merged: an IN list would make SQLite sort.
      const statement = this.#s.list(['status', ...columns], before !== null);
      rows = [];
      for (const status of statuses) rows.push(...statement.all(status, ...values, ...tail));
      if (statuses.length > 1) rows.sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
    }
    const page = rows.length > limit ? rows.slice(0, limit) : rows;
    const last = page[page.length - 1];
    return {
      jobs: page.map(toSummary),
      nextCursor: rows.length > limit && last !== undefined ? encodeCursor(last.id) : null,
    };
  }

  schedules(): Schedule[] {
    return this.#s.selectSchedules.all().map(toSchedule);
  }

  getSchedule(name: string): Schedule | null {
    const row = this.#s.selectSchedule.get(name);
    return row === undefined ? null : toSchedule(row);
  }

  putSchedule(schedule: ScheduleDefinition): Answers['putSchedule'] {
    const { name, cron, timezone, overlap, catchUp, nextRunAt, updatedAt } = schedule;
    const job = JSON.stringify(schedule.job);
    const paused = schedule.paused ? 1 : 0;
    const created = this.#s.selectSchedule.get(name) === undefined;
    if (created) {
      this.#s.insertSchedule.run(name, cron, timezone, job, overlap, catchUp, paused, nextRunAt, updatedAt, updatedAt);
    } else {
      this.#s.updateSchedule.run(cron, timezone, job, overlap, catchUp, paused, nextRunAt, updatedAt, name);
    }
    return { created, schedule: this.getSchedule(name) as Schedule };
  }

  removeSchedule(name: string): boolean {
    return this.#s.deleteSchedule.run(name).changes === 1;
  }

  fireSchedule(
    fire: Omit<ScheduleFire, 'job'>,
    row: InsertRow | null,
    now: number,
    capacity: number,
  ): Answers['fireSchedule'] {
    const current = this.#s.selectSchedule.get(fire.name);
    if (current === undefined) return { fired: false };
    if (!tickApplies(fire.expected, current)) return { fired: false };
    if (fire.expected !== null) this.#s.advanceSchedule.run(fire.nextRunAt, fire.name);
    const lastStatus = current.last_job_id === null ? undefined : this.#s.selectStatus.get(current.last_job_id);
    const overlap = tickOverlaps(fire.skipOverlap, lastStatus);
    let insert: InsertAnswer | null = null;
    if (!overlap && row !== null) {
      insert = this.insert([row], now, capacity);
      const outcome = insert.ok ? insert.outcomes[0] : undefined;
      if (outcome !== undefined) {
        this.#s.recordScheduleRun.run(fire.runAt, outcome.created ? row.id : outcome.job.id, fire.name);
      }
    }
    return { fired: true, schedule: this.getSchedule(fire.name) as Schedule, overlap, insert };
  }

  #track(priority: number, from: JobStatus | null, to: JobStatus | null): void {
    if (from !== null) {
      this.#byStatus[from]--;
      if (isPending(from)) this.#pending--;
      if (from === 'queued') this.#queuedByPriority[priority] = (this.#queuedByPriority[priority] ?? 0) - 1;
    }
    if (to !== null) {
      this.#byStatus[to]++;
      if (isPending(to)) this.#pending++;
      if (to === 'queued') this.#queuedByPriority[priority] = (this.#queuedByPriority[priority] ?? 0) + 1;
    }
  }
}

function isPending(status: JobStatus): boolean {
  return status === 'waiting' || status === 'scheduled' || status === 'queued' || status === 'retrying';
}

function emptyByStatus(): Record<JobStatus, number> {
  const counts = {} as Record<JobStatus, number>;
  for (const status of JOB_STATUSES) counts[status] = 0;
  return counts;
}
