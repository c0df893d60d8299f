/**
 * The SQLite job store: one process, one file, better-sqlite3 (synchronous).
 *
 * State machine (see jobs/model.ts for the meaning of each status):
 *
 *   insert  → queued | scheduled | waiting | failed (a dependency failed or was cancelled)
 *   waiting → queued | scheduled        when the last dependency completes
 *   scheduled, retrying → queued        when runAt is reached (promoted by claim, insert, retry)
 *   queued  → running                   claim, under a lease
 *   running → completed | failed | retrying   finish, recoverExpired, recovery at open
 *   non-terminal → cancelled            cancel; non-terminal → failed when a dependency fails
 *   failed, cancelled → queued | waiting   retry
 *
 * Every transition is a compare-and-set on the status (and the lease owner for a
 * running job), so an outcome from an attempt that lost its job changes nothing.
 *
 * Ready index. The file is the truth, but asking it "which job is next" on every claim
 * means a sorted index scan per claim. Instead the store keeps, in memory, one FIFO per
 * priority of queued jobs and a min-heap of runAt for scheduled and retrying jobs, so a
 * claim pops in O(1) and a due job is found in O(log n) without polling. Entries are
 * deleted lazily: a job that leaves `queued` (or its runAt) stays in its FIFO (or the
 * heap) and is skipped when it reaches the front, because the maps `#queuedAt` and
 * `#dueAt` say which entry is current. The counters (`counts()`) are kept exact on every
 * transition, because admission and metrics read them all the time. Index and counters
 * are rebuilt from the file at open and whenever a commit fails.
 *
 * Group commit. A commit with synchronous=FULL costs an fsync, far more than the
 * statements. So the first write of an event-loop turn opens a transaction, every
 * write of that turn runs inside it at once (the method knows its answer at once),
 * and one COMMIT at the end of the turn (setImmediate) makes the whole turn durable.
 * A write's promise resolves only after that COMMIT, so the HTTP layer answers 201
 * only for a durable job. Each write runs in a savepoint, so a write that throws
 * undoes only itself.
 */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { retryDelayMs } from '../jobs/backoff.js';
import {
  isTerminal,
  type Jitter,
  JOB_STATUSES,
  type Job,
  type JobError,
  type JobStatus,
  type JobSummary,
  MAX_PRIORITY,
  MIN_PRIORITY,
  type NewJob,
  type ParentResult,
  PRIORITY_LEVELS,
  type Progress,
} from '../jobs/model.js';
import { canonicalJson } from './canonical-json.js';
import { Deque } from './deque.js';
import { StoreError } from './errors.js';
import { MinHeap } from './min-heap.js';
import type {
  AttemptOutcome,
  Changes,
  ClaimedJob,
  InsertOutcome,
  InsertResult,
  InvalidState,
  JobStore,
  Lease,
  ListFilter,
  Page,
  QueueCounts,
  StoreOptions,
} from './store.js';

export interface SqliteStoreOptions extends StoreOptions {
  /**
   * `full` (default): a commit survives power loss (fsync per group commit);
   * `normal`: survives a process crash only, faster.
   */
  synchronous?: 'full' | 'normal';
}

/**
 * Numbered schema steps: a file at user_version n gets steps n+1.. applied at open, in one
 * exclusive transaction. Append a step to change the schema; never edit one that shipped.
 */
const SCHEMA_VERSION = 2;
/** Rows deleted per statement by purge, so one call never holds the event loop long. */
const PURGE_CHUNK = 1000;
/** Page cache per connection: the hot pages of jobs and its indexes stay in memory. */
const CACHE_KIB = 64 * 1024;
/** Dead index entries tolerated (beyond as many as live ones) before compaction. */
const COMPACT_SLACK = 1024;

const SCHEMA = `
CREATE TABLE jobs (
  id TEXT PRIMARY KEY NOT NULL,
  type TEXT NOT NULL,
  status TEXT NOT NULL,
  priority INTEGER NOT NULL,
  payload TEXT,
  result TEXT,
  error TEXT,
  attempts INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL,
  timeout_ms INTEGER NOT NULL,
  backoff_initial_ms INTEGER NOT NULL,
  backoff_factor REAL NOT NULL,
  backoff_max_ms INTEGER NOT NULL,
  backoff_jitter TEXT NOT NULL,
  progress TEXT,
  idempotency_key TEXT,
  depends_on TEXT NOT NULL,
  metadata TEXT NOT NULL,
  run_at INTEGER,
  created_at INTEGER NOT NULL,
  started_at INTEGER,
  finished_at INTEGER,
  ready_at INTEGER,
  lease_owner TEXT,
  lease_expires_at INTEGER
);
CREATE UNIQUE INDEX jobs_idempotency_key ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_status_id ON jobs (status, id);
CREATE INDEX jobs_type_id ON jobs (type, id);
CREATE INDEX jobs_status_finished_at ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE job_deps (
  child TEXT NOT NULL,
  parent TEXT NOT NULL,
  position INTEGER NOT NULL,
  PRIMARY KEY (child, position)
) WITHOUT ROWID;
CREATE INDEX job_deps_parent ON job_deps (parent, child);
`;

/** Step 2: settings that outlive a restart (whether dispatch is paused). */
const SETTINGS_TABLE = `CREATE TABLE settings (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;`;

const MIGRATIONS: readonly string[] = [SCHEMA, SETTINGS_TABLE];

interface JobRow {
  id: string;
  type: string;
  status: JobStatus;
  priority: number;
  payload: string | null;
  result: string | null;
  error: string | null;
  attempts: number;
  max_attempts: number;
  timeout_ms: number;
  backoff_initial_ms: number;
  backoff_factor: number;
  backoff_max_ms: number;
  backoff_jitter: Jitter;
  progress: string | null;
  idempotency_key: string | null;
  depends_on: string;
  metadata: string;
  run_at: number | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  ready_at: number | null;
  lease_owner: string | null;
  lease_expires_at: number | null;
}

type SummaryRow = Omit<JobRow, 'payload' | 'result'>;

/** Every column of a job row, in the order of `rowFromValues`. */
const JOB_COLUMNS =
  'id, type, status, priority, payload, result, error, attempts, max_attempts, timeout_ms, backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on, metadata, run_at, created_at, started_at, finished_at, ready_at, lease_owner, lease_expires_at';

/**
 * A row read in raw (array) mode. better-sqlite3 builds an object per row column by
 * column, which costs more than the UPDATE on the claim path; a literal is cheap.
 */
function rowFromValues(v: unknown[]): JobRow {
  return {
    id: v[0] as JobRow['id'],
    type: v[1] as JobRow['type'],
    status: v[2] as JobRow['status'],
    priority: v[3] as JobRow['priority'],
    payload: v[4] as JobRow['payload'],
    result: v[5] as JobRow['result'],
    error: v[6] as JobRow['error'],
    attempts: v[7] as JobRow['attempts'],
    max_attempts: v[8] as JobRow['max_attempts'],
    timeout_ms: v[9] as JobRow['timeout_ms'],
    backoff_initial_ms: v[10] as JobRow['backoff_initial_ms'],
    backoff_factor: v[11] as JobRow['backoff_factor'],
    backoff_max_ms: v[12] as JobRow['backoff_max_ms'],
    backoff_jitter: v[13] as JobRow['backoff_jitter'],
    progress: v[14] as JobRow['progress'],
    idempotency_key: v[15] as JobRow['idempotency_key'],
    depends_on: v[16] as JobRow['depends_on'],
    metadata: v[17] as JobRow['metadata'],
    run_at: v[18] as JobRow['run_at'],
    created_at: v[19] as JobRow['created_at'],
    started_at: v[20] as JobRow['started_at'],
    finished_at: v[21] as JobRow['finished_at'],
    ready_at: v[22] as JobRow['ready_at'],
    lease_owner: v[23] as JobRow['lease_owner'],
    lease_expires_at: v[24] as JobRow['lease_expires_at'],
  };
}

interface StateRow {
  status: JobStatus;
  priority: number;
  attempts: number;
  depends_on: string;
}

interface RunningRow {
  id: string;
  priority: number;
  attempts: number;
  max_attempts: number;
  backoff_initial_ms: number;
  backoff_factor: number;
  backoff_max_ms: number;
  backoff_jitter: Jitter;
}

interface ReadyEntry {
  id: string;
  type: string;
  readyAt: number;
}

interface DueEntry {
  runAt: number;
  id: string;
}

interface DueState {
  runAt: number;
  type: string;
  status: 'scheduled' | 'retrying';
  priority: number;
}

interface Waiter {
  resolve: () => void;
  reject: (error: unknown) => void;
}

interface OpenTransaction {
  waiters: Waiter[];
  /** A commit at the end of this turn is scheduled. */
  commitNow: boolean;
  /** A commit within COMMIT_LAG_MS is scheduled. */
  commitSoon: boolean;
}

/** How long a finish may wait for the commit that makes it durable (group commit). */
const COMMIT_LAG_MS = 10;

type Statement<R = unknown> = Database.Statement<unknown[], R>;

const SUMMARY_COLUMNS =
  'id, type, status, priority, error, attempts, max_attempts, timeout_ms, backoff_initial_ms, backoff_factor, ' +
  'backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on, metadata, run_at, created_at, started_at, ' +
  'finished_at, ready_at, lease_owner, lease_expires_at';

const CLEAR_LEASE = 'lease_owner = NULL, lease_expires_at = NULL';

export class SqliteStore implements JobStore {
  /** Jobs found `running` at open (interrupted by a crash) and made `retrying` or `failed`. */
  readonly recovered: number;

  readonly #db: Database.Database;
  readonly #path: string;
  readonly #capacity: number;
  readonly #random: () => number;
  readonly #s: ReturnType<typeof prepareStatements>;
  readonly #atomic: (fn: () => unknown) => unknown;

  #tx: OpenTransaction | null = null;
  #closed = false;

  readonly #fifos: Deque<ReadyEntry>[] = [];
  readonly #heap = new MinHeap<DueEntry>((a, b) => a.runAt < b.runAt || (a.runAt === b.runAt && a.id < b.id));
  /** Queued jobs → their current readyAt; a FIFO entry with another readyAt is dead. */
  readonly #queuedAt = new Map<string, number>();
  /** Scheduled and retrying jobs → their current runAt; a heap entry with another runAt is dead. */
  readonly #dueAt = new Map<string, DueState>();
  /**
   * Jobs this store claimed and that are still running, as claim read them: a
   * finish builds its answer from this copy instead of reading the row back, which
   * keeps the per-job hot path to one lean UPDATE.
   */
  readonly #runningJobs = new Map<string, Job>();
  /** The lease owner each cached running job was claimed under. */
  readonly #runningLease = new Map<string, string>();
  /** Ids that some job depends on: a finish of any other job skips the dependents query. */
  readonly #parentIds = new Set<string>();
  #byStatus = emptyByStatus();
  #queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
  #pending = 0;

  /**
   * Opens (creating if needed) the store at `path`, or a private in-memory database for
   * ':memory:'. Throws a StoreError `store_in_use` when another process holds the file.
   */
  static open(path: string, options: SqliteStoreOptions): SqliteStore {
    return new SqliteStore(path, options);
  }

  private constructor(path: string, options: SqliteStoreOptions) {
    this.#path = path;
    this.#capacity = options.capacity;
    this.#random = options.random ?? Math.random;
    const inMemory = path === ':memory:' || path === '';
    if (!inMemory) mkdirSync(dirname(resolve(path)), { recursive: true });
    // No busy wait: the only other holder of the file can be another Kiln process, and
    // it keeps its exclusive lock until it exits.
    const db = new Database(path, { timeout: 0 });
    try {
      if (!inMemory) {
        db.pragma('locking_mode = EXCLUSIVE');
        db.pragma('journal_mode = WAL');
      }
      db.pragma(`synchronous = ${options.synchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
      db.pragma(`cache_size = -${CACHE_KIB}`);
      db.pragma('temp_store = MEMORY');
      migrate(db, path);
      this.#db = db;
      this.#s = prepareStatements(db);
      this.#atomic = db.transaction((fn: () => unknown) => fn());
      for (let p = 0; p < PRIORITY_LEVELS; p++) this.#fifos.push(new Deque<ReadyEntry>(64));
      this.#rebuildIndex();
      // An exclusive transaction also takes the file lock now, not at the first write.
      this.recovered = db
        .transaction(() => {
          const rows = this.#s.selectRunning.all();
          return this.#recover(rows, Date.now(), 'the process stopped while the attempt was running').length;
        })
        .exclusive();
    } catch (error) {
      db.close();
      if (isBusy(error)) {
        throw new StoreError('store_in_use', `the database ${path} is in use by another Kiln process`, {
          cause: error,
        });
      }
      throw error;
    }
  }

  /** True while a group transaction is open (its writes are not durable yet). */
  get inTransaction(): boolean {
    return !this.#closed && this.#db.inTransaction;
  }

  get path(): string {
    return this.#path;
  }

  insert(jobs: NewJob[], now: number): Promise<InsertResult> {
    return this.#write(() => this.#insert(jobs, now));
  }

  // A claim resolves before its COMMIT: if the process dies before the commit, the
  // claim is lost and the job is still `queued` in the file, so it runs again, which
  // at-least-once delivery allows. Waiting would delay every dispatch by a commit.
  claim(
    limit: number,
    lease: Lease,
    now: number,
    accept?: (job: { id: string; type: string }) => boolean,
  ): Promise<ClaimedJob[]> {
    return this.#write(() => this.#claim(limit, lease, now, accept), 'lazy');
  }

  // Like claim: a lost heartbeat only shortens a lease, and a crash ends every lease anyway.
  heartbeat(ids: string[], lease: Lease): Promise<string[]> {
    if (ids.length === 0) return this.#read(() => []);
    return this.#write(() => {
      const lost: string[] = [];
      for (const id of ids) {
        if (this.#s.heartbeat.run(lease.expiresAt, id, lease.owner).changes === 0) lost.push(id);
      }
      return lost;
    }, 'lazy');
  }

  /**
   * Progress lives on the claimed copy in memory, not in the file: a handler may
   * report it many times a second, and it only matters while the attempt runs. Reads
   * overlay it; a completion writes the last report with the result.
   */
  progress(id: string, lease: Lease, progress: Progress): Promise<Job | null> {
    return this.#read(() => {
      const running = this.#runningJobs.get(id);
      if (running === undefined || running.status !== 'running') return null;
      if (this.#runningLease.get(id) !== lease.owner) return null;
      running.progress = progress;
      const { parents: _parents, ...job } = running as ClaimedJob;
      return { ...job };
    });
  }

  finish(id: string, lease: Lease, outcome: AttemptOutcome, now: number): Promise<Changes | null> {
    return this.#write(() => this.#finish(id, lease, outcome, now), 'soon');
  }

  cancel(id: string, now: number): Promise<Changes | InvalidState | null> {
    return this.#write(() => this.#cancel(id, now));
  }

  retry(id: string, now: number): Promise<Changes | InvalidState | null> {
    return this.#write(() => this.#retry(id, now));
  }

  remove(id: string): Promise<'removed' | InvalidState | null> {
    return this.#write(() => this.#remove(id));
  }

  get(id: string): Promise<Job | null> {
    return this.#read(() => {
      const row = this.#s.selectJob.get(id);
      if (row === undefined) return null;
      const job = toJob(row);
      const running = this.#runningJobs.get(id);
      if (running !== undefined && job.status === 'running') job.progress = running.progress;
      return job;
    });
  }

  list(filter: ListFilter): Promise<Page> {
    return this.#read(() => this.#list(filter));
  }

  counts(): Promise<QueueCounts> {
    return this.#read(() => ({
      byStatus: { ...this.#byStatus },
      queuedByPriority: [...this.#queuedByPriority],
      pending: this.#pending,
      oldestQueuedReadyAt: this.#oldestQueuedReadyAt(),
    }));
  }

  nextDueAt(): Promise<number | null> {
    return this.#read(() => {
      for (;;) {
        const top = this.#heap.peek();
        if (top === undefined) return null;
        if (this.#dueAt.get(top.id)?.runAt === top.runAt) return top.runAt;
        this.#heap.pop();
      }
    });
  }

  paused(): Promise<boolean> {
    return this.#read(() => this.#s.selectSetting.get('paused') === 'true');
  }

  setPaused(paused: boolean): Promise<void> {
    return this.#write(() => {
      this.#s.upsertSetting.run('paused', String(paused));
    });
  }

  recoverExpired(now: number): Promise<Job[]> {
    return this.#write(() =>
      this.#recover(this.#s.selectExpired.all(now), now, 'the lease expired before the attempt finished'),
    );
  }

  async purge(olderThan: number, statuses: JobStatus[]): Promise<number> {
    let total = 0;
    for (const status of new Set(statuses)) {
      if (!isTerminal(status)) continue;
      for (;;) {
        // One chunk per transaction: awaiting its commit yields the event loop between chunks.
        const deleted = await this.#write(() => {
          const ids = this.#s.purgeChunk.all(status, olderThan, PURGE_CHUNK);
          for (const id of ids) this.#s.deleteDeps.run(id);
          this.#byStatus[status] -= ids.length;
          return ids.length;
        });
        total += deleted;
        if (deleted < PURGE_CHUNK) break;
      }
    }
    return total;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    const tx = this.#tx;
    if (tx !== null) this.#commit(tx);
    this.#closed = true;
    this.#db.close();
  }

  // ---- group commit ----

  #read<T>(fn: () => T): Promise<T> {
    if (this.#closed) return Promise.reject(closedError());
    try {
      return Promise.resolve(fn());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Runs `fn` in the open group transaction. `urgency` says when that transaction must
   * commit: `now` at the end of this event-loop turn (a client waits for it: inserts,
   * cancels), `soon` within COMMIT_LAG_MS (finishes: a burst of them shares one fsync),
   * `lazy` with whatever commits next (claims, heartbeats: their promise does not wait).
   */
  #write<T>(fn: () => T, urgency: 'now' | 'soon' | 'lazy' = 'now'): Promise<T> {
    if (this.#closed) return Promise.reject(closedError());
    let tx = this.#tx;
    if (tx === null) {
      this.#s.begin.run();
      const opened: OpenTransaction = { waiters: [], commitNow: false, commitSoon: false };
      this.#tx = tx = opened;
    }
    this.#scheduleCommit(tx, urgency);
    let value: T;
    try {
      value = this.#atomic(fn) as T;
    } catch (error) {
      if (!this.#db.inTransaction) {
        // SQLite rolled the whole transaction back (e.g. disk full): every write of the turn is lost.
        this.#tx = null;
        this.#rebuildIndex();
        for (const waiter of tx.waiters) waiter.reject(error);
      } else {
        this.#rebuildIndex();
      }
      return Promise.reject(error);
    }
    if (urgency === 'lazy') return Promise.resolve(value);
    const waiters = tx.waiters;
    return new Promise<T>((resolve, reject) => {
      waiters.push({ resolve: () => resolve(value), reject });
    });
  }

  #scheduleCommit(tx: OpenTransaction, urgency: 'now' | 'soon' | 'lazy'): void {
    const commit = () => {
      if (this.#tx === tx) this.#commit(tx);
    };
    if (urgency === 'now' && !tx.commitNow) {
      tx.commitNow = true;
      setImmediate(commit);
    } else if (!tx.commitSoon && !tx.commitNow) {
      // Lazy writes still commit within the lag, so a quiet server holds no open transaction.
      tx.commitSoon = true;
      setTimeout(commit, COMMIT_LAG_MS);
    }
  }

  #commit(tx: OpenTransaction): void {
    this.#tx = null;
    try {
      this.#s.commit.run();
    } catch (error) {
      if (this.#db.inTransaction) {
        try {
          this.#s.rollback.run();
        } catch {
          // The connection already rolled back; the rebuild below reads what the file holds.
        }
      }
      this.#rebuildIndex();
      for (const waiter of tx.waiters) waiter.reject(error);
      return;
    }
    for (const waiter of tx.waiters) waiter.resolve();
  }

  // ---- transitions ----

  #insert(jobs: NewJob[], now: number): InsertResult {
    this.#promoteDue(now);
    const outcomes: InsertOutcome[] = [];
    const created: Job[] = [];
    /** Status of each job created earlier in this batch. */
    const batchStatus = new Map<string, JobStatus>();
    /** A replayed item's new id → the id of the job it replays, for later items' dependsOn. */
    const alias = new Map<string, string>();
    const batchKeys = new Map<string, { type: string; payload: string; job: Job }>();
    let newPending = 0;

    for (let index = 0; index < jobs.length; index++) {
      const item = jobs[index] as NewJob;
      const key = item.idempotencyKey;
      let canonicalPayload: string | null = null;
      if (key !== null) {
        canonicalPayload = canonicalJson(item.payload);
        const earlier = batchKeys.get(key);
        if (earlier !== undefined) {
          if (earlier.type !== item.type || earlier.payload !== canonicalPayload) {
            return { ok: false, reason: 'idempotency_conflict', index, existingId: earlier.job.id };
          }
          alias.set(item.id, earlier.job.id);
          outcomes.push({ created: false, job: earlier.job });
          continue;
        }
        const existing = this.#s.selectByKey.get(key);
        if (existing !== undefined) {
          if (existing.type !== item.type || canonicalJson(parseJson(existing.payload)) !== canonicalPayload) {
            return { ok: false, reason: 'idempotency_conflict', index, existingId: existing.id };
          }
          alias.set(item.id, existing.id);
          outcomes.push({ created: false, job: toJob(existing) });
          continue;
        }
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

      const job: Job = {
        id: item.id,
        type: item.type,
        status,
        priority: item.priority,
        payload: item.payload ?? null,
        result: null,
        error:
          failedParent === null
            ? null
            : {
                code: 'dependency_failed',
                message: dependencyMessage(failedParent.id, failedParent.status),
                attempt: 0,
              },
        attempts: 0,
        maxAttempts: item.maxAttempts,
        timeoutMs: item.timeoutMs,
        backoff: { ...item.backoff },
        progress: null,
        idempotencyKey: key,
        dependsOn,
        metadata: item.metadata,
        runAt: status === 'scheduled' || status === 'waiting' ? item.runAt : null,
        createdAt: item.createdAt,
        startedAt: null,
        finishedAt: status === 'failed' ? now : null,
        readyAt: status === 'queued' ? now : null,
      };
      if (status !== 'failed') newPending++;
      batchStatus.set(job.id, status);
      if (key !== null && canonicalPayload !== null)
        batchKeys.set(key, { type: item.type, payload: canonicalPayload, job });
      created.push(job);
      outcomes.push({ created: true, job });
    }

    if (newPending > 0 && this.#pending + newPending > this.#capacity) {
      return { ok: false, reason: 'queue_full', pending: this.#pending, capacity: this.#capacity };
    }

    for (const job of created) {
      this.#s.insertJob.run(
        job.id,
        job.type,
        job.status,
        job.priority,
        jsonOrNull(job.payload),
        job.error === null ? null : JSON.stringify(job.error),
        job.maxAttempts,
        job.timeoutMs,
        job.backoff.initialMs,
        job.backoff.factor,
        job.backoff.maxMs,
        job.backoff.jitter,
        job.idempotencyKey,
        JSON.stringify(job.dependsOn),
        JSON.stringify(job.metadata ?? {}),
        job.runAt,
        job.createdAt,
        job.finishedAt,
        job.readyAt,
      );
      for (let position = 0; position < job.dependsOn.length; position++) {
        this.#s.insertDep.run(job.id, job.dependsOn[position], position);
        this.#parentIds.add(job.dependsOn[position] as string);
      }
    }
    for (const job of created) this.#track(job.id, job.type, job.priority, null, job.status, job.readyAt, job.runAt);
    return { ok: true, outcomes };
  }

  #claim(
    limit: number,
    lease: Lease,
    now: number,
    accept?: (job: { id: string; type: string }) => boolean,
  ): ClaimedJob[] {
    this.#promoteDue(now);
    const claimed: ClaimedJob[] = [];
    for (let priority = MAX_PRIORITY; priority >= MIN_PRIORITY && claimed.length < limit; priority--) {
      const fifo = this.#fifos[priority] as Deque<ReadyEntry>;
      while (claimed.length < limit) {
        const entry = fifo.peek();
        if (entry === undefined) break;
        if (this.#queuedAt.get(entry.id) !== entry.readyAt) {
          fifo.shift();
          continue;
        }
        // The best ready job does not fit: stop rather than skip it, so order holds.
        if (accept !== undefined && !accept(entry)) return claimed;
        fifo.shift();
        const changed = this.#s.claim.run(now, lease.owner, lease.expiresAt, entry.id).changes;
        const values = changed === 1 ? this.#s.selectJobValues.get(entry.id) : undefined;
        const row = values === undefined ? undefined : rowFromValues(values);
        if (row === undefined) {
          // The file disagrees with the index; trust the file.
          this.#rebuildIndex();
          continue;
        }
        this.#track(row.id, row.type, row.priority, 'queued', 'running', null, null);
        const job = toJob(row) as ClaimedJob;
        job.parents = this.#parents(job.dependsOn);
        this.#runningJobs.set(job.id, job);
        this.#runningLease.set(job.id, lease.owner);
        claimed.push(job);
      }
    }
    return claimed;
  }

  #parents(dependsOn: string[]): ParentResult[] {
    if (dependsOn.length === 0) return [];
    return dependsOn.map((id) => {
      const row = this.#s.selectParent.get(id);
      // A parent removed since it completed: its result is gone.
      return row === undefined ? { id, type: '', result: null } : { id, type: row.type, result: parseJson(row.result) };
    });
  }

  #finish(id: string, lease: Lease, outcome: AttemptOutcome, now: number): Changes | null {
    if (outcome.kind === 'completed') {
      const running = this.#runningJobs.get(id);
      if (running !== undefined) {
        const progress = running.progress === null ? null : JSON.stringify(running.progress);
        if (this.#s.completeLean.run(jsonOrNull(outcome.result), progress, now, id, lease.owner).changes === 0) {
          return null;
        }
        this.#track(id, running.type, running.priority, 'running', 'completed', null, null);
        const { parents: _parents, ...rest } = running as ClaimedJob;
        const job: Job = { ...rest, status: 'completed', result: outcome.result ?? null, finishedAt: now, runAt: null };
        return { job, others: this.#releaseDependents(id, now) };
      }
      const row = this.#s.complete.get(jsonOrNull(outcome.result), now, id, lease.owner);
      if (row === undefined) return null;
      this.#track(id, row.type, row.priority, 'running', 'completed', null, null);
      return { job: toJob(row), others: this.#releaseDependents(id, now) };
    }
    const error = JSON.stringify(outcome.error);
    if (outcome.kind === 'failed' && outcome.retryAt === null) {
      const row = this.#s.failRunning.get(error, now, id, lease.owner);
      if (row === undefined) return null;
      this.#track(id, row.type, row.priority, 'running', 'failed', null, null);
      return { job: toJob(row), others: this.#failDependents(id, 'failed', now) };
    }
    const retryAt = outcome.retryAt as number;
    const refund = outcome.kind === 'released' ? 1 : 0;
    const row = this.#s.retryRunning.get(error, retryAt, refund, id, lease.owner);
    if (row === undefined) return null;
    this.#track(id, row.type, row.priority, 'running', 'retrying', null, retryAt);
    return { job: toJob(row), others: [] };
  }

  /** Waiting children of `parentId` whose parents are now all completed become ready. */
  #releaseDependents(parentId: string, now: number): Job[] {
    const released: Job[] = [];
    if (!this.#parentIds.has(parentId)) return released;
    for (const child of this.#s.waitingChildren.all(parentId)) {
      if (this.#s.unfinishedParent.get(child.id) !== undefined) continue;
      const scheduled = child.run_at !== null && child.run_at > now;
      const row = scheduled
        ? this.#s.release.get('scheduled', null, child.run_at, child.id)
        : this.#s.release.get('queued', now, null, child.id);
      if (row === undefined) continue;
      this.#track(row.id, row.type, row.priority, 'waiting', row.status, row.ready_at, row.run_at);
      released.push(toJob(row));
    }
    return released;
  }

  /** Every non-terminal job depending on `rootId`, transitively, fails with dependency_failed. */
  #failDependents(rootId: string, rootStatus: 'failed' | 'cancelled', now: number): Job[] {
    const failed: Job[] = [];
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
        this.#track(row.id, row.type, row.priority, child.status, 'failed', null, null);
        failed.push(toJob(row));
        parents.push({ id: row.id, status: 'failed' });
      }
    }
    return failed;
  }

  #cancel(id: string, now: number): Changes | InvalidState | null {
    const state = this.#s.selectState.get(id);
    if (state === undefined) return null;
    if (isTerminal(state.status)) {
      return invalidState(state.status, `job is ${state.status}; only a job that is not finished can be cancelled`);
    }
    const error: JobError = { code: 'cancelled', message: 'cancelled by request', attempt: state.attempts };
    const row = this.#s.cancel.get(JSON.stringify(error), now, id, state.status);
    if (row === undefined) return null;
    this.#track(id, row.type, row.priority, state.status, 'cancelled', null, null);
    return { job: toJob(row), others: this.#failDependents(id, 'cancelled', now) };
  }

  #retry(id: string, now: number): Changes | InvalidState | null {
    const state = this.#s.selectState.get(id);
    if (state === undefined) return null;
    if (state.status !== 'failed' && state.status !== 'cancelled') {
      return invalidState(state.status, `job is ${state.status}; only a failed or cancelled job can be retried`);
    }
    let waiting = false;
    for (const parent of parseDependsOn(state.depends_on)) {
      const status = this.#s.selectStatus.get(parent);
      if (status === undefined) {
        return invalidState(state.status, `dependency ${parent} no longer exists, so the job cannot be retried`);
      }
      if (status === 'failed' || status === 'cancelled') {
        return invalidState(
          state.status,
          `dependency ${parent} is ${status}; retry it first, then this job (it would otherwise wait forever)`,
        );
      }
      if (status !== 'completed') waiting = true;
    }
    this.#promoteDue(now);
    const row = waiting
      ? this.#s.retry.get('waiting', null, id, state.status)
      : this.#s.retry.get('queued', now, id, state.status);
    if (row === undefined) return null;
    this.#track(id, row.type, row.priority, state.status, row.status, row.ready_at, null);
    return { job: toJob(row), others: [] };
  }

  #remove(id: string): 'removed' | InvalidState | null {
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
    this.#track(id, '', state.priority, state.status, null, null, null);
    return 'removed';
  }

  /** Running jobs whose attempt was cut short become `retrying` (interrupted) or `failed`. */
  #recover(rows: RunningRow[], now: number, message: string): Job[] {
    const changed: Job[] = [];
    for (const running of rows) {
      const error = JSON.stringify({ code: 'interrupted', message, attempt: running.attempts } satisfies JobError);
      if (running.attempts >= running.max_attempts) {
        const row = this.#s.failFrom.get(error, now, running.id, 'running');
        if (row === undefined) continue;
        this.#track(row.id, row.type, row.priority, 'running', 'failed', null, null);
        changed.push(toJob(row), ...this.#failDependents(row.id, 'failed', now));
      } else {
        const backoff = {
          initialMs: running.backoff_initial_ms,
          factor: running.backoff_factor,
          maxMs: running.backoff_max_ms,
          jitter: running.backoff_jitter,
        };
        const runAt = now + retryDelayMs(backoff, running.attempts, this.#random);
        const row = this.#s.interrupt.get(error, runAt, running.id);
        if (row === undefined) continue;
        this.#track(row.id, row.type, row.priority, 'running', 'retrying', null, runAt);
        changed.push(toJob(row));
      }
    }
    return changed;
  }

  // ---- ready index and counters ----

  /** Due scheduled/retrying jobs become queued, in runAt order. Runs inside a write. */
  #promoteDue(now: number): void {
    for (;;) {
      const top = this.#heap.peek();
      if (top === undefined || top.runAt > now) return;
      this.#heap.pop();
      const due = this.#dueAt.get(top.id);
      if (due === undefined || due.runAt !== top.runAt) continue;
      if (this.#s.promote.run(now, top.id, top.runAt).changes === 1) {
        this.#track(top.id, due.type, due.priority, due.status, 'queued', now, null);
      } else {
        this.#dueAt.delete(top.id);
      }
    }
  }

  /**
   * Records one job's move from `from` to `to` (null: absent) in the counters and the
   * ready index. `readyAt` matters when `to` is queued, `runAt` when it is scheduled or retrying.
   */
  #track(
    id: string,
    type: string,
    priority: number,
    from: JobStatus | null,
    to: JobStatus | null,
    readyAt: number | null,
    runAt: number | null,
  ): void {
    if (from !== null) {
      this.#byStatus[from]--;
      if (isPending(from)) this.#pending--;
      if (from === 'running') {
        this.#runningJobs.delete(id);
        this.#runningLease.delete(id);
      } else if (from === 'queued') {
        this.#queuedByPriority[priority] = (this.#queuedByPriority[priority] ?? 0) - 1;
        this.#queuedAt.delete(id);
        this.#compactFifos();
      } else if (from === 'scheduled' || from === 'retrying') {
        this.#dueAt.delete(id);
        if (this.#heap.size > 2 * this.#dueAt.size + COMPACT_SLACK) {
          this.#heap.retain((entry) => this.#dueAt.get(entry.id)?.runAt === entry.runAt);
        }
      }
    }
    if (to !== null) {
      this.#byStatus[to]++;
      if (isPending(to)) this.#pending++;
      if (to === 'queued') {
        const at = readyAt as number;
        this.#queuedByPriority[priority] = (this.#queuedByPriority[priority] ?? 0) + 1;
        this.#queuedAt.set(id, at);
        this.#fifos[priority]?.push({ id, type, readyAt: at });
      } else if (to === 'scheduled' || to === 'retrying') {
        const at = runAt as number;
        this.#dueAt.set(id, { runAt: at, type, status: to, priority });
        this.#heap.push({ runAt: at, id });
      }
    }
  }

  #compactFifos(): void {
    let entries = 0;
    for (const fifo of this.#fifos) entries += fifo.size;
    if (entries <= 2 * this.#queuedAt.size + COMPACT_SLACK) return;
    for (const fifo of this.#fifos) fifo.retain((entry) => this.#queuedAt.get(entry.id) === entry.readyAt);
  }

  #oldestQueuedReadyAt(): number | null {
    let oldest: number | null = null;
    for (const fifo of this.#fifos) {
      for (;;) {
        const head = fifo.peek();
        if (head === undefined) break;
        if (this.#queuedAt.get(head.id) === head.readyAt) {
          if (oldest === null || head.readyAt < oldest) oldest = head.readyAt;
          break;
        }
        fifo.shift();
      }
    }
    return oldest;
  }

  #rebuildIndex(): void {
    this.#byStatus = emptyByStatus();
    this.#queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
    this.#pending = 0;
    for (const fifo of this.#fifos) fifo.clear();
    this.#heap.clear();
    this.#queuedAt.clear();
    this.#dueAt.clear();
    this.#runningJobs.clear();
    this.#runningLease.clear();
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
    for (const row of this.#s.selectQueued.all()) {
      const readyAt = row.ready_at ?? 0;
      this.#queuedAt.set(row.id, readyAt);
      this.#fifos[row.priority]?.push({ id: row.id, type: row.type, readyAt });
    }
    for (const row of this.#s.selectDelayed.all()) {
      const runAt = row.run_at ?? 0;
      this.#dueAt.set(row.id, { runAt, type: row.type, status: row.status, priority: row.priority });
      this.#heap.push({ runAt, id: row.id });
    }
  }

  // ---- list ----

  #list(filter: ListFilter): Page {
    const limit = Math.floor(filter.limit);
    if (!(limit > 0)) return { jobs: [], nextCursor: null };
    const before = filter.cursor === undefined ? null : decodeCursor(filter.cursor);
    const type = filter.type ?? null;
    const fetch = limit + 1;
    const statuses = filter.statuses !== undefined && filter.statuses.length > 0 ? [...new Set(filter.statuses)] : null;
    const l = this.#s.list;
    let rows: SummaryRow[];
    if (statuses === null) {
      if (type === null) rows = before === null ? l.all.all(fetch) : l.allBefore.all(before, fetch);
      else rows = before === null ? l.type.all(type, fetch) : l.typeBefore.all(type, before, fetch);
    } else {
      // One index range per status, newest first, merged: an IN list would make SQLite sort.
      rows = [];
      for (const status of statuses) {
        if (type === null) {
          rows.push(...(before === null ? l.status.all(status, fetch) : l.statusBefore.all(status, before, fetch)));
        } else {
          rows.push(
            ...(before === null
              ? l.statusType.all(status, type, fetch)
              : l.statusTypeBefore.all(status, type, before, fetch)),
          );
        }
      }
      if (statuses.length > 1) rows.sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
    }
    const page = rows.length > limit ? rows.slice(0, limit) : rows;
    const last = page[page.length - 1];
    return {
      jobs: page.map(toSummary),
      nextCursor: rows.length > limit && last !== undefined ? Buffer.from(last.id, 'utf8').toString('base64url') : null,
    };
  }
}

function prepareStatements(db: Database.Database) {
  const prepare = <R = unknown>(sql: string): Statement<R> => db.prepare<unknown[], R>(sql);
  const listQuery = (where: string) =>
    prepare<SummaryRow>(`SELECT ${SUMMARY_COLUMNS} FROM jobs ${where} ORDER BY id DESC LIMIT ?`);
  return {
    begin: prepare('BEGIN IMMEDIATE'),
    commit: prepare('COMMIT'),
    rollback: prepare('ROLLBACK'),
    insertJob: prepare(
      `INSERT INTO jobs (id, type, status, priority, payload, result, error, attempts, max_attempts, timeout_ms,
        backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on,
        metadata, run_at, created_at, started_at, finished_at, ready_at, lease_owner, lease_expires_at)
       VALUES (?, ?, ?, ?, ?, NULL, ?, 0, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, NULL, ?, ?, NULL, NULL)`,
    ),
    insertDep: prepare('INSERT INTO job_deps (child, parent, position) VALUES (?, ?, ?)'),
    selectParentIds: prepare<string>('SELECT DISTINCT parent FROM job_deps').pluck(),
    selectSetting: prepare<string>('SELECT value FROM settings WHERE key = ?').pluck(),
    upsertSetting: prepare(
      'INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
    ),
    selectJob: prepare<JobRow>('SELECT * FROM jobs WHERE id = ?'),
    selectJobValues: db.prepare<unknown[], unknown[]>(`SELECT ${JOB_COLUMNS} FROM jobs WHERE id = ?`).raw(),
    selectByKey: prepare<JobRow>('SELECT * FROM jobs WHERE idempotency_key = ?'),
    selectStatus: prepare<JobStatus>('SELECT status FROM jobs WHERE id = ?').pluck(),
    selectState: prepare<StateRow>('SELECT status, priority, attempts, depends_on FROM jobs WHERE id = ?'),
    selectParent: prepare<{ type: string; result: string | null }>('SELECT type, result FROM jobs WHERE id = ?'),
    promote: prepare(
      `UPDATE jobs SET status = 'queued', ready_at = ?, run_at = NULL
       WHERE id = ? AND status IN ('scheduled', 'retrying') AND run_at = ?`,
    ),
    claim: prepare(
      `UPDATE jobs SET status = 'running', attempts = attempts + 1, started_at = ?, lease_owner = ?,
         lease_expires_at = ?, progress = NULL, run_at = NULL
       WHERE id = ? AND status = 'queued'`,
    ),
    heartbeat: prepare(`UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND status = 'running' AND lease_owner = ?`),
    complete: prepare<JobRow>(
      `UPDATE jobs SET status = 'completed', result = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = 'running' AND lease_owner = ? RETURNING *`,
    ),
    completeLean: prepare(
      `UPDATE jobs SET status = 'completed', result = ?, progress = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = 'running' AND lease_owner = ?`,
    ),
    failRunning: prepare<JobRow>(
      `UPDATE jobs SET status = 'failed', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = 'running' AND lease_owner = ? RETURNING *`,
    ),
    retryRunning: prepare<JobRow>(
      `UPDATE jobs SET status = 'retrying', error = ?, run_at = ?, attempts = MAX(attempts - ?, 0), ${CLEAR_LEASE}
       WHERE id = ? AND status = 'running' AND lease_owner = ? RETURNING *`,
    ),
    interrupt: prepare<JobRow>(
      `UPDATE jobs SET status = 'retrying', error = ?, run_at = ?, ${CLEAR_LEASE}
       WHERE id = ? AND status = 'running' RETURNING *`,
    ),
    failFrom: prepare<JobRow>(
      `UPDATE jobs SET status = 'failed', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
    cancel: prepare<JobRow>(
      `UPDATE jobs SET status = 'cancelled', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
    retry: prepare<JobRow>(
      `UPDATE jobs SET status = ?, ready_at = ?, attempts = 0, finished_at = NULL, result = NULL, progress = NULL,
         run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
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
    deleteJob: prepare('DELETE FROM jobs WHERE id = ?'),
    deleteDeps: prepare('DELETE FROM job_deps WHERE child = ?'),
    purgeChunk: prepare<string>(
      `DELETE FROM jobs WHERE id IN
         (SELECT id FROM jobs WHERE status = ? AND finished_at < ? LIMIT ?) RETURNING id`,
    ).pluck(),
    selectRunning: prepare<RunningRow>(
      `SELECT id, priority, attempts, max_attempts, backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter
       FROM jobs WHERE status = 'running'`,
    ),
    selectExpired: prepare<RunningRow>(
      `SELECT id, priority, attempts, max_attempts, backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter
       FROM jobs WHERE status = 'running' AND lease_expires_at < ?`,
    ),
    countByStatus: prepare<{ status: JobStatus; priority: number; n: number }>(
      'SELECT status, priority, COUNT(*) AS n FROM jobs GROUP BY status, priority',
    ),
    selectQueued: prepare<{ id: string; type: string; priority: number; ready_at: number | null }>(
      `SELECT id, type, priority, ready_at FROM jobs WHERE status = 'queued' ORDER BY ready_at, id`,
    ),
    selectDelayed: prepare<{
      id: string;
      type: string;
      status: 'scheduled' | 'retrying';
      priority: number;
      run_at: number | null;
    }>(`SELECT id, type, status, priority, run_at FROM jobs WHERE status IN ('scheduled', 'retrying')`),
    list: {
      all: listQuery(''),
      allBefore: listQuery('WHERE id < ?'),
      type: listQuery('WHERE type = ?'),
      typeBefore: listQuery('WHERE type = ? AND id < ?'),
      status: listQuery('WHERE status = ?'),
      statusBefore: listQuery('WHERE status = ? AND id < ?'),
      statusType: listQuery('WHERE status = ? AND type = ?'),
      statusTypeBefore: listQuery('WHERE status = ? AND type = ? AND id < ?'),
    },
  };
}

function migrate(db: Database.Database, path: string): void {
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version === SCHEMA_VERSION) return;
  if (version > SCHEMA_VERSION) {
    throw new StoreError(
      'unsupported_schema',
      `the database ${path} has schema version ${version}; this Kiln knows versions up to ${SCHEMA_VERSION}`,
    );
  }
  db.transaction(() => {
    for (let step = version + 1; step <= SCHEMA_VERSION; step++) db.exec(MIGRATIONS[step - 1] as string);
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).exclusive();
}

function toJob(row: JobRow): Job {
  const job = toSummary(row) as Job;
  job.payload = parseJson(row.payload);
  job.result = parseJson(row.result);
  return job;
}

function toSummary(row: SummaryRow): JobSummary {
  return {
    id: row.id,
    type: row.type,
    status: row.status,
    priority: row.priority,
    error: row.error === null ? null : (JSON.parse(row.error) as JobError),
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    timeoutMs: row.timeout_ms,
    backoff: {
      initialMs: row.backoff_initial_ms,
      factor: row.backoff_factor,
      maxMs: row.backoff_max_ms,
      jitter: row.backoff_jitter,
    },
    progress: row.progress === null ? null : (JSON.parse(row.progress) as Progress),
    idempotencyKey: row.idempotency_key,
    dependsOn: parseDependsOn(row.depends_on),
    metadata: row.metadata === '{}' ? {} : (JSON.parse(row.metadata) as Record<string, unknown>),
    runAt: row.run_at,
    createdAt: row.created_at,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    readyAt: row.ready_at,
  };
}

function parseDependsOn(text: string): string[] {
  return text === '[]' ? [] : (JSON.parse(text) as string[]);
}

function parseJson(text: string | null): unknown {
  return text === null ? null : JSON.parse(text);
}

function jsonOrNull(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  return JSON.stringify(value) ?? null;
}

function decodeCursor(cursor: string): string {
  const id = Buffer.from(cursor, 'base64url').toString('utf8');
  if (id.length === 0 || Buffer.from(id, 'utf8').toString('base64url') !== cursor) {
    throw new StoreError('invalid_cursor', `cursor must be a value from a previous page's nextCursor, got "${cursor}"`);
  }
  return id;
}

function dependencyMessage(parentId: string, status: JobStatus): string {
  return status === 'cancelled' ? `dependency ${parentId} was cancelled` : `dependency ${parentId} failed`;
}

function invalidState(status: JobStatus, message: string): InvalidState {
  return { invalidState: true, status, message };
}

function isPending(status: JobStatus): boolean {
  return status === 'waiting' || status === 'scheduled' || status === 'queued' || status === 'retrying';
}

function emptyByStatus(): Record<JobStatus, number> {
  const counts = {} as Record<JobStatus, number>;
  for (const status of JOB_STATUSES) counts[status] = 0;
  return counts;
}

function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}

function closedError(): StoreError {
  return new StoreError('store_closed', 'the job store is closed');
}
