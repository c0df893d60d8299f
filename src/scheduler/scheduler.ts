import { createHash } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { FaultLog, type FaultLogger, silentLog } from '../fault-log.js';
import { newJobId } from '../jobs/ids.js';
import { type Backoff, type Callback, isTerminal, type Job, type JobStatus, type NewJob } from '../contract/job.js';
import { canonicalJson } from '../store/canonical-json.js';
import { isStoreError } from '../store/errors.js';
import type {
  DeliveryRecord,
  InsertOutcome,
  InsertResult,
  JobStore,
  LimitOverride,
  ListFilter,
  NodeInfo,
  Page,
  StoreEvent,
  TaskLimits,
} from '../store/store.js';
import { isInvalidState } from '../store/store.js';
import type { ThreadEnd, WorkerPool } from '../workers/pool.js';
import { threadEndLine } from './thread-end-log.js';
import type { ChannelMessage } from '../workers/protocol.js';
import type { LoadedTask, TaskRegistry } from '../workers/registry.js';
import { validatePayload } from '../workers/registry.js';
import { KILN_VERSION } from '../version.js';
import { type Clock, systemClock } from './clock.js';
import { Dispatcher } from './dispatcher.js';
import { type FieldIssue, KilnError, notFound, noSuchTask, validationError } from './errors.js';
import { JobEvents } from './events.js';
import { JobStats } from './job-stats.js';
import { KilnMetrics } from './metrics.js';
import { RateWindow } from './rate-window.js';
import type { MicroBatchOptions } from './micro-batch.js';
import { Rescuer } from './rescuer.js';
import { ScheduleRunner } from './schedule-runner.js';
import { effectiveLimits } from './task-limits.js';

/** The dedupe key of a job without an explicit one: SHA-256 of its type and canonical payload. */
export function dedupeKeyOf(type: string, payload: unknown): string {
  return createHash('sha256').update(type).update('\u0000').update(canonicalJson(payload)).digest('hex');
}

/**
 * How often a server of a shared store reads again what other servers change (task limit
 * overrides, schedules) and the jobs watched here, in case a notification went missing.
 */
const SHARED_READ_MS = 1000;

/** A registered task with its limits (GET /v1/tasks). */
export interface TaskInfo {
  task: LoadedTask;
  override: LimitOverride | null;
  /** The module's limits with the override on top: what dispatch applies. */
  effective: TaskLimits;
  /** Attempts of the task this server runs now. */
  running: number;
  /** Starts its rate limit allows now (null: no rate limit). */
  tokens: number | null;
}

/** One job as a client asked for it, envelope already validated. */
export interface SubmitItem {
  type: string;
  payload?: unknown;
  priority?: number;
  maxAttempts?: number;
  timeoutMs?: number;
  backoff?: Backoff;
  /** Epoch ms. */
  runAt?: number;
  delayMs?: number;
  idempotencyKey?: string;
  /** Job ids, or `ref:<name>` naming an earlier item of the same batch. */
  dependsOn?: string[];
  metadata?: Record<string, unknown>;
  group?: string;
  ref?: string;
  /** Dedupe (`dedupe: true` is `{}`): the key defaults to a hash of the type and payload. */
  dedupe?: { key?: string; reuseMs?: number };
  /** The schedule that makes the job (set by the schedule runner, never by a request). */
  schedule?: string;
  callback?: Callback;
}

export interface Submitted {
  created: boolean;
  job: Job;
  /** Answered by dedupe: a job of the same work not finished, or a result reused. */
  dedupe?: 'inflight' | 'result';
}

export interface QueueInfo {
  capacity: number;
  pending: number;
  byStatus: Record<JobStatus, number>;
  byPriority: Record<string, number>;
  threads: { size: number; busy: number };
  paused: boolean;
}

export interface SchedulerOptions {
  store: JobStore;
  pool: WorkerPool;
  registry: TaskRegistry;
  capacity: number;
  threads: number;
  leaseMs: number;
  /**
   * KILN_NODE_LEASE_MS: on a shared store, how long a beat of this server keeps it alive
   * for the others (they take over its attempts after it).
   */
  nodeLeaseMs: number;
  retainCompletedMs: number;
  retainFailedMs: number;
  logger?: SchedulerLogger;
  /**
   * The clock schedules tick by and GET /v1/stats buckets by (tests give a fake one);
   * default: the store's clock with real timers.
   */
  clock?: Clock;
  random?: () => number;
  microBatch?: MicroBatchOptions;
  /** Callbacks: absent, a `callback` is refused (400 callbacks_disabled, no KILN_CALLBACK_SECRET). */
  callbacks?: {
    /** Why a callback URL is refused (the address guard), or null. */
    urlProblem(url: string): Promise<string | null>;
  };
}

export type SchedulerLogger = FaultLogger;

const RETENTION_INTERVAL_MS = 60_000;
/** Terminal jobs deleted per store call by the retention purge. */
const PURGE_CHUNK = 1000;

/**
 * The brain between the HTTP layer and the store and pool: admission, the actions
 * on jobs, events and metrics. Running jobs is the Dispatcher's part.
 *
 * Life cycle: created → start() → (running; pause/resume) → stop() (draining:
 * submissions refused, dispatch stopped, running attempts get the grace period,
 * the rest are released as `interrupted`) → stopped.
 */
export class Scheduler {
  readonly events = new JobEvents();
  readonly metrics: KilnMetrics;
  /** Schedules: their API actions and the ticking (API.md "Schedules"). */
  readonly schedules: ScheduleRunner;
  /** This server's throughput and latencies of the last hour (GET /v1/stats). */
  readonly stats: JobStats;
  readonly #store: JobStore;
  readonly #pool: WorkerPool;
  readonly #registry: TaskRegistry;
  readonly #options: SchedulerOptions;
  readonly #log: SchedulerLogger;
  readonly #dispatcher: Dispatcher;
  readonly #rescuer: Rescuer;
  readonly #unsubscribe: () => void;
  #started = false;
  readonly #startedAt: number;
  /** Run-time overrides of task limits, as last read from the store. */
  #overrides = new Map<string, LimitOverride>();
  #draining = false;
  #retentionTimer: NodeJS.Timeout | null = null;
  #sharedTimer: NodeJS.Timeout | null = null;
  /** Terminal jobs per second over the last seconds, for Retry-After hints. */
  readonly #finishRate = new RateWindow(10);
  #stopping: Promise<void> | null = null;
  readonly #drain = new AbortController();
  readonly #purgeFault: FaultLog;
  readonly #sharedFault: FaultLog;
  readonly #sweepFault: FaultLog;

  constructor(options: SchedulerOptions) {
    // Every open long poll and event stream listens for the drain, and removes its
    // listener when it ends: many at once is load, not a leak.
    setMaxListeners(Number.POSITIVE_INFINITY, this.#drain.signal);
    this.#options = options;
    this.#store = options.store;
    this.#startedAt = options.store.now();
    this.#pool = options.pool;
    this.#registry = options.registry;
    this.#log = options.logger ?? silentLog;
    this.#purgeFault = new FaultLog(this.#log, { what: 'retention purge' });
    this.#sharedFault = new FaultLog(this.#log, { what: 'reading shared state' });
    this.#sweepFault = new FaultLog(this.#log, { what: 'reading watched jobs' });
    const clock = options.clock ?? systemClock(() => options.store.now());
    const cluster = options.store.cluster;
    this.stats = new JobStats({ now: () => clock.now() });
    this.metrics = new KilnMetrics({
      counts: () => this.#store.counts(),
      capacity: options.capacity,
      threads: () => this.#pool.liveThreads,
      busyThreads: () => this.#dispatcher.busyThreads,
      taskTypes: () => this.#registry.list().map((task) => task.name),
      runningByType: () => this.#dispatcher.runningByType(),
      paused: () => this.#dispatcher.paused,
      ...(cluster === null ? {} : { liveNodes: async () => (await cluster.nodes()).length }),
      stats: this.stats,
    });
    options.store.observeCommits((seconds) => this.metrics.storeCommitted(seconds));
    const shared = cluster !== null;
    const nodeLeaseMs = options.nodeLeaseMs;
    this.#dispatcher = new Dispatcher({
      store: options.store,
      pool: options.pool,
      metrics: this.metrics,
      threads: options.threads,
      leaseMs: options.leaseMs,
      nodeLeaseMs: shared ? nodeLeaseMs : null,
      onError: (message, error) => this.#log.error({ err: error }, message),
      log: this.#log,
      taskTypes: () => this.#registry.list().map((task) => task.name),
      isolated: (type) => this.#registry.get(type)?.isolate === true,
      ...(options.random === undefined ? {} : { random: options.random }),
      ...(options.microBatch === undefined ? {} : { microBatch: options.microBatch }),
    });
    this.#rescuer = new Rescuer({
      store: options.store,
      // On a shared store a dead server's attempts are looked for six times a node lease.
      intervalMs: Math.max(50, Math.floor(Math.min(options.leaseMs / 3, shared ? nodeLeaseMs / 6 : Infinity))),
      onRescued: () => this.#dispatcher.pump(),
      log: this.#log,
      ...(options.random === undefined ? {} : { random: options.random }),
    });
    this.schedules = new ScheduleRunner({
      store: options.store,
      clock,
      metrics: this.metrics,
      log: this.#log,
      registered: (type) => this.#registry.get(type) !== undefined,
      prepare: async (request, schedule, idempotencyKey) => {
        const { dedupe, ...fields } = request as Omit<SubmitItem, 'dedupe'> & { dedupe?: true | SubmitItem['dedupe'] };
        const item: SubmitItem = {
          ...fields,
          schedule,
          ...(dedupe === undefined ? {} : { dedupe: dedupe === true ? {} : dedupe }),
          ...(idempotencyKey === null ? {} : { idempotencyKey }),
        };
        const [job] = await this.prepare([item], { batch: false, path: 'job.' });
        return job as NewJob;
      },
      admitted: (inserted) => this.#admitted(inserted.outcomes),
      refusal: (inserted) => this.#refusal(inserted, 1, false),
      storeFailed: unavailable,
    });
    this.#unsubscribe = options.store.subscribe((event) => this.#onStoreEvent(event), {
      watching: (id) => this.events.watching(id),
    });
  }

  // ── life cycle ────────────────────────────────────────────────────────────

  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#retentionTimer = setInterval(() => void this.purgeExpired(), RETENTION_INTERVAL_MS);
    this.#retentionTimer.unref();
    void this.purgeExpired();
    // Attempts whose lease ran out while no server held them (after a crash) run again now.
    const recovered = await this.#rescuer.runOnce();
    if (recovered > 0) this.#log.warn({ recovered }, 'retried attempts interrupted by a stop or crash');
    this.#rescuer.start();
    this.#overrides = await this.#store.limitOverrides();
    this.#applyLimits();
    await this.#dispatcher.start();
    await this.schedules.start();
    // A stop that came while this started has cleared its timers already.
    if (this.#store.cluster !== null && this.#stopping === null) {
      this.#sharedTimer = setInterval(() => {
        this.#readShared().then(
          () => this.#sharedFault.succeeded(),
          (error: unknown) => this.#sharedFault.failed(error),
        );
      }, SHARED_READ_MS);
      this.#sharedTimer.unref();
    }
  }

  // ── task limits ───────────────────────────────────────────────────────────

  /** Each registered task's limits with its override, for the dispatcher. */
  #applyLimits(): void {
    const limits = new Map<string, TaskLimits>();
    for (const task of this.#registry.list()) {
      limits.set(task.name, effectiveLimits(task, this.#overrides.get(task.name)));
    }
    this.#dispatcher.limiter.configure(limits);
    this.#dispatcher.pump();
  }

  /**
   * On a store shared by several servers, once a second: what another server changed
   * reaches this one even without a notification (task limit overrides, schedules), and
   * the jobs long polls and event streams watch here are read again (JobEvents.sweep).
   */
  async #readShared(): Promise<void> {
    await Promise.all([this.#reloadOverrides(), this.schedules.reload().catch(() => undefined), this.#sweepWatched()]);
  }

  /** Reads the watched jobs again and tells their watchers what they did not hear (JobEvents.sweep). */
  #sweepWatched(): Promise<void> {
    return this.events.sweep((ids) => this.#store.getMany(ids));
  }

  async #reloadOverrides(): Promise<void> {
    try {
      const overrides = await this.#store.limitOverrides();
      if (JSON.stringify([...overrides]) === JSON.stringify([...this.#overrides])) return;
      this.#overrides = overrides;
      this.#applyLimits();
    } catch {
      // The store is away: the limits in force stay until it answers again.
    }
  }

  /** The registered tasks with their limits: declared, overridden, in force, and their use now. */
  tasks(): TaskInfo[] {
    return this.#registry.list().map((task) => {
      const override = this.#overrides.get(task.name) ?? null;
      const effective = effectiveLimits(task, override ?? undefined);
      const usage = this.#dispatcher.limiter.usage(task.name);
      return {
        task,
        override,
        effective,
        running: this.#dispatcher.runningByType().get(task.name) ?? 0,
        tokens: usage.tokens,
      };
    });
  }

  /** Override a task's limits at run time (stored; null for a field: no such limit). */
  async setLimits(name: string, override: LimitOverride | null): Promise<TaskInfo> {
    if (this.#registry.get(name) === undefined) throw noSuchTask(name);
    await this.#store.setLimitOverride(name, override).catch(unavailable);
    if (override === null) this.#overrides.delete(name);
    else this.#overrides.set(name, override);
    this.#applyLimits();
    return this.tasks().find((info) => info.task.name === name) as TaskInfo;
  }

  get draining(): boolean {
    return this.#draining;
  }

  /** Aborted when draining starts: long polls and event streams answer and end then. */
  get drainSignal(): AbortSignal {
    return this.#drain.signal;
  }

  get paused(): boolean {
    return this.#dispatcher.paused;
  }

  /**
   * Drain: refuse submissions, stop dispatch, let running attempts finish within
   * `graceMs`, release the rest as `interrupted`, then close the pool. The store
   * stays open: its owner closes it.
   */
  stop(graceMs: number): Promise<void> {
    this.#stopping ??= (async () => {
      this.#draining = true;
      this.#drain.abort();
      await this.schedules.stop();
      if (this.#retentionTimer !== null) clearInterval(this.#retentionTimer);
      this.#retentionTimer = null;
      if (this.#sharedTimer !== null) clearInterval(this.#sharedTimer);
      this.#sharedTimer = null;
      this.#rescuer.stop();
      await this.#dispatcher.stop(graceMs);
      await this.#pool.close();
      this.#unsubscribe();
    })();
    return this.#stopping;
  }

  /** One job of the schedule now (POST /v1/schedules/{name}/trigger). */
  triggerSchedule(name: string): Promise<Job> {
    this.#refuseWhileDraining();
    return this.schedules.trigger(name);
  }

  /** Stop dispatching (kept across restarts until resume). Running attempts finish. */
  pause(): Promise<void> {
    return this.#dispatcher.pause().catch(unavailable);
  }

  resume(): Promise<void> {
    return this.#dispatcher.resume().catch(unavailable);
  }

  // ── submission ────────────────────────────────────────────────────────────

  /**
   * Validate, apply defaults and admit jobs, all or nothing. In a batch, issue
   * paths start `jobs.<index>.`; a single submission's start at the field.
   */
  async submit(items: SubmitItem[], options: { batch: boolean }): Promise<Submitted[]> {
    this.#refuseWhileDraining();
    const newJobs = await this.prepare(items, options);
    const inserted = await this.#store.insert(newJobs).catch(unavailable);
    if (!inserted.ok) throw this.#refusal(inserted, newJobs.length, options.batch);
    this.#admitted(inserted.outcomes);
    return inserted.outcomes;
  }

  #refuseWhileDraining(): void {
    if (!this.#draining) return;
    this.metrics.rejected('shutting_down');
    throw new KilnError('shutting_down', 'the server is shutting down; submit again shortly', {
      retryAfterSeconds: 5,
    });
  }

  /**
   * Validate items (task type, payload by the task's schema, refs, dependencies) and apply
   * defaults: the jobs to insert, or a KilnError that names every bad field. In a batch,
   * issue paths start `jobs.<index>.`; otherwise at the field.
   */
  async prepare(items: SubmitItem[], options: { batch: boolean; path?: string }): Promise<NewJob[]> {
    const now = this.#store.now();
    const prefix = (index: number) => (options.batch ? `jobs.${index}.` : (options.path ?? ''));
    const withCallback = items.findIndex((item) => item.callback !== undefined);
    if (withCallback >= 0 && this.#options.callbacks === undefined) {
      const issue = {
        path: `${prefix(withCallback)}callback`,
        message: 'callbacks are disabled on this server (KILN_CALLBACK_SECRET is not set)',
      };
      throw new KilnError('callbacks_disabled', `${issue.path}: ${issue.message}`, { issues: [issue] });
    }
    // Each callback URL is checked once per request, all at the same time (the guard may resolve names).
    const urlProblems = new Map<string, Promise<string | null>>();
    for (const item of items) {
      const url = item.callback?.url;
      if (url !== undefined && this.#options.callbacks !== undefined && !urlProblems.has(url)) {
        urlProblems.set(url, this.#options.callbacks.urlProblem(url));
      }
    }
    const issues: FieldIssue[] = [];
    const refs = new Map<string, string>();
    const keys = new Set<string>();
    const newJobs: NewJob[] = [];
    let unknownType: string | null = null;

    for (const [index, item] of items.entries()) {
      const task = this.#registry.get(item.type);
      const id = newJobId(now);
      if (item.ref !== undefined) {
        if (refs.has(item.ref))
          issues.push({ path: `${prefix(index)}ref`, message: `ref "${item.ref}" is used twice` });
        refs.set(item.ref, id);
      }
      if (item.idempotencyKey !== undefined) {
        if (keys.has(item.idempotencyKey)) {
          issues.push({ path: `${prefix(index)}idempotencyKey`, message: 'the same key is used twice in one batch' });
        }
        keys.add(item.idempotencyKey);
      }
      const dependsOn: string[] = [];
      for (const [position, dependency] of (item.dependsOn ?? []).entries()) {
        let resolved = dependency;
        if (dependency.startsWith('ref:')) {
          const target = refs.get(dependency.slice(4));
          if (target === undefined || target === id) {
            issues.push({
              path: `${prefix(index)}dependsOn.${position}`,
              message: `${dependency} must name the ref of an earlier job in the same batch`,
            });
            continue;
          }
          resolved = target;
        }
        if (dependsOn.includes(resolved)) {
          issues.push({ path: `${prefix(index)}dependsOn.${position}`, message: `${dependency} is listed twice` });
          continue;
        }
        dependsOn.push(resolved);
      }
      if (item.runAt !== undefined && item.delayMs !== undefined) {
        issues.push({ path: `${prefix(index)}runAt`, message: 'give at most one of runAt and delayMs' });
      }
      if (item.callback !== undefined) {
        const problem = await urlProblems.get(item.callback.url);
        if (problem != null) issues.push({ path: `${prefix(index)}callback.url`, message: problem });
      }
      if (task === undefined) {
        unknownType ??= `${prefix(index)}type`;
        issues.push({ path: `${prefix(index)}type`, message: `no task is registered as "${item.type}"` });
        continue;
      }
      const checked = await validatePayload(task, item.payload ?? {});
      if (!checked.ok) {
        for (const issue of checked.issues) {
          issues.push({
            path: `${prefix(index)}payload${issue.path === '' ? '' : `.${issue.path}`}`,
            message: issue.message,
          });
        }
        continue;
      }
      const runAt = item.runAt ?? (item.delayMs !== undefined && item.delayMs > 0 ? now + item.delayMs : null);
      newJobs.push({
        id,
        type: task.name,
        priority: item.priority ?? task.defaults.priority,
        payload: checked.value,
        maxAttempts: item.maxAttempts ?? task.defaults.maxAttempts,
        timeoutMs: item.timeoutMs ?? task.defaults.timeoutMs,
        backoff: item.backoff ?? task.defaults.backoff,
        idempotencyKey: item.idempotencyKey ?? null,
        dependsOn,
        metadata: item.metadata ?? {},
        group: item.group ?? null,
        runAt: runAt !== null && runAt > now ? runAt : null,
        createdAt: now,
        callback: item.callback ?? null,
        ...(item.dedupe === undefined
          ? {}
          : {
              dedupeKey: item.dedupe.key ?? dedupeKeyOf(task.name, checked.value),
              reuseMs: item.dedupe.reuseMs ?? null,
            }),
        ...(item.schedule === undefined ? {} : { schedule: item.schedule }),
      });
    }

    if (issues.length > 0) {
      if (unknownType !== null && issues.every((issue) => issue.path.endsWith('type'))) {
        throw new KilnError('unknown_task_type', issues.map((issue) => `${issue.path}: ${issue.message}`).join('; '), {
          issues,
        });
      }
      throw validationError(issues);
    }
    return newJobs;
  }

  /** The error a client gets for an insert the store refused. */
  #refusal(inserted: Extract<InsertResult, { ok: false }>, count: number, batch: boolean): KilnError {
    const prefix = (index: number) => (batch ? `jobs.${index}.` : '');
    switch (inserted.reason) {
      case 'queue_full':
        this.metrics.rejected('queue_full');
        return new KilnError(
          'queue_full',
          `the queue holds ${inserted.pending} pending jobs of ${inserted.capacity}; ${count} more do not fit`,
          { retryAfterSeconds: this.#retryAfterSeconds(inserted.pending + count - inserted.capacity) },
        );
      case 'idempotency_conflict':
        return new KilnError(
          'idempotency_conflict',
          `${prefix(inserted.index)}idempotencyKey was used before (job ${inserted.existingId}) with a different type or payload`,
        );
      case 'unknown_dependency':
        return new KilnError(
          'unknown_dependency',
          `${prefix(inserted.index)}dependsOn: no job has the id ${JSON.stringify(inserted.dependency)}`,
          { issues: [{ path: `${prefix(inserted.index)}dependsOn`, message: `no job ${inserted.dependency}` }] },
        );
    }
  }

  /** Jobs the store took: counted, and dispatch told of the best of them. */
  #admitted(outcomes: InsertOutcome[]): void {
    let best = -1;
    for (const outcome of outcomes) {
      if (outcome.dedupe !== undefined) this.metrics.dedupeHit(outcome.job.type, outcome.dedupe);
      if (!outcome.created) continue;
      this.metrics.submitted(outcome.job.type);
      if (outcome.job.status === 'queued' && outcome.job.priority > best) best = outcome.job.priority;
    }
    // Better work than what threads hold in look-ahead takes their place.
    if (best >= 0) this.#dispatcher.preempt(best);
    this.#dispatcher.pump();
  }

  /** A hint for 429 answers: how long the recent completion rate needs to make room. */
  #retryAfterSeconds(excess: number): number {
    const perSecond = this.#finishRate.perSecond(Date.now());
    if (perSecond <= 0) return 1;
    return Math.min(60, Math.max(1, Math.ceil(excess / perSecond)));
  }

  // ── reads and actions ─────────────────────────────────────────────────────

  get(id: string): Promise<Job | null> {
    return this.#store.get(id).catch(unavailable);
  }

  /** The job once it is terminal, or as it is after `waitMs`; null if there is no such job. */
  async waitForTerminal(id: string, waitMs: number, signal?: AbortSignal): Promise<Job | null> {
    if (waitMs <= 0 || this.#draining) return this.#store.get(id).catch(unavailable);
    let settle: (() => void) | undefined;
    const terminal = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const unsubscribe = this.events.subscribe(id, (job) => {
      if (job === null || isTerminal(job.status)) settle?.();
    });
    const timer = setTimeout(() => settle?.(), waitMs);
    const onAbort = () => settle?.();
    signal?.addEventListener('abort', onAbort, { once: true });
    this.#drain.signal.addEventListener('abort', onAbort, { once: true });
    try {
      const job = await this.#store.get(id).catch(unavailable);
      if (job === null || isTerminal(job.status)) return job;
      // A change another server made whose notification was lost shows in the watch sweep.
      await terminal;
      return await this.#store.get(id).catch(unavailable);
    } finally {
      clearTimeout(timer);
      unsubscribe();
      signal?.removeEventListener('abort', onAbort);
      this.#drain.signal.removeEventListener('abort', onAbort);
    }
  }

  /** A job's callback deliveries, attempt by attempt; null: no such job. */
  deliveries(id: string): Promise<DeliveryRecord[] | null> {
    return this.#store.deliveries(id).catch(unavailable);
  }

  async list(filter: ListFilter): Promise<Page> {
    try {
      return await this.#store.list(filter);
    } catch (error) {
      if (isStoreError(error) && error.code === 'invalid_cursor') {
        throw validationError([{ path: 'cursor', message: 'is not a cursor this server gave out' }]);
      }
      return unavailable(error);
    }
  }

  async cancel(id: string): Promise<Job> {
    const changes = await this.#store.cancel(id).catch(unavailable);
    if (changes === null) throw notFound(id);
    if (isInvalidState(changes)) throw new KilnError('invalid_state', changes.message);
    // Its attempt here, if any, was stopped by the store's `cancelled` event.
    return changes.job;
  }

  async retry(id: string): Promise<Job> {
    const changes = await this.#store.retry(id).catch(unavailable);
    if (changes === null) throw notFound(id);
    if (isInvalidState(changes)) throw new KilnError('invalid_state', changes.message);
    if (changes.job.status === 'queued') this.#dispatcher.preempt(changes.job.priority);
    this.#dispatcher.pump();
    return changes.job;
  }

  async remove(id: string): Promise<void> {
    const outcome = await this.#store.remove(id).catch(unavailable);
    if (outcome === null) throw notFound(id);
    if (isInvalidState(outcome)) throw new KilnError('invalid_state', outcome.message);
  }

  async queueInfo(): Promise<QueueInfo> {
    const counts = await this.#store.counts().catch(unavailable);
    const byPriority = Object.fromEntries(counts.queuedByPriority.map((n, priority) => [String(priority), n]));
    return {
      capacity: this.#options.capacity,
      pending: counts.pending,
      byStatus: counts.byStatus,
      byPriority,
      threads: await this.#threads(),
      paused: this.#dispatcher.paused,
    };
  }

  /** Threads of every live server sharing the store, or of this one. */
  async #threads(): Promise<{ size: number; busy: number }> {
    const here = { size: this.#pool.liveThreads, busy: this.#dispatcher.busyThreads };
    if (this.#store.cluster === null) return here;
    const nodes = await this.#store.cluster.nodes().catch(unavailable);
    let size = here.size;
    let busy = here.busy;
    for (const node of nodes) {
      if (node.id === this.#dispatcher.owner) continue;
      size += node.threads;
      busy += node.busy;
    }
    return { size, busy };
  }

  /** The servers sharing the store (GET /v1/nodes); this one alone without a shared store. */
  async nodes(): Promise<NodeInfo[]> {
    const self: NodeInfo = {
      id: this.#dispatcher.owner,
      host: hostname(),
      pid: process.pid,
      version: KILN_VERSION,
      threads: this.#options.threads,
      busy: this.#dispatcher.busyThreads,
      startedAt: this.#startedAt,
      lastSeenAt: this.#store.now(),
    };
    if (this.#store.cluster === null) return [self];
    const nodes = await this.#store.cluster.nodes().catch(unavailable);
    return nodes.map((node) => (node.id === self.id ? { ...node, busy: self.busy } : node));
  }

  /** Messages sent to threads and the attempts they carried (micro-batching makes the second larger). */
  get dispatchStats(): { messages: number; attempts: number } {
    return this.#dispatcher.stats;
  }

  /** Whether the pool has live threads (for /ready). */
  get poolAlive(): boolean {
    return !this.#draining && this.#pool.liveThreads > 0;
  }

  /** Delete terminal jobs past their retention, a chunk per store call. */
  async purgeExpired(): Promise<number> {
    const plan = [
      ['completed', this.#options.retainCompletedMs],
      ['failed', this.#options.retainFailedMs],
      ['cancelled', this.#options.retainFailedMs],
    ] as const;
    let total = 0;
    try {
      for (const [status, ageMs] of plan) {
        for (;;) {
          const deleted = await this.#store.purge(status, ageMs, PURGE_CHUNK);
          total += deleted;
          if (deleted < PURGE_CHUNK) break;
        }
      }
      this.#purgeFault.succeeded();
    } catch (error) {
      this.#purgeFault.failed(error);
    }
    return total;
  }

  /** Progress reported by a thread (wired to the pool's channel by the composition root). */
  onThreadMessage(message: ChannelMessage): void {
    if (message.kind !== 'progress') return;
    this.#dispatcher.onProgress(message.jobId, message.attempt, message.percent, message.message);
  }

  /**
   * A worker thread ended (the pool replaces it): one log line and one count per thread,
   * naming the attempts it held and, for an uncaught error, the attempt that raised it.
   */
  onThreadEnd(end: ThreadEnd): void {
    this.metrics.threadEnded(end.reason);
    const line = threadEndLine(end);
    this.#log[line.level](line.fields, line.message);
  }

  /** Whether the store can take writes now (for /ready). */
  get storeAvailable(): boolean {
    return this.#store.available;
  }

  // ── events ────────────────────────────────────────────────────────────────

  #onStoreEvent(event: StoreEvent): void {
    if (event.kind === 'lost') {
      this.#dispatcher.abandon(event.id, 'lease_lost');
      return;
    }
    if (event.kind === 'ready') {
      // The store is back (a new store thread, a rebuilt index), or another server made jobs ready.
      this.#dispatcher.pump();
      // A store of this process alone: a write that committed as its thread died was never
      // announced, so what the watchers were told may be behind the file. (A shared store's
      // watchers are swept every second anyway.)
      if (this.#store.cluster === null) {
        this.#sweepWatched().then(
          () => this.#sweepFault.succeeded(),
          (error: unknown) => this.#sweepFault.failed(error),
        );
      }
      return;
    }
    if (event.kind === 'paused') {
      this.#dispatcher.pausedElsewhere(event.paused);
      return;
    }
    // Callback deliveries are the delivery service's business.
    if (event.kind === 'deliveries') return;
    this.events.publish(event.id, event.job);
    if (event.kind !== 'changed') return;
    // The job left `running` by another hand (cancelled here or elsewhere, rescued): its
    // attempt here is void. A cancel only drops the outcome of a micro-batch's job; any
    // other loss stops the thread, since the job may be handed out again at once.
    if (event.remote === true) {
      // Only news that can mean the attempt here is void (a cancel, a rescue); an older
      // status arriving late (the inserting server's `queued`) cannot.
      const void_ = event.status === 'cancelled' || event.status === 'failed' || event.status === 'retrying';
      if (void_ && this.#dispatcher.runs(event.id)) this.#dispatcher.checkLeases();
    } else if (event.status !== 'running' && this.#dispatcher.runs(event.id)) {
      this.#dispatcher.abandon(event.id, event.status === 'cancelled' ? 'cancel' : 'lease_lost');
    }
    if (isTerminal(event.status)) {
      this.#dispatcher.forget(event.id);
      // Another server's change is counted in that server's metrics.
      if (event.remote === true) return;
      this.metrics.finished(event.type, event.status as 'completed' | 'failed' | 'cancelled');
      this.#finishRate.add(Date.now());
    }
  }
}

/** A store that cannot write now answers 503 store_unavailable; anything else stays as it is. */
function unavailable(error: unknown): never {
  if (isStoreError(error, 'store_unavailable') || isStoreError(error, 'store_closed')) {
    throw new KilnError('store_unavailable', `the job store cannot be reached: ${error.message}`, {
      retryAfterSeconds: 1,
    });
  }
  throw error;
}
