/**
 * The PostgreSQL job store: any number of Kiln servers share one database and behave as
 * one service (docs/postgres-store.md).
 *
 * Every decision that involves time is made in SQL against the database's clock; this
 * process only estimates that clock (`now()`) to turn instants into durations. This class
 * wires the facets together and delegates to them; each facet keeps its statements next
 * to the code that runs them:
 *
 *   connection.ts   pool, statements, transactions, availability
 *   notify.ts       listeners here, NOTIFY/LISTEN with the other servers
 *   due.ts          promotion of due jobs, the next due time
 *   insert.ts       inserts (the plan is core/insert-plan.ts)
 *   claim.ts        every way a job is claimed
 *   lease.ts        heartbeats, clock skew, handlers' starts, expired leases
 *   progress.ts     progress reports
 *   finish.ts       the finish group commit
 *   job-actions.ts  release, cancel, retry, remove, purge
 *   reads.ts        get, list, counts
 *   settings.ts     pause, task limit overrides
 *   schedules.ts    schedules and their ticks
 *   deliveries.ts   callback deliveries
 *   nodes.ts        the servers of the cluster
 *   upkeep.ts       ANALYZE/VACUUM of the jobs table, folding of counters
 */
import type { Batch, NewBatch } from '../../contract/batch.js';
import type {
  Changes,
  ClaimedJob,
  ClaimRequest,
  ClusterFacet,
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
  SubscribeOptions,
} from '../store.js';
import type { DeliveryRecord } from '../../contract/delivery.js';
import type { Job, NewJob, Progress } from '../../contract/job.js';
import type { JobRow } from '../core/rows.js';
import type { LimitKind, LimitOverride } from '../../contract/limits.js';
import type { NodeInfo } from '../../contract/node.js';
import type { PostgresStoreOptions, Running, StoreContext } from './context.js';
import type { QueueCounts } from '../../contract/queue.js';
import type { Schedule } from '../../contract/schedule.js';
import type { ScheduleDefinition } from '../../contract/schedule.js';
import { DueJobs } from './due.js';
import { PgClaim } from './claim.js';
import { PgConnection } from './connection.js';
import { PgDeliveries } from './deliveries.js';
import { PgFinish } from './finish.js';
import { PgInsert } from './insert.js';
import { PgJobActions } from './job-actions.js';
import { PgLease } from './lease.js';
import { PgNodes } from './nodes.js';
import { PgProgress } from './progress.js';
import { PgReads } from './reads.js';
import { PgSchedules } from './schedules.js';
import { PgSettings } from './settings.js';
import { PgUpkeep } from './upkeep.js';
import { StoreNews } from './notify.js';
import { migrate } from './migrate.js';
import { sharedStatements } from './sql.js';

export type { PostgresStoreOptions } from './context.js';

export class PostgresStore implements JobStore {
  /** Shared by every server on the schema: it lists them (`nodes`). */
  readonly cluster: ClusterFacet = this;
  readonly #options: PostgresStoreOptions;
  readonly #db: PgConnection;
  readonly #news: StoreNews;
  readonly #due: DueJobs;
  readonly #running = new Map<string, Running>();
  readonly #inserts: PgInsert;
  readonly #claims: PgClaim;
  readonly #lease: PgLease;
  readonly #progress: PgProgress;
  readonly #finishes: PgFinish;
  readonly #actions: PgJobActions;
  readonly #reads: PgReads;
  readonly #settings: PgSettings;
  readonly #schedules: PgSchedules;
  readonly #deliveries: PgDeliveries;
  readonly #nodes: PgNodes;
  readonly #upkeep: PgUpkeep;
  #closing: Promise<void> | null = null;

  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(options);
    try {
      await store.#start();
    } catch (error) {
      await store.close().catch(() => undefined);
      throw error;
    }
    return store;
  }

  private constructor(options: PostgresStoreOptions) {
    this.#options = options;
    const { url, schema, poolSize } = options;
    const db = new PgConnection({ url, schema, poolSize, clock: options.clock ?? null }, () =>
      this.#news.emit({ kind: 'ready' }),
    );
    const shared = sharedStatements(schema);
    const news = new StoreNews(db, {
      runsHere: (id) => this.#running.has(id),
      lowerDue: (at) => this.#due.lowerDue(at),
      readJobs: (ids) => db.readByIds<JobRow>(shared.getMany, ids),
      readPaused: () => this.paused(),
    });
    const due = new DueJobs(db, news);
    const context: StoreContext = { options, db, news, due, shared, running: this.#running };
    this.#db = db;
    this.#news = news;
    this.#due = due;
    this.#inserts = new PgInsert(context);
    this.#claims = new PgClaim(context);
    this.#lease = new PgLease(context);
    this.#progress = new PgProgress(context);
    this.#finishes = new PgFinish(context, this.#lease.starts);
    this.#actions = new PgJobActions(context);
    this.#reads = new PgReads(context);
    this.#settings = new PgSettings(context);
    this.#schedules = new PgSchedules(context, this.#inserts);
    this.#deliveries = new PgDeliveries(context, (id) => this.#reads.batch(id));
    this.#nodes = new PgNodes(context);
    this.#upkeep = new PgUpkeep(db);
  }

  async #start(): Promise<void> {
    const { schema } = this.#options;
    const client = await this.#db.connect();
    try {
      await migrate(client, schema);
      const clock = await client.query<{ now: number }>(`SELECT "${schema}".now_ms() AS now`);
      this.#db.setDatabaseNow(clock.rows[0]?.now ?? Date.now(), Date.now());
    } finally {
      client.release();
    }
    await this.#news.start(this.#options.pollMs ?? 1000);
    this.#upkeep.start();
  }

  observeCommits(observer: ((seconds: number) => void) | null): void {
    this.#db.observeCommits(observer);
  }

  get available(): boolean {
    return this.#db.available;
  }

  get databaseDown(): boolean {
    return this.#db.databaseDown;
  }

  now(): number {
    return this.#db.now();
  }

  subscribe(listener: StoreListener, options?: SubscribeOptions): () => void {
    return this.#news.subscribe(listener, options);
  }

  // ── writes ────────────────────────────────────────────────────────────────

  insert(jobs: NewJob[], batch?: NewBatch): Promise<InsertResult> {
    return this.#inserts.insert(jobs, batch);
  }

  batch(id: string): Promise<Batch | null> {
    return this.#reads.batch(id);
  }

  claim(request: ClaimRequest): Promise<ClaimedJob[][]> {
    return this.#claims.claim(request);
  }

  heartbeat(owner: string, ids: string[], leaseMs: number): Promise<string[]> {
    return this.#lease.heartbeat(owner, ids, leaseMs);
  }

  started(items: StartedAttempt[]): Promise<void> {
    return this.#lease.started(items);
  }

  progress(id: string, attempt: number, owner: string, progress: Progress): void {
    this.#progress.progress(id, attempt, owner, progress);
  }

  finish(items: FinishItem[]): Promise<(Finished | null)[]> {
    return this.#finishes.finish(items);
  }

  release(items: { id: string; attempt: number; owner: string }[]): Promise<void> {
    return this.#actions.release(items);
  }

  cancel(id: string): Promise<Changes | InvalidState | null> {
    return this.#actions.cancel(id);
  }

  retry(id: string): Promise<Changes | InvalidState | null> {
    return this.#actions.retry(id);
  }

  remove(id: string): Promise<'removed' | InvalidState | null> {
    return this.#actions.remove(id);
  }

  setPaused(paused: boolean): Promise<void> {
    return this.#settings.setPaused(paused);
  }

  purge(status: 'completed' | 'failed' | 'cancelled', ageMs: number, limit: number): Promise<number> {
    return this.#actions.purge(status, ageMs, limit);
  }

  // ── reads ─────────────────────────────────────────────────────────────────

  get(id: string): Promise<Job | null> {
    return this.#reads.get(id);
  }

  getMany(ids: readonly string[]): Promise<Job[]> {
    return this.#reads.getMany(ids);
  }

  list(filter: ListFilter): Promise<Page> {
    return this.#reads.list(filter);
  }

  counts(): Promise<QueueCounts> {
    return this.#reads.counts();
  }

  limitOverrides(kind: LimitKind = 'type'): Promise<Map<string, LimitOverride>> {
    return this.#settings.limitOverrides(kind);
  }

  setLimitOverride(key: string, override: LimitOverride | null, kind: LimitKind = 'type'): Promise<void> {
    return this.#settings.setLimitOverride(key, override, kind);
  }

  groupCounts(): Promise<GroupCount[]> {
    return this.#settings.groupCounts();
  }

  paused(): Promise<boolean> {
    return this.#settings.paused();
  }

  schedules(): Promise<Schedule[]> {
    return this.#schedules.schedules();
  }

  getSchedule(name: string): Promise<Schedule | null> {
    return this.#schedules.getSchedule(name);
  }

  putSchedule(schedule: ScheduleDefinition): Promise<{ created: boolean; schedule: Schedule }> {
    return this.#schedules.putSchedule(schedule);
  }

  removeSchedule(name: string): Promise<boolean> {
    return this.#schedules.removeSchedule(name);
  }

  fireSchedule(fire: ScheduleFire): Promise<FireResult> {
    return this.#schedules.fireSchedule(fire);
  }

  nextDueAt(): Promise<number | null> {
    return this.#due.nextDueAt();
  }

  expiredLeases(limit: number): Promise<ExpiredAttempt[]> {
    return this.#lease.expiredLeases(limit);
  }

  nodes(): Promise<NodeInfo[]> {
    return this.#nodes.nodes();
  }

  // ── callback deliveries ───────────────────────────────────────────────────

  claimDeliveries(owner: string, leaseMs: number, limit: number): Promise<DueDelivery[]> {
    return this.#deliveries.claimDeliveries(owner, leaseMs, limit);
  }

  recordDeliveryAttempt(attempt: DeliveryAttempt): Promise<boolean> {
    return this.#deliveries.recordDeliveryAttempt(attempt);
  }

  nextDeliveryAt(): Promise<number | null> {
    return this.#deliveries.nextDeliveryAt();
  }

  deliveries(jobId: string): Promise<DeliveryRecord[] | null> {
    return this.#deliveries.deliveries(jobId);
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#news.stopTimers();
      this.#upkeep.stop();
      await this.#progress.stop();
      await this.#lease.starts.close();
      await this.#news.flush();
      await this.#nodes.stop([...this.#lease.owners]);
      this.#db.markClosed();
      await this.#news.endListener();
      await this.#db.end();
    })();
    return this.#closing;
  }
}
