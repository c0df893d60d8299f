/**
 * The SQLite job store, main-thread side: one process, one file, and a store thread
 * that owns the connection (see thread.ts).
 *
 * What must be instant stays here: the ready index (which job is next, with a copy of
 * it to hand to a worker thread), the jobs this process runs, and their progress. Every
 * operation of one event-loop turn goes to the store thread as one message; a write's
 * promise resolves when the store thread answers, which is after the COMMIT that holds
 * it (with synchronous=FULL, after the fsync). Claims, promotions and heartbeats ride
 * along with the next message and their callers do not wait for them; outcomes wait at
 * most LAZY_FLUSH_MS for one.
 *
 * A job enters the ready index only once the store thread has stored it, so nothing is
 * handed out that a failed COMMIT could take back — except claims themselves: when the
 * store thread answers that a transaction was rolled back, the jobs this process
 * claimed in it are reported `lost` (their attempts are abandoned) and the index is
 * rebuilt from the file. When the store thread dies, every write in flight fails as
 * `store_unavailable`, the claims it had not stored are reported lost, and a new store
 * thread is started; writes fail fast until it is up.
 */
import { Worker } from 'node:worker_threads';
import { FaultLog, type FaultLogger, silentLog } from '../../fault-log.js';
import type { Job, JobStatus, JobSummary, NewJob, ParentResult, Progress } from '../../contract/job.js';
import { canonicalJson } from '../canonical-json.js';
import { StoreError } from '../errors.js';
import type {
  Changes,
  ClaimedJob,
  ClaimRequest,
  DeliveryAttempt,
  DeliveryRecord,
  DueDelivery,
  ExpiredAttempt,
  Finished,
  FinishItem,
  InsertOutcome,
  InsertResult,
  InvalidState,
  JobStore,
  ListFilter,
  Page,
  FireResult,
  QueueCounts,
  Schedule,
  ScheduleDefinition,
  ScheduleFire,
  StoreListener,
  StartedAttempt,
  StoreOptions,
} from '../store.js';
import type { LimitOverride } from '../store.js';
import { deliveryRecords } from '../delivery-records.js';
import { LIMITS_PREFIX, parseOverrides } from '../settings-codec.js';
import {
  type Answers,
  type ChangesWire,
  type FinishRow,
  type InsertAnswer,
  type InsertRow,
  type JobWire,
  type Op,
  type OpResult,
  READ_OPS,
  type Reply,
  type Request,
  type Snapshot,
  type StoreThreadData,
  type WireError,
} from './protocol.js';
import { type IndexEntry, ReadyIndex } from './ready-index.js';
import { dueDelivery, jobFromWire } from './rows.js';

export interface SqliteStoreOptions extends StoreOptions {
  /**
   * `full` (default): a commit survives power loss (fsync per group commit);
   * `normal`: survives a process crash only, faster.
   */
  synchronous?: 'full' | 'normal';
  /**
   * Page cache of the connection, MiB (default 8). It fills with the pages the queue
   * touches, and with a long retention the file keeps growing, so this is how much the
   * cache adds to RSS once it is full.
   */
  cacheMb?: number;
  /** Tests: the file counts as full beyond this many pages (PRAGMA max_page_count). */
  maxPageCount?: number;
  /** Bytes of job copies the ready index keeps (tests make it small). */
  recordBudget?: number;
  /** How long to wait before replacing a store thread that died; doubled after each failed restart, up to 30 s. */
  restartDelayMs?: number;
  /** Where a store thread that died, and its restarts, are logged (default: nowhere). */
  log?: FaultLogger;
}

/** How long claims and heartbeats may wait for a message that carries them. */
const LAZY_FLUSH_MS = 10;
const DEFAULT_RESTART_DELAY_MS = 1000;
const MAX_RESTART_DELAY_MS = 30_000;

interface Pending {
  op: Op;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

interface InFlight {
  entries: Pending[];
  /** Claims this message carries: if it is not stored, they are lost. */
  claims: { id: string; attempt: number }[];
}

/** A job this process runs: the copy a finish is built from, and its latest progress. */
interface Running {
  wire: JobWire;
  owner: string;
  /** startedAt before this claim: what a released claim goes back to. */
  previousStart: number | null;
}

export class SqliteStore implements JobStore {
  /** A store of this process alone. */
  readonly cluster = null;
  readonly #path: string;
  readonly #options: SqliteStoreOptions;
  readonly #capacity: number;
  readonly #clock: () => number;
  readonly #index: ReadyIndex;
  readonly #running = new Map<string, Running>();
  readonly #listeners = new Set<StoreListener>();
  #worker: Worker | null = null;
  #seq = 0;
  #queue: Pending[] = [];
  #queueClaims: { id: string; attempt: number }[] = [];
  readonly #inFlight = new Map<number, InFlight>();
  #flushImmediate: NodeJS.Immediate | null = null;
  #flushTimer: NodeJS.Timeout | null = null;
  #available = false;
  /** The latest write failed as unavailable (disk full, read-only, I/O error): /ready says so until one succeeds. */
  #writeFailing = false;
  #closed = false;
  #closing: Promise<void> | null = null;
  #restartTimer: NodeJS.Timeout | null = null;
  /** A rolled-back transaction: claims wait until the index is rebuilt. */
  #rebuilding = false;
  /** The store thread is down: from its death until a new one is up. */
  readonly #threadFault: FaultLog;

  /**
   * Opens (creating if needed) the store at `path`, or a private in-memory database for
   * ':memory:'. Rejects with a StoreError `store_in_use` when another process holds the file.
   */
  static async open(path: string, options: SqliteStoreOptions): Promise<SqliteStore> {
    const store = new SqliteStore(path, options);
    await store.#start(true);
    return store;
  }

  private constructor(path: string, options: SqliteStoreOptions) {
    this.#path = path;
    this.#options = options;
    this.#capacity = options.capacity;
    this.#clock = options.clock ?? Date.now;
    this.#index = new ReadyIndex(options.recordBudget, options.priorityAgingMs ?? 0);
    const restartMs = options.restartDelayMs ?? DEFAULT_RESTART_DELAY_MS;
    this.#threadFault = new FaultLog(options.log ?? silentLog, {
      what: 'store thread',
      backoff: { initialMs: restartMs, factor: 2, maxMs: Math.max(restartMs, MAX_RESTART_DELAY_MS), jitter: 'none' },
    });
  }

  get path(): string {
    return this.#path;
  }

  #observeCommit: ((seconds: number) => void) | null = null;

  observeCommits(observer: ((seconds: number) => void) | null): void {
    this.#observeCommit = observer;
  }

  get available(): boolean {
    return this.#available && !this.#writeFailing && !this.#closed;
  }

  /** The store thread, for tests that kill it. */
  get thread(): Worker | null {
    return this.#worker;
  }

  now(): number {
    return this.#clock();
  }

  subscribe(listener: StoreListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  // ── writes ────────────────────────────────────────────────────────────────

  async insert(jobs: NewJob[]): Promise<InsertResult> {
    const rows = jobs.map(insertRowOf);
    const answer = await this.#call({ op: 'insert', rows, now: this.#clock(), capacity: this.#capacity });
    return this.#applyInsert(jobs, rows, answer);
  }

  /** What the store thread answered for an insert: created jobs enter the ready index and are announced. */
  #applyInsert(jobs: NewJob[], rows: InsertRow[], answer: InsertAnswer): InsertResult {
    if (!answer.ok) return answer;
    const outcomes: InsertOutcome[] = answer.outcomes.map((outcome, index) => {
      if (!outcome.created) {
        const job = jobFromWire(outcome.job);
        return outcome.dedupe === undefined ? { created: false, job } : { created: false, job, dedupe: outcome.dedupe };
      }
      const source = jobs[index] as NewJob;
      const row = rows[index] as InsertRow;
      const { state } = outcome;
      const job: Job = {
        id: source.id,
        type: source.type,
        status: state.status,
        priority: source.priority,
        payload: source.payload ?? null,
        result: null,
        error: state.error,
        attempts: 0,
        maxAttempts: source.maxAttempts,
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
      };
      if (state.status === 'queued' || state.status === 'scheduled') {
        const record: JobWire = copyOf(job, row.payloadText, state.parents ?? []);
        if (state.status === 'queued')
          this.#index.addQueued(job.id, job.type, job.priority, job.group, state.readyAt ?? 0, record);
        else this.#index.addDue(job.id, job.type, job.priority, job.group, state.runAt ?? 0, record);
      }
      this.#emit(job.id, job.type, job.status, () => job);
      return { created: true, job };
    });
    return { ok: true, outcomes };
  }

  async claim(request: ClaimRequest): Promise<ClaimedJob[][]> {
    this.#assertOpen();
    if (!this.#available || this.#rebuilding) return [];
    const now = this.#clock();
    const promoted = this.#index.promoteDue(now);
    if (promoted.length > 0) this.#send({ op: 'promote', items: promoted, now }, 'lazy');

    // Entries and their copies side by side: no object per job beyond the copy itself.
    const entries: IndexEntry[][] = [];
    const records: (JobWire | null)[][] = [];
    const { micro } = request;
    const left = request.allowance === undefined || request.allowance === null ? null : new Map(request.allowance);
    const allowed = left === null || left.size === 0 ? null : (type: string) => (left.get(type) ?? 1) > 0;
    let missing = 0;
    while (entries.length < request.batches) {
      const first = this.#index.take(allowed, request.passedOver, now);
      if (first === undefined) break;
      const batchEntries = [first.entry];
      const batchRecords = [first.record];
      entries.push(batchEntries);
      records.push(batchRecords);
      if (first.record === null) missing++;
      const allowance = left?.get(first.entry.type);
      if (allowance !== undefined) left?.set(first.entry.type, allowance - 1);
      let expectedMs =
        micro === null || micro.solo.has(first.entry.id) || allowance !== undefined
          ? undefined
          : micro.costs.get(first.entry.type);
      if (micro === null || expectedMs === undefined) continue;
      while (batchEntries.length < micro.maxJobs && expectedMs < micro.budgetMs) {
        const next = this.#index.peek(null, undefined, now);
        // A limited type is never in a micro-batch: its jobs are counted one by one.
        const cost =
          next === undefined || micro.solo.has(next.id) || left?.has(next.type) === true
            ? undefined
            : micro.costs.get(next.type);
        // The next job does not fit: it stays first in line for the next batch.
        if (cost === undefined) break;
        const taken = this.#index.take(null, undefined, now);
        if (taken === undefined) break;
        batchEntries.push(taken.entry);
        batchRecords.push(taken.record);
        if (taken.record === null) missing++;
        expectedMs += cost;
      }
    }
    if (entries.length === 0) return [];

    const owner = request.owner;
    const expiresAt = now + request.leaseMs;
    // Jobs without a copy in the index are claimed and read from the file in one step,
    // so one cancelled meanwhile is not handed out; the rest are claimed lazily below.
    const read = new Map<string, JobWire>();
    if (missing > 0) {
      const wanted = entries.flatMap((batch, b) => batch.filter((_, i) => records[b]?.[i] === null));
      const answers = await this.#call({
        op: 'claimRead',
        ids: wanted.map((entry) => entry.id),
        priorities: wanted.map((entry) => entry.priority),
        owner,
        expiresAt,
        now,
      });
      for (const wire of answers) if (wire !== null) read.set(wire.id, wire);
    }

    const ids: string[] = [];
    const priorities: number[] = [];
    const claimed: ClaimedJob[][] = [];
    for (const [b, batch] of entries.entries()) {
      const batchRecords = records[b] as (JobWire | null)[];
      const jobs: ClaimedJob[] = [];
      for (const [i, entry] of batch.entries()) {
        const copy = batchRecords[i] ?? null;
        const fromFile = copy === null ? read.get(entry.id) : undefined;
        if (fromFile !== undefined) {
          fromFile.readyAt = entry.readyAt;
          this.#running.set(fromFile.id, { wire: fromFile, owner, previousStart: null });
          jobs.push(claimedOf(fromFile));
          continue;
        }
        const record = copy;
        if (record === null) continue;
        const previousStart = record.startedAt;
        record.status = 'running';
        record.attempts += 1;
        record.startedAt = now;
        record.progress = null;
        record.runAt = null;
        record.readyAt = entry.readyAt;
        // The caller's job stays the record of this attempt, whatever happens to the copy.
        const job = claimedOf(record);
        ids.push(job.id);
        priorities.push(entry.priority);
        this.#running.set(job.id, { wire: record, owner, previousStart });
        this.#queueClaims.push({ id: job.id, attempt: job.attempts });
        jobs.push(job);
      }
      if (jobs.length > 0) claimed.push(jobs);
    }
    // A job the file no longer had queued (cancelled while its claim read it) is lost to this claim.
    this.#call({ op: 'claim', ids, priorities, owner, expiresAt, now }, 'lazy').then(
      (missed) => {
        if (missed.length === 0) return;
        const attempts = new Map(claimed.flat().map((job) => [job.id, job.attempts]));
        this.#lost(missed.map((id) => ({ id, attempt: attempts.get(id) ?? 0 })));
      },
      () => {
        // A claim that was not stored is reported lost by the reply that says so.
      },
    );
    for (const jobs of claimed) {
      for (const job of jobs) {
        const running = this.#running.get(job.id) as Running;
        this.#emit(job.id, job.type, 'running', () => this.#runningJob(running));
      }
    }
    return claimed;
  }

  heartbeat(owner: string, ids: string[], leaseMs: number): Promise<string[]> {
    if (ids.length === 0) return Promise.resolve([]);
    return this.#call({ op: 'heartbeat', owner, ids, expiresAt: this.#clock() + leaseMs }, 'lazy');
  }

  /** Rides along with the next message to the store thread, like a claim. */
  async started(items: StartedAttempt[]): Promise<void> {
    const rows: StartedAttempt[] = [];
    for (const item of items) {
      const running = this.#running.get(item.id);
      if (running === undefined || running.owner !== item.owner || running.wire.attempts !== item.attempt) continue;
      running.wire.startedAt = item.startedAt;
      rows.push(item);
    }
    if (rows.length > 0) await this.#call({ op: 'started', rows }, 'lazy');
  }

  /**
   * Progress lives on this process's copy of the running job, not in the file: a
   * handler may report it many times a second, and it only matters while the attempt
   * runs. Reads overlay it; a completion writes the last report with the result.
   */
  progress(id: string, attempt: number, owner: string, progress: Progress): void {
    const running = this.#running.get(id);
    if (running === undefined || running.owner !== owner || running.wire.attempts !== attempt) return;
    running.wire.progress = progress;
    for (const listener of this.#listeners) {
      listener({ kind: 'progress', id, attempt, progress, job: () => this.#runningJob(running) });
    }
  }

  async finish(items: FinishItem[]): Promise<(Finished | null)[]> {
    const now = this.#clock();
    const copies: (Running | null)[] = [];
    const rows: FinishRow[] = items.map((item) => {
      const running = this.#running.get(item.id);
      const mine =
        running !== undefined && running.owner === item.owner && running.wire.attempts === item.attempt
          ? running
          : null;
      copies.push(mine);
      const { outcome } = item;
      return {
        id: item.id,
        attempt: item.attempt,
        owner: item.owner,
        expired: item.expired === true,
        startedAt: item.startedAt ?? null,
        wantJob: mine === null,
        outcome:
          outcome.kind === 'completed'
            ? {
                kind: 'completed',
                resultText: outcome.resultText,
                progressText: mine?.wire.progress == null ? null : JSON.stringify(mine.wire.progress),
              }
            : outcome.kind === 'failed'
              ? { kind: 'failed', errorText: JSON.stringify(outcome.error), retryAt: outcome.retryAt }
              : outcome.kind === 'released'
                ? { kind: 'released', errorText: JSON.stringify(outcome.error), retryAt: outcome.retryAt }
                : { kind: 'unstarted' },
      };
    });
    // Outcomes ride along for up to LAZY_FLUSH_MS: a burst of finishes then shares one
    // COMMIT, and the store thread is seldom in an fsync when a submission arrives.
    const answers = await this.#call({ op: 'finish', rows, now }, 'lazy');
    return answers.map((answer, i) => {
      const item = items[i] as FinishItem;
      if (answer === null) return null;
      const mine = copies[i] ?? null;
      if (mine !== null && this.#running.get(item.id) === mine) this.#running.delete(item.id);
      if (answer.status === 'queued' && answer.job !== null) {
        // An attempt that never started, given back: as it was before its claim.
        this.#applyOne(answer.job);
        return { status: answer.status, others: 0 };
      }
      let wire: JobWire | null = answer.job;
      if (mine !== null) {
        wire = mine.wire;
        wire.status = answer.status;
        wire.runAt = answer.retryAt;
        if (item.startedAt !== undefined) wire.startedAt = item.startedAt;
        if (answer.status === 'completed') {
          wire.resultText = (item.outcome as { resultText: string }).resultText;
          wire.finishedAt = now;
        } else {
          wire.error = (item.outcome as { error: Job['error'] }).error;
          if (answer.status === 'failed') wire.finishedAt = now;
          if (item.outcome.kind === 'released') wire.attempts = Math.max(0, wire.attempts - 1);
        }
      }
      if (wire !== null) {
        const done = wire;
        if (answer.status === 'retrying') {
          this.#index.addDue(done.id, done.type, done.priority, done.group, answer.retryAt ?? now, done);
        }
        this.#emit(done.id, done.type, done.status, () => jobFromWire(done));
      }
      this.#applyOthers(answer.others);
      return { status: answer.status, others: answer.others.length };
    });
  }

  async release(items: { id: string; attempt: number; owner: string }[]): Promise<void> {
    const rows: Extract<Op, { op: 'unclaim' }>['rows'] = [];
    const given: Running[] = [];
    for (const item of items) {
      const running = this.#running.get(item.id);
      if (running === undefined || running.owner !== item.owner || running.wire.attempts !== item.attempt) continue;
      this.#running.delete(item.id);
      given.push(running);
      rows.push({ ...item, priority: running.wire.priority, startedAt: running.previousStart });
    }
    if (rows.length === 0) return;
    // First in line again at once (last given back goes in front last, so the order holds).
    for (const running of [...given].reverse()) {
      const wire = running.wire;
      wire.status = 'queued';
      wire.attempts -= 1;
      wire.startedAt = running.previousStart;
      this.#index.addQueued(wire.id, wire.type, wire.priority, wire.group, wire.readyAt ?? 0, wire, 'front');
      this.#emit(wire.id, wire.type, 'queued', () => jobFromWire(wire));
    }
    await this.#call({ op: 'unclaim', rows });
  }

  async cancel(id: string): Promise<Changes | InvalidState | null> {
    // Taken out of the index at once, so no claim hands it out while the cancel is on its way.
    const held = this.#index.remove(id);
    let answer: Answers['cancel'];
    try {
      answer = await this.#call({ op: 'cancel', id, now: this.#clock() });
    } catch (error) {
      if (held !== null && held.status === 'queued') {
        this.#index.addQueued(id, held.type, held.priority, held.group, held.readyAt ?? 0, held);
      }
      throw error;
    }
    if (answer === null || 'invalidState' in answer) return answer;
    this.#running.delete(id);
    return this.#applyChanges(answer);
  }

  async retry(id: string): Promise<Changes | InvalidState | null> {
    const answer = await this.#call({ op: 'retry', id, now: this.#clock() });
    if (answer === null || 'invalidState' in answer) return answer;
    return this.#applyChanges(answer);
  }

  async remove(id: string): Promise<'removed' | InvalidState | null> {
    const answer = await this.#call({ op: 'remove', id });
    if (answer === null || 'invalidState' in answer) return answer;
    return 'removed';
  }

  setPaused(paused: boolean): Promise<void> {
    return this.#call({ op: 'setPaused', paused }).then(() => undefined);
  }

  purge(status: 'completed' | 'failed' | 'cancelled', ageMs: number, limit: number): Promise<number> {
    return this.#call({ op: 'purge', status, olderThan: this.#clock() - ageMs, limit });
  }

  // ── reads ─────────────────────────────────────────────────────────────────

  async get(id: string): Promise<Job | null> {
    const wire = await this.#call({ op: 'get', id });
    if (wire === null) return null;
    const job = jobFromWire(wire);
    const running = this.#running.get(id);
    if (running !== undefined && job.status === 'running') job.progress = running.wire.progress;
    return job;
  }

  /** One read each, sent to the store thread together in one batch. */
  async getMany(ids: readonly string[]): Promise<Job[]> {
    const jobs = await Promise.all([...new Set(ids)].map((id) => this.get(id)));
    return jobs.filter((job) => job !== null);
  }

  list(filter: ListFilter): Promise<Page> {
    return this.#call({ op: 'list', filter });
  }

  async counts(): Promise<QueueCounts> {
    const counts = await this.#call({ op: 'counts' });
    return { ...counts, oldestQueuedReadyAt: this.#index.oldestQueuedReadyAt(), exact: true };
  }

  paused(): Promise<boolean> {
    return this.#call({ op: 'paused' });
  }

  async limitOverrides(): Promise<Map<string, LimitOverride>> {
    return parseOverrides(await this.#call({ op: 'settings', prefix: LIMITS_PREFIX }));
  }

  setLimitOverride(type: string, override: LimitOverride | null): Promise<void> {
    return this.#call({
      op: 'putSetting',
      key: LIMITS_PREFIX + type,
      value: override === null ? null : JSON.stringify(override),
    }).then(() => undefined);
  }

  schedules(): Promise<Schedule[]> {
    return this.#call({ op: 'schedules' });
  }

  getSchedule(name: string): Promise<Schedule | null> {
    return this.#call({ op: 'getSchedule', name });
  }

  putSchedule(schedule: ScheduleDefinition): Promise<{ created: boolean; schedule: Schedule }> {
    return this.#call({ op: 'putSchedule', schedule });
  }

  removeSchedule(name: string): Promise<boolean> {
    return this.#call({ op: 'removeSchedule', name });
  }

  async fireSchedule(fire: ScheduleFire): Promise<FireResult> {
    const { job, ...rest } = fire;
    const row = job === null ? null : insertRowOf(job);
    const answer = await this.#call({
      op: 'fireSchedule',
      fire: rest,
      row,
      now: this.#clock(),
      capacity: this.#capacity,
    });
    if (!answer.fired) return answer;
    const insert =
      answer.insert === null || job === null ? null : this.#applyInsert([job], [row as InsertRow], answer.insert);
    return { fired: true, schedule: answer.schedule, overlap: answer.overlap, insert };
  }

  nextDueAt(): Promise<number | null> {
    return Promise.resolve(this.#index.nextDueAt());
  }

  expiredLeases(limit: number): Promise<ExpiredAttempt[]> {
    return this.#call({ op: 'expired', now: this.#clock(), limit });
  }

  // ── callback deliveries ───────────────────────────────────────────────────

  async claimDeliveries(owner: string, leaseMs: number, limit: number): Promise<DueDelivery[]> {
    const now = this.#clock();
    const wires = await this.#call({ op: 'claimDeliveries', owner, expiresAt: now + leaseMs, now, limit });
    return wires.map((wire) => dueDelivery(wire, wire.job === null ? null : jobFromWire(wire.job)));
  }

  recordDeliveryAttempt(attempt: DeliveryAttempt): Promise<boolean> {
    return this.#call({ op: 'recordDelivery', attempt, now: this.#clock() });
  }

  nextDeliveryAt(): Promise<number | null> {
    return this.#call({ op: 'nextDelivery' });
  }

  async deliveries(jobId: string): Promise<DeliveryRecord[] | null> {
    const rows = await this.#call({ op: 'deliveries', jobId });
    return rows === null ? null : deliveryRecords(rows);
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#restartTimer !== null) clearTimeout(this.#restartTimer);
      this.#restartTimer = null;
      const worker = this.#worker;
      if (worker !== null && this.#available) {
        this.#flush();
        const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
        worker.postMessage('close');
        await exited;
      } else if (worker !== null) {
        await worker.terminate();
      }
      this.#closed = true;
      this.#available = false;
      this.#worker = null;
      this.#failAll(new StoreError('store_closed', 'the job store is closed'));
    })();
    return this.#closing;
  }

  // ── changes ───────────────────────────────────────────────────────────────

  #applyChanges(changes: ChangesWire): Changes {
    const job = this.#applyOne(changes.job);
    this.#applyOthers(changes.others);
    return { job: jobFromWire(job), others: changes.others.map(jobFromWire) };
  }

  #applyOthers(others: JobWire[]): void {
    for (const other of others) this.#applyOne(other);
  }

  /** A job the store thread changed: keep the index in step and tell the listeners. */
  #applyOne(wire: JobWire): JobWire {
    if (wire.status === 'queued')
      this.#index.addQueued(wire.id, wire.type, wire.priority, wire.group, wire.readyAt ?? 0, wire);
    else if (wire.status === 'scheduled' || wire.status === 'retrying') {
      this.#index.addDue(wire.id, wire.type, wire.priority, wire.group, wire.runAt ?? 0, wire);
    } else this.#index.remove(wire.id);
    this.#emit(wire.id, wire.type, wire.status, () => jobFromWire(wire));
    return wire;
  }

  #emit(id: string, type: string, status: JobStatus, job: () => Job): void {
    for (const listener of this.#listeners) listener({ kind: 'changed', id, type, status, job });
  }

  #lost(claims: { id: string; attempt: number }[]): void {
    for (const { id, attempt } of claims) {
      const running = this.#running.get(id);
      if (running === undefined || running.wire.attempts !== attempt) continue;
      this.#running.delete(id);
      for (const listener of this.#listeners) listener({ kind: 'lost', id, attempt });
    }
  }

  #runningJob(running: Running): Job {
    return jobFromWire(running.wire);
  }

  // ── the store thread ──────────────────────────────────────────────────────

  async #start(first: boolean): Promise<void> {
    const workerData: StoreThreadData = {
      path: this.#path,
      synchronous: this.#options.synchronous ?? 'full',
      cacheKib: (this.#options.cacheMb ?? 8) * 1024,
      maxPageCount: this.#options.maxPageCount ?? null,
      expireLeases: first,
    };
    const worker = new Worker(new URL('./thread.js', import.meta.url), { workerData });
    this.#worker = worker;
    const snapshot = await new Promise<Snapshot>((resolve, reject) => {
      const onExit = (code: number) => reject(new Error(`the store thread exited with code ${code} while opening`));
      const onError = (error: Error) => reject(error);
      worker.once('error', onError);
      worker.once('exit', onExit);
      worker.once('message', (reply: Reply) => {
        worker.off('error', onError);
        worker.off('exit', onExit);
        if (reply.kind === 'ready') resolve(reply.snapshot);
        else if (reply.kind === 'open_failed') {
          void worker.terminate();
          reject(toError(reply.error));
        } else reject(new Error(`unexpected first message from the store thread: ${reply.kind}`));
      });
    });
    worker.on('message', (reply: Reply) => this.#onReply(reply));
    let died: unknown = null;
    worker.on('error', (error) => {
      died = error;
    });
    worker.once('exit', (code) => this.#onExit(worker, died ?? new Error(`the store thread exited with code ${code}`)));
    this.#index.rebuild(snapshot, (id) => this.#running.has(id));
    this.#available = true;
    this.#threadFault.succeeded();
    if (!first) this.#emitReady();
  }

  #onReply(reply: Reply): void {
    if (reply.kind !== 'done') return;
    if (reply.commitMs !== null) this.#observeCommit?.(reply.commitMs / 1000);
    if (reply.deliveries) for (const listener of this.#listeners) listener({ kind: 'deliveries' });
    if (reply.rolledBack) {
      for (const { seq } of reply.replies) this.#lost(this.#inFlight.get(seq)?.claims ?? []);
      this.#rebuildIndex();
    }
    for (const { seq, results } of reply.replies) {
      const flight = this.#inFlight.get(seq);
      if (flight === undefined) continue;
      this.#inFlight.delete(seq);
      for (const [i, entry] of flight.entries.entries()) {
        const result = results[i];
        if (result !== undefined && !READ_OPS.has(entry.op.op))
          this.#writeFailing = !result.ok && result.error.unavailable;
        settle(entry, result);
      }
    }
  }

  /**
   * After a rolled-back transaction: claims stop until the index is rebuilt from a
   * snapshot taken after every operation sent so far, so that nothing this thread
   * changed since (a claim given back, a promotion) is lost to an older picture.
   */
  #rebuildIndex(): void {
    if (this.#rebuilding) return;
    this.#rebuilding = true;
    this.#call({ op: 'snapshot' }).then(
      (snapshot) => {
        this.#rebuilding = false;
        this.#index.rebuild(snapshot, (id) => this.#running.has(id));
        this.#emitReady();
      },
      () => {
        // The store thread died meanwhile: its replacement rebuilds the index when it is up.
        this.#rebuilding = false;
      },
    );
  }

  #emitReady(): void {
    for (const listener of this.#listeners) listener({ kind: 'ready' });
  }

  #onExit(worker: Worker, cause: unknown): void {
    if (this.#worker !== worker) return;
    this.#worker = null;
    this.#available = false;
    if (this.#closed || this.#closing !== null) return;
    const memory = this.#path === ':memory:' || this.#path === '';
    const error = new StoreError(
      'store_unavailable',
      memory
        ? 'the store thread of the in-memory store stopped, and its jobs with it'
        : 'the store thread stopped; the store is restarting it',
    );
    for (const flight of this.#inFlight.values()) this.#lost(flight.claims);
    this.#lost(this.#queueClaims);
    this.#failAll(error);
    // A new thread on ':memory:' would open an empty database and pretend nothing was lost.
    if (memory) {
      this.#threadFault.failed(cause);
      return;
    }
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = null;
      this.#start(false).catch((error: unknown) => {
        // The new thread failed to open (the disk is still failing): try again later.
        const failed = this.#worker;
        if (failed !== null) this.#onExit(failed, error);
      });
    }, this.#threadFault.failed(cause));
    this.#restartTimer.unref();
  }

  #failAll(error: Error): void {
    const flights = [...this.#inFlight.values()];
    this.#inFlight.clear();
    const queued = this.#queue;
    this.#queue = [];
    this.#queueClaims = [];
    for (const flight of flights) for (const entry of flight.entries) entry.reject(error);
    for (const entry of queued) entry.reject(error);
  }

  #call<K extends Op['op']>(op: Extract<Op, { op: K }>, urgency: 'now' | 'lazy' = 'now'): Promise<Answers[K]> {
    if (this.#closed || this.#closing !== null) return Promise.reject(closedError());
    if (!this.#available) {
      return Promise.reject(new StoreError('store_unavailable', 'the store thread is restarting; try again shortly'));
    }
    return new Promise<Answers[K]>((resolve, reject) => {
      this.#queue.push({ op, resolve: resolve as (value: unknown) => void, reject });
      this.#schedule(urgency);
    });
  }

  /** An op whose answer nobody waits for; a failure shows as lost claims or a rebuilt index. */
  #send(op: Op, urgency: 'now' | 'lazy'): void {
    if (!this.#available) return;
    this.#queue.push({ op, resolve: () => {}, reject: () => {} });
    this.#schedule(urgency);
  }

  #schedule(urgency: 'now' | 'lazy'): void {
    if (urgency === 'now') {
      this.#flushImmediate ??= setImmediate(() => this.#flush());
    } else if (this.#flushTimer === null && this.#flushImmediate === null) {
      this.#flushTimer = setTimeout(() => this.#flush(), LAZY_FLUSH_MS);
      this.#flushTimer.unref();
    }
  }

  #flush(): void {
    if (this.#flushImmediate !== null) clearImmediate(this.#flushImmediate);
    if (this.#flushTimer !== null) clearTimeout(this.#flushTimer);
    this.#flushImmediate = null;
    this.#flushTimer = null;
    if (this.#queue.length === 0 || this.#worker === null) return;
    const seq = ++this.#seq;
    const entries = this.#queue;
    this.#queue = [];
    this.#inFlight.set(seq, { entries, claims: this.#queueClaims });
    this.#queueClaims = [];
    const request: Request = { seq, ops: entries.map((entry) => entry.op) };
    this.#worker.postMessage(request);
  }

  #assertOpen(): void {
    if (this.#closed || this.#closing !== null) throw closedError();
  }
}

function insertRowOf(job: NewJob): InsertRow {
  return {
    id: job.id,
    type: job.type,
    priority: job.priority,
    payloadText: JSON.stringify(job.payload ?? null),
    canonicalPayload: job.idempotencyKey === null ? null : canonicalJson(job.payload ?? null),
    maxAttempts: job.maxAttempts,
    timeoutMs: job.timeoutMs,
    backoff: job.backoff,
    idempotencyKey: job.idempotencyKey,
    dependsOn: job.dependsOn,
    metadataText: JSON.stringify(job.metadata ?? {}),
    runAt: job.runAt,
    createdAt: job.createdAt,
    dedupeKey: job.dedupeKey ?? null,
    reuseMs: job.reuseMs ?? null,
    group: job.group ?? null,
    schedule: job.schedule ?? null,
    callbackText: job.callback == null ? null : JSON.stringify(job.callback),
  };
}

/**
 * A copy of a job with its payload text and parents: what the ready index keeps, and
 * what a claim hands out (a copy of that copy, so the caller's job stays the record of
 * its attempt). One literal, so every such copy has one object shape.
 */
function copyOf(job: JobSummary, payloadText: string, parents: ParentResult[]): JobWire & ClaimedJob {
  return {
    id: job.id,
    type: job.type,
    status: job.status,
    priority: job.priority,
    error: job.error,
    attempts: job.attempts,
    maxAttempts: job.maxAttempts,
    timeoutMs: job.timeoutMs,
    backoff: job.backoff,
    progress: job.progress,
    idempotencyKey: job.idempotencyKey,
    dependsOn: job.dependsOn,
    metadata: job.metadata,
    group: job.group,
    callback: job.callback,
    runAt: job.runAt,
    createdAt: job.createdAt,
    startedAt: job.startedAt,
    finishedAt: job.finishedAt,
    readyAt: job.readyAt,
    schedule: job.schedule,
    payloadText,
    resultText: null,
    parents,
  };
}

function claimedOf(record: JobWire): ClaimedJob {
  return copyOf(record, record.payloadText ?? 'null', record.parents ?? []);
}

function settle(entry: Pending, result: OpResult | undefined): void {
  if (result === undefined) entry.reject(new Error('the store thread sent no answer for an operation'));
  else if (result.ok) entry.resolve(result.value);
  else entry.reject(toError(result.error));
}

function toError(error: WireError): Error {
  if (error.code === 'invalid_cursor' || error.code === 'store_in_use' || error.code === 'unsupported_schema') {
    return new StoreError(error.code, error.message);
  }
  if (error.unavailable) {
    return new StoreError('store_unavailable', `the store cannot write: ${error.message}`);
  }
  const plain = new Error(error.message);
  plain.name = error.name;
  return plain;
}

function closedError(): StoreError {
  return new StoreError('store_closed', 'the job store is closed');
}
