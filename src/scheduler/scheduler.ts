import { setMaxListeners } from 'node:events';
import type { ChannelMessage } from '../workers/protocol.js';
import type { DeliveryRecord } from '../contract/delivery.js';
import { isTerminal, type Job, JOB_STATUSES, type JobStatus } from '../contract/job.js';
import type { Batch, BatchCallback } from '../contract/batch.js';
import type { LimitOverride, TaskLimits } from '../contract/limits.js';
import { type GroupInfo, GroupLimits } from './group-limits.js';
import type { MicroBatchOptions } from './dispatch/micro-batch.js';
import type { NodeInfo } from '../contract/node.js';
import type { TaskRegistry } from '../workers/registry.js';
import type { ThreadEnd, WorkerPool } from '../workers/pool.js';
import { ClusterView } from './cluster-view.js';
import { Dispatcher } from './dispatch/dispatcher.js';
import { type FaultLogger, silentLog } from '../fault-log.js';
import { SharedStateReader } from './shared-state.js';
import { JobEvents } from './events.js';
import { JobStats } from './statistics/job-stats.js';
import { KilnError, notFound, unavailable, validationError } from './errors.js';
import { KilnMetrics } from './statistics/metrics.js';
import { Rescuer } from './dispatch/rescuer.js';
import { Retention } from './retention.js';
import { FinishedAnswers } from './finished-answers.js';
import { ScheduleRunner } from './schedules/schedule-runner.js';
import { isInvalidState, type JobStore, type ListFilter, type Page } from '../store/store.js';
import { isStoreError } from '../store/errors.js';
import { routeStoreEvent, type StoreEventRouting } from './store-events.js';
import { logThreadEnd } from './thread-end-log.js';
import { type CallbackUrlCheck, Submission, type SubmitItem, type Submitted } from './submission.js';
import { type Clock, systemClock } from '../time/clock.js';
import { type TaskInfo, TaskLimitOverrides } from './task-limit-overrides.js';
import { waitForTerminal } from './long-poll.js';
import type { Tracing } from '../tracing/tracing.js';
import type { TraceParent } from '../tracing/trace-context.js';

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
  /** KILN_MAX_SNOOZES: snoozes a job may make; the one after fails it (`snooze_limit`). */
  maxSnoozes: number;
  /**
   * KILN_MAX_INTERRUPTIONS: rescues of a job's attempts (counted or given back) before it
   * fails with `too_many_interruptions`.
   */
  maxInterruptions: number;
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
  callbacks?: CallbackUrlCheck;
  /** Spans of submissions and attempts (src/tracing/); absent or null: tracing is off. */
  tracing?: Tracing | null;
}

export type SchedulerLogger = FaultLogger;

/**
 * The brain between the HTTP layer and the store and pool: admission, the actions
 * on jobs, events and metrics. Running jobs is the Dispatcher's part (dispatch/);
 * admission is submission.ts, the routing of store events store-events.ts.
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
  /** Answers to polls of finished jobs, kept where this process is the store's one writer. */
  readonly finishedAnswers: FinishedAnswers;
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
  #draining = false;
  #stopping: Promise<void> | null = null;
  readonly #drain = new AbortController();
  readonly #submission: Submission;
  readonly #limits: TaskLimitOverrides;
  readonly #groupLimits: GroupLimits;
  readonly #retention: Retention;
  readonly #cluster: ClusterView;
  readonly #routing: StoreEventRouting;
  readonly #shared: SharedStateReader;

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
    const clock = options.clock ?? systemClock(() => options.store.now());
    const cluster = options.store.cluster;
    this.stats = new JobStats({ now: () => clock.now() });
    this.finishedAnswers = new FinishedAnswers(cluster === null);
    this.metrics = new KilnMetrics({
      counts: () => this.#store.counts(),
      capacity: options.capacity,
      threads: () => this.#pool.liveThreads,
      busyThreads: () => this.#dispatcher.busyThreads,
      taskTypes: () => this.#registry.list().map((task) => task.name),
      runningByType: () => this.#dispatcher.attemptsBy('type', 'started'),
      claimedByType: () => this.#dispatcher.attemptsBy('type', 'waiting'),
      runningByGroup: () => this.#dispatcher.startedByLimitedGroup(),
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
      maxSnoozes: options.maxSnoozes,
      onError: (message, error) => this.#log.error({ err: error }, message),
      log: this.#log,
      taskTypes: () => this.#registry.list().map((task) => task.name),
      isolated: (type) => this.#registry.get(type)?.isolate === true,
      tracing: options.tracing ?? null,
      ...(options.random === undefined ? {} : { random: options.random }),
      ...(options.microBatch === undefined ? {} : { microBatch: options.microBatch }),
    });
    this.#rescuer = new Rescuer({
      store: options.store,
      // On a shared store a dead server's attempts are looked for six times a node lease.
      intervalMs: Math.max(50, Math.floor(Math.min(options.leaseMs / 3, shared ? nodeLeaseMs / 6 : Infinity))),
      maxInterruptions: options.maxInterruptions,
      before: () => this.#dispatcher.catchUp(),
      onRescued: () => this.#dispatcher.pump(),
      log: this.#log,
      ...(options.random === undefined ? {} : { random: options.random }),
    });
    this.#submission = new Submission({
      store: options.store,
      registry: options.registry,
      metrics: this.metrics,
      dispatcher: this.#dispatcher,
      callbacks: options.callbacks,
      tracing: options.tracing ?? null,
      draining: () => this.#draining,
    });
    const submission = this.#submission;
    this.schedules = new ScheduleRunner({
      store: options.store,
      clock,
      metrics: this.metrics,
      log: this.#log,
      registered: (type) => this.#registry.get(type) !== undefined,
      prepare: (request, schedule, idempotencyKey) => submission.prepareScheduled(request, schedule, idempotencyKey),
      admitted: (inserted) => submission.admitted(inserted.outcomes),
      fired: (job, insert) => submission.scheduleFired(job, insert),
      refusal: (inserted) => submission.refusal(inserted, 1, false),
      storeFailed: unavailable,
    });
    this.#limits = new TaskLimitOverrides({
      store: options.store,
      registry: options.registry,
      dispatcher: this.#dispatcher,
    });
    this.#groupLimits = new GroupLimits({ store: options.store, dispatcher: this.#dispatcher, metrics: this.metrics });
    this.#retention = new Retention({
      store: options.store,
      retainCompletedMs: options.retainCompletedMs,
      retainFailedMs: options.retainFailedMs,
      log: this.#log,
      answers: this.finishedAnswers,
    });
    this.#cluster = new ClusterView({
      store: options.store,
      pool: options.pool,
      dispatcher: this.#dispatcher,
      threads: options.threads,
      startedAt: this.#startedAt,
    });
    this.#shared = new SharedStateReader({
      log: this.#log,
      reload: () =>
        Promise.all([
          this.#limits.reload(),
          this.#groupLimits.reload(),
          this.schedules.reload().catch(() => undefined),
        ]),
      sweepWatched: () => this.events.sweep((ids) => this.#store.getMany(ids)),
    });
    this.#routing = {
      dispatcher: this.#dispatcher,
      events: this.events,
      metrics: this.metrics,
      finished: () => submission.finished(),
      sweepWatched: shared ? null : () => this.#shared.sweep(),
      answers: this.finishedAnswers,
    };
    this.#unsubscribe = options.store.subscribe((event) => routeStoreEvent(event, this.#routing), {
      watching: (id) => this.events.watching(id),
    });
  }

  // ── life cycle ────────────────────────────────────────────────────────────

  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#retention.start();
    // Attempts whose lease ran out while no server held them (after a crash) run again now.
    const recovered = await this.#rescuer.runOnce();
    if (recovered > 0) this.#log.warn({ recovered }, 'retried attempts interrupted by a stop or crash');
    this.#rescuer.start();
    await this.#limits.load();
    await this.#groupLimits.load();
    await this.#dispatcher.start();
    await this.schedules.start();
    // A stop that came while this started has cleared its timers already.
    if (this.#store.cluster !== null && this.#stopping === null) this.#shared.start();
  }

  // ── task limits ───────────────────────────────────────────────────────────

  /** The registered tasks with their limits: declared, overridden, in force, and their use now. */
  tasks(): TaskInfo[] {
    return this.#limits.tasks();
  }

  /** Override a task's limits at run time (stored; null for a field: no such limit). */
  setLimits(name: string, override: LimitOverride | null): Promise<TaskInfo> {
    return this.#limits.set(name, override);
  }

  // ── group limits ──────────────────────────────────────────────────────────

  /** Every group with queued or running jobs or limits (GET /v1/groups). */
  groups(): Promise<GroupInfo[]> {
    return this.#groupLimits.list();
  }

  /** Set a group's limits (null for a field: no such limit), or remove them (null). */
  setGroupLimits(group: string, limits: TaskLimits | null): Promise<GroupInfo | null> {
    return this.#groupLimits.set(group, limits);
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
      this.#retention.stop();
      this.#shared.stop();
      this.#rescuer.stop();
      await this.#dispatcher.stop(graceMs);
      await this.#pool.close();
      this.#unsubscribe();
    })();
    return this.#stopping;
  }

  /** One job of the schedule now (POST /v1/schedules/{name}/trigger). */
  triggerSchedule(name: string): Promise<Job> {
    this.#submission.refuseWhileDraining();
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
  submit(items: SubmitItem[], options: { batch: boolean; trace?: TraceParent | null }): Promise<Submitted[]> {
    return this.#submission.submit(items, options);
  }

  /** A batch request (POST /v1/jobs/batch): its jobs in a new batch, all or nothing. */
  submitBatch(
    items: SubmitItem[],
    callback: BatchCallback | null = null,
    trace: TraceParent | null = null,
  ): Promise<{ batch: string; submitted: Submitted[] }> {
    return this.#submission.submitBatch(items, callback, trace);
  }

  /** A batch with its jobs counted by status; null: no such batch. */
  batch(id: string): Promise<Batch | null> {
    return this.#store.batch(id).catch(unavailable);
  }

  /**
   * Cancel every unfinished job of a batch, each as `cancel` does (its dependents fail,
   * its attempt stops); a job that finished meanwhile is left as it is. Answers the batch
   * after, or null when there is no such batch.
   */
  async cancelBatch(id: string): Promise<Batch | null> {
    if ((await this.batch(id)) === null) return null;
    const unfinished = JOB_STATUSES.filter((status) => !isTerminal(status));
    for (;;) {
      // Each round cancels what it read, so the next reads from the start again.
      const page = await this.list({ batch: id, statuses: [...unfinished], limit: 500 });
      if (page.jobs.length === 0) break;
      let changed = 0;
      for (const job of page.jobs) {
        const changes = await this.#store.cancel(job.id).catch(unavailable);
        if (changes !== null && !isInvalidState(changes)) changed++;
      }
      // Jobs that stay unfinished after a cancel (a race lost every time) end the loop.
      if (changed === 0) break;
    }
    return this.batch(id);
  }

  // ── reads and actions ─────────────────────────────────────────────────────

  /** Whether this server holds an attempt of the job: claimed for its threads, started or not. */
  holdsAttempt(id: string): boolean {
    return this.#dispatcher.runs(id);
  }

  get(id: string): Promise<Job | null> {
    return this.#store.get(id).catch(unavailable);
  }

  /** The job once it is terminal, or as it is after `waitMs`; null if there is no such job. */
  waitForTerminal(id: string, waitMs: number, signal?: AbortSignal): Promise<Job | null> {
    return waitForTerminal({ store: this.#store, events: this.events, drain: this.#drain.signal }, id, waitMs, signal);
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
    const changes = await this.#store
      .retry(id)
      .catch(unavailable)
      .finally(() => this.finishedAnswers.forget(id));
    if (changes === null) throw notFound(id);
    if (isInvalidState(changes)) throw new KilnError('invalid_state', changes.message);
    if (changes.job.status === 'queued') this.#dispatcher.preempt(changes.job.priority);
    this.#dispatcher.pump();
    return changes.job;
  }

  async remove(id: string): Promise<void> {
    const outcome = await this.#store
      .remove(id)
      .catch(unavailable)
      .finally(() => this.finishedAnswers.forget(id));
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
      threads: await this.#cluster.threads(),
      paused: this.#dispatcher.paused,
    };
  }

  /** The servers sharing the store (GET /v1/nodes); this one alone without a shared store. */
  nodes(): Promise<NodeInfo[]> {
    return this.#cluster.nodes();
  }

  /** Messages sent to threads and the attempts they carried (micro-batching makes the second larger). */
  get dispatchStats(): { messages: number; attempts: number } {
    return this.#dispatcher.stats;
  }

  /** Whether the pool has live threads (for /ready). */
  get poolAlive(): boolean {
    return !this.#draining && this.#pool.liveThreads > 0;
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
    logThreadEnd(end, this.#log, (id) => this.#store.getMany([id]).then(([job]) => job ?? null));
  }

  /** Whether the store can take writes now (for /ready). */
  get storeAvailable(): boolean {
    return this.#store.available;
  }
}
