/**
 * The SQLite job store, main-thread side: one process, one file, and a store thread
 * that owns the connection (thread.ts, operations.ts and the files it names).
 *
 * What must be instant stays on this thread (main-side.ts): the ready index (which job
 * is next, with a copy of it to hand to a worker thread), the jobs this process runs,
 * and their progress. Every operation of one event-loop turn goes to the store thread
 * as one message (thread-client.ts); claims are handed out from the index
 * (claim-from-index.ts) and attempts' outcomes written from this process's copies
 * (attempts.ts).
 *
 * A job enters the ready index only once the store thread has stored it, so nothing is
 * handed out that a failed COMMIT could take back — except claims themselves: when the
 * store thread answers that a transaction was rolled back, the jobs this process
 * claimed in it are reported `lost` (their attempts are abandoned) and the index is
 * rebuilt from the file. When the store thread dies, every write in flight fails as
 * `store_unavailable`, the claims it had not stored are reported lost, and a new store
 * thread is started; writes fail fast until it is up.
 */
import { countsAsSeen } from '../core/rows.js';
import type { Batch, NewBatch } from '../../contract/batch.js';
import type { Answers, InsertRow } from './protocol.js';
import type {
  Changes,
  ClaimedJob,
  ClaimRequest,
  DeliveryAttempt,
  DueDelivery,
  ExpiredAttempt,
  Finished,
  FinishItem,
  FireResult,
  GroupCount,
  InsertResult,
  InvalidState,
  JobStore,
  ListFilter,
  Page,
  ScheduleFire,
  StartedAttempt,
  StoreListener,
  StoreOptions,
} from '../store.js';
import type { DeliveryRecord } from '../../contract/delivery.js';
import type { FaultLogger } from '../../fault-log.js';
import type { Job, NewJob, Progress } from '../../contract/job.js';
import type { LimitKind, LimitOverride } from '../../contract/limits.js';
import type { QueueCounts } from '../../contract/queue.js';
import type { Schedule } from '../../contract/schedule.js';
import type { ScheduleDefinition } from '../../contract/schedule.js';
import type { StoreThreadClient } from './thread-client.js';
import { limitsKey, limitsPrefix, parseOverrides } from '../core/settings-codec.js';
import { MainSide } from './main-side.js';
import { applyChanges, applyInsert } from './apply-changes.js';
import { claimFromIndex } from './claim-from-index.js';
import { deliveryRecords } from '../core/delivery-records.js';
import { dueDelivery, jobFromWire } from '../core/rows.js';
import { insertRowOf } from './job-copies.js';
import { Worker } from 'node:worker_threads';
import * as attempts from './attempts.js';

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

export class SqliteStore implements JobStore {
  /** A store of this process alone. */
  readonly cluster = null;
  readonly #path: string;
  readonly #side: MainSide;
  readonly #thread: StoreThreadClient;

  /**
   * Opens (creating if needed) the store at `path`, or a private in-memory database for
   * ':memory:'. Rejects with a StoreError `store_in_use` when another process holds the file.
   */
  static async open(path: string, options: SqliteStoreOptions): Promise<SqliteStore> {
    const store = new SqliteStore(path, options);
    await store.#thread.start();
    return store;
  }

  private constructor(path: string, options: SqliteStoreOptions) {
    this.#path = path;
    this.#side = new MainSide(path, options);
    this.#thread = this.#side.thread;
  }

  get path(): string {
    return this.#path;
  }

  observeCommits(observer: ((seconds: number) => void) | null): void {
    this.#thread.observeCommits(observer);
  }

  get available(): boolean {
    return this.#thread.available;
  }

  /** The store thread, for tests that kill it. */
  get thread(): Worker | null {
    return this.#thread.thread;
  }

  now(): number {
    return this.#side.clock();
  }

  subscribe(listener: StoreListener): () => void {
    this.#side.listeners.add(listener);
    return () => this.#side.listeners.delete(listener);
  }

  // ── writes ────────────────────────────────────────────────────────────────

  async insert(jobs: NewJob[], batch?: NewBatch): Promise<InsertResult> {
    const rows = jobs.map(insertRowOf);
    const answer = await this.#thread.call({
      op: 'insert',
      rows,
      now: this.#side.clock(),
      capacity: this.#side.capacity,
      batch: batch ?? null,
    });
    return applyInsert(this.#side, jobs, rows, answer);
  }

  claim(request: ClaimRequest): Promise<ClaimedJob[][]> {
    return claimFromIndex(this.#side, request);
  }

  heartbeat(owner: string, ids: string[], leaseMs: number): Promise<string[]> {
    return attempts.heartbeat(this.#side, owner, ids, leaseMs);
  }

  /** Rides along with the next message to the store thread, like a claim. */
  started(items: StartedAttempt[]): Promise<void> {
    return attempts.started(this.#side, items);
  }

  progress(id: string, attempt: number, owner: string, progress: Progress): void {
    attempts.progress(this.#side, id, attempt, owner, progress);
  }

  finish(items: FinishItem[]): Promise<(Finished | null)[]> {
    return attempts.finish(this.#side, items);
  }

  release(items: { id: string; attempt: number; owner: string }[]): Promise<void> {
    return attempts.release(this.#side, items);
  }

  async cancel(id: string): Promise<Changes | InvalidState | null> {
    const { index } = this.#side;
    // Taken out of the index at once, so no claim hands it out while the cancel is on its way.
    const held = index.remove(id);
    let answer: Answers['cancel'];
    try {
      answer = await this.#thread.call({ op: 'cancel', id, now: this.#side.clock() });
    } catch (error) {
      if (held !== null && held.status === 'queued') {
        index.addQueued(id, held.type, held.priority, held.group, held.readyAt ?? 0, held);
      }
      throw error;
    }
    if (answer === null || 'invalidState' in answer) return answer;
    this.#side.running.delete(id);
    return applyChanges(this.#side, answer);
  }

  async retry(id: string): Promise<Changes | InvalidState | null> {
    const answer = await this.#thread.call({ op: 'retry', id, now: this.#side.clock() });
    if (answer === null || 'invalidState' in answer) return answer;
    return applyChanges(this.#side, answer);
  }

  async remove(id: string): Promise<'removed' | InvalidState | null> {
    const answer = await this.#thread.call({ op: 'remove', id });
    if (answer === null || 'invalidState' in answer) return answer;
    return 'removed';
  }

  setPaused(paused: boolean): Promise<void> {
    return this.#thread.call({ op: 'setPaused', paused }).then(() => undefined);
  }

  purge(status: 'completed' | 'failed' | 'cancelled', ageMs: number, limit: number): Promise<number> {
    return this.#thread.call({ op: 'purge', status, olderThan: this.#side.clock() - ageMs, limit });
  }

  // ── reads ─────────────────────────────────────────────────────────────────

  async get(id: string): Promise<Job | null> {
    const wire = await this.#thread.call({ op: 'get', id });
    if (wire === null) return null;
    const job = jobFromWire(wire);
    const running = this.#side.running.get(id);
    if (running !== undefined && job.status === 'running') job.progress = running.wire.progress;
    return job;
  }

  /** One read each, sent to the store thread together in one batch. */
  async getMany(ids: readonly string[]): Promise<Job[]> {
    const jobs = await Promise.all([...new Set(ids)].map((id) => this.get(id)));
    return jobs.filter((job) => job !== null);
  }

  list(filter: ListFilter): Promise<Page> {
    return this.#thread.call({ op: 'list', filter });
  }

  async counts(): Promise<QueueCounts> {
    const { counts, unstarted } = await this.#thread.call({ op: 'counts' });
    const seen = countsAsSeen({ ...counts, oldestQueuedReadyAt: this.#side.index.oldestQueuedReadyAt() }, unstarted);
    return { ...seen, exact: true };
  }

  paused(): Promise<boolean> {
    return this.#thread.call({ op: 'paused' });
  }

  async limitOverrides(kind: LimitKind = 'type'): Promise<Map<string, LimitOverride>> {
    return parseOverrides(await this.#thread.call({ op: 'settings', prefix: limitsPrefix(kind) }), kind);
  }

  setLimitOverride(key: string, override: LimitOverride | null, kind: LimitKind = 'type'): Promise<void> {
    return this.#thread
      .call({
        op: 'putSetting',
        key: limitsKey(kind, key),
        value: override === null ? null : JSON.stringify(override),
      })
      .then(() => undefined);
  }

  groupCounts(): Promise<GroupCount[]> {
    return this.#thread.call({ op: 'groupCounts' });
  }

  schedules(): Promise<Schedule[]> {
    return this.#thread.call({ op: 'schedules' });
  }

  getSchedule(name: string): Promise<Schedule | null> {
    return this.#thread.call({ op: 'getSchedule', name });
  }

  putSchedule(schedule: ScheduleDefinition): Promise<{ created: boolean; schedule: Schedule }> {
    return this.#thread.call({ op: 'putSchedule', schedule });
  }

  removeSchedule(name: string): Promise<boolean> {
    return this.#thread.call({ op: 'removeSchedule', name });
  }

  async fireSchedule(fire: ScheduleFire): Promise<FireResult> {
    const { job, ...rest } = fire;
    const row = job === null ? null : insertRowOf(job);
    const answer = await this.#thread.call({
      op: 'fireSchedule',
      fire: rest,
      row,
      now: this.#side.clock(),
      capacity: this.#side.capacity,
    });
    if (!answer.fired) return answer;
    const insert =
      answer.insert === null || job === null ? null : applyInsert(this.#side, [job], [row as InsertRow], answer.insert);
    return { fired: true, schedule: answer.schedule, overlap: answer.overlap, insert };
  }

  nextDueAt(): Promise<number | null> {
    return Promise.resolve(this.#side.index.nextDueAt());
  }

  expiredLeases(limit: number): Promise<ExpiredAttempt[]> {
    return this.#thread.call({ op: 'expired', now: this.#side.clock(), limit });
  }

  // ── callback deliveries ───────────────────────────────────────────────────

  async claimDeliveries(owner: string, leaseMs: number, limit: number): Promise<DueDelivery[]> {
    const now = this.#side.clock();
    const wires = await this.#thread.call({ op: 'claimDeliveries', owner, expiresAt: now + leaseMs, now, limit });
    return wires.map((wire) => dueDelivery(wire, wire.job === null ? null : jobFromWire(wire.job), wire.batch));
  }

  recordDeliveryAttempt(attempt: DeliveryAttempt): Promise<boolean> {
    return this.#thread.call({ op: 'recordDelivery', attempt, now: this.#side.clock() });
  }

  nextDeliveryAt(): Promise<number | null> {
    return this.#thread.call({ op: 'nextDelivery' });
  }

  batch(id: string): Promise<Batch | null> {
    return this.#thread.call({ op: 'batch', id });
  }

  async deliveries(jobId: string): Promise<DeliveryRecord[] | null> {
    const rows = await this.#thread.call({ op: 'deliveries', jobId });
    return rows === null ? null : deliveryRecords(rows);
  }

  close(): Promise<void> {
    return this.#thread.close();
  }
}
