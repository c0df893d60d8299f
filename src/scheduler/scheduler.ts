import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { retryDelayMs } from '../jobs/backoff.js';
import { newJobId } from '../jobs/ids.js';
import { type Backoff, isTerminal, type Job, type JobError, type NewJob } from '../jobs/model.js';
import type { AttemptOutcome, Changes, ClaimedJob, JobStore, Lease, ListFilter, Page } from '../store/store.js';
import { isInvalidState } from '../store/store.js';
import type { WorkerPool } from '../workers/pool.js';
import type { AttemptResult, ChannelMessage } from '../workers/protocol.js';
import type { TaskRegistry } from '../workers/registry.js';
import { validatePayload } from '../workers/registry.js';
import { type FieldIssue, KilnError, validationError } from './errors.js';
import { JobEvents } from './events.js';
import { type AttemptMetricOutcome, KilnMetrics } from './metrics.js';

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
  ref?: string;
}

export interface Submitted {
  created: boolean;
  job: Job;
}

export interface QueueInfo {
  capacity: number;
  pending: number;
  byStatus: Record<string, number>;
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
  retainCompletedMs: number;
  retainFailedMs: number;
  logger?: SchedulerLogger;
  random?: () => number;
}

export interface SchedulerLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

type AbortReason = 'timeout' | 'cancel' | 'shutdown' | 'lease_lost';

interface RunningAttempt {
  job: ClaimedJob;
  controller: AbortController;
  abortReason: AbortReason | null;
  timer: NodeJS.Timeout;
  startedAt: number;
}

const RETENTION_INTERVAL_MS = 60_000;
const silentLogger: SchedulerLogger = { info() {}, warn() {}, error() {} };

/**
 * The brain between the HTTP layer and the store and pool.
 *
 * Dispatch is pulled by demand: `#pump` claims exactly as many jobs as there are
 * free threads, so piscina's own queue stays empty and priority is decided at the
 * last moment. A finishing attempt frees its slot and pumps before its outcome is
 * even written. Delayed and retrying jobs need no timer of their own: one timer is
 * armed for the store's earliest `runAt`.
 *
 * Life cycle: created → start() → (running; pause/resume) → stop() (draining:
 * submissions refused, dispatch stopped, running attempts get the grace period,
 * the rest are released as `interrupted`) → stopped.
 */
export class Scheduler {
  readonly events = new JobEvents();
  readonly metrics: KilnMetrics;
  readonly #store: JobStore;
  readonly #pool: WorkerPool;
  readonly #registry: TaskRegistry;
  readonly #options: SchedulerOptions;
  readonly #log: SchedulerLogger;
  readonly #random: () => number;
  readonly #owner = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  readonly #running = new Map<string, RunningAttempt>();
  readonly #settling = new Set<Promise<void>>();
  #started = false;
  #paused = false;
  #draining = false;
  #pumping = false;
  #pumpAgain = false;
  #dueTimer: NodeJS.Timeout | null = null;
  #dueAt: number | null = null;
  #heartbeatTimer: NodeJS.Timeout | null = null;
  #retentionTimer: NodeJS.Timeout | null = null;
  #idleWaiters: Array<() => void> = [];
  #recentFinishes: number[] = [];
  #stopping: Promise<void> | null = null;

  constructor(options: SchedulerOptions) {
    this.#options = options;
    this.#store = options.store;
    this.#pool = options.pool;
    this.#registry = options.registry;
    this.#log = options.logger ?? silentLogger;
    this.#random = options.random ?? Math.random;
    const self = this;
    this.metrics = new KilnMetrics({
      counts: () => this.#store.counts(),
      capacity: options.capacity,
      get threads() {
        return { size: self.#options.threads, busy: self.#running.size };
      },
    });
  }

  // ── life cycle ────────────────────────────────────────────────────────────

  start(): void {
    if (this.#started) return;
    this.#started = true;
    const beat = Math.max(100, Math.floor(this.#options.leaseMs / 3));
    this.#heartbeatTimer = setInterval(() => void this.#heartbeat(), beat);
    this.#heartbeatTimer.unref();
    this.#retentionTimer = setInterval(() => void this.purgeExpired(), RETENTION_INTERVAL_MS);
    this.#retentionTimer.unref();
    void this.purgeExpired();
    this.#pump();
  }

  get draining(): boolean {
    return this.#draining;
  }

  get paused(): boolean {
    return this.#paused;
  }

  /**
   * Drain: refuse submissions, stop dispatch, let running attempts finish within
   * `graceMs`, release the rest as `interrupted`, then close the pool. The store
   * stays open: its owner closes it.
   */
  stop(graceMs: number): Promise<void> {
    this.#stopping ??= this.#drain(graceMs);
    return this.#stopping;
  }

  async #drain(graceMs: number): Promise<void> {
    this.#draining = true;
    for (const timer of [this.#heartbeatTimer, this.#retentionTimer, this.#dueTimer]) {
      if (timer !== null) clearTimeout(timer);
    }
    this.#dueTimer = null;
    if (this.#running.size > 0) {
      let graceTimer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.#whenIdle(),
        new Promise<void>((resolve) => {
          graceTimer = setTimeout(resolve, graceMs);
        }),
      ]);
      clearTimeout(graceTimer);
      for (const id of [...this.#running.keys()]) this.#abort(id, 'shutdown');
    }
    while (this.#settling.size > 0) await Promise.allSettled([...this.#settling]);
    await this.#pool.close();
  }

  #whenIdle(): Promise<void> {
    if (this.#running.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    this.#pump();
  }

  // ── submission ────────────────────────────────────────────────────────────

  /**
   * Validate, apply defaults and admit jobs, all or nothing. In a batch, issue
   * paths start `jobs.<index>.`; a single submission's start at the field.
   */
  async submit(items: SubmitItem[], options: { batch: boolean }): Promise<Submitted[]> {
    if (this.#draining) {
      this.metrics.rejected('shutting_down');
      throw new KilnError('shutting_down', 'the server is shutting down; submit again shortly', {
        retryAfterSeconds: 5,
      });
    }
    const now = Date.now();
    const prefix = (index: number) => (options.batch ? `jobs.${index}.` : '');
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
        runAt: runAt !== null && runAt > now ? runAt : null,
        createdAt: now,
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

    const inserted = await this.#store.insert(newJobs, now);
    if (!inserted.ok) {
      switch (inserted.reason) {
        case 'queue_full':
          this.metrics.rejected('queue_full');
          throw new KilnError(
            'queue_full',
            `the queue holds ${inserted.pending} pending jobs of ${inserted.capacity}; ${newJobs.length} more do not fit`,
            { retryAfterSeconds: this.#retryAfterSeconds(inserted.pending + newJobs.length - inserted.capacity) },
          );
        case 'idempotency_conflict':
          throw new KilnError(
            'idempotency_conflict',
            `${prefix(inserted.index)}idempotencyKey was used before (job ${inserted.existingId}) with a different type or payload`,
          );
        case 'unknown_dependency':
          throw new KilnError(
            'unknown_dependency',
            `${prefix(inserted.index)}dependsOn: no job has the id ${JSON.stringify(inserted.dependency)}`,
            { issues: [{ path: `${prefix(inserted.index)}dependsOn`, message: `no job ${inserted.dependency}` }] },
          );
      }
    }
    for (const outcome of inserted.outcomes) {
      if (!outcome.created) continue;
      this.metrics.submitted(outcome.job.type);
      if (isTerminal(outcome.job.status)) this.#countFinished(outcome.job);
    }
    this.#pump();
    return inserted.outcomes;
  }

  /** A hint for 429 answers: how long the recent completion rate needs to make room. */
  #retryAfterSeconds(excess: number): number {
    const windowMs = 10_000;
    const since = Date.now() - windowMs;
    this.#recentFinishes = this.#recentFinishes.filter((t) => t >= since);
    const perSecond = this.#recentFinishes.length / (windowMs / 1000);
    if (perSecond <= 0) return 1;
    return Math.min(60, Math.max(1, Math.ceil(excess / perSecond)));
  }

  // ── reads and actions ─────────────────────────────────────────────────────

  get(id: string): Promise<Job | null> {
    return this.#store.get(id);
  }

  /** The job once it is terminal, or as it is after `waitMs`; null if there is no such job. */
  async waitForTerminal(id: string, waitMs: number, signal?: AbortSignal): Promise<Job | null> {
    if (waitMs <= 0) return this.#store.get(id);
    let settle: (() => void) | undefined;
    const terminal = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const unsubscribe = this.events.subscribe(id, (job) => {
      if (isTerminal(job.status)) settle?.();
    });
    const timer = setTimeout(() => settle?.(), waitMs);
    const onAbort = () => settle?.();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const job = await this.#store.get(id);
      if (job === null || isTerminal(job.status)) return job;
      await terminal;
      return await this.#store.get(id);
    } finally {
      clearTimeout(timer);
      unsubscribe();
      signal?.removeEventListener('abort', onAbort);
    }
  }

  list(filter: ListFilter): Promise<Page> {
    return this.#store.list(filter);
  }

  async cancel(id: string): Promise<Job> {
    const changes = await this.#store.cancel(id, Date.now());
    if (changes === null) throw notFound(id);
    if (isInvalidState(changes)) throw new KilnError('invalid_state', changes.message);
    if (this.#running.has(id)) this.#abort(id, 'cancel');
    this.#publish(changes);
    return changes.job;
  }

  async retry(id: string): Promise<Job> {
    const changes = await this.#store.retry(id, Date.now());
    if (changes === null) throw notFound(id);
    if (isInvalidState(changes)) throw new KilnError('invalid_state', changes.message);
    this.#publish(changes);
    this.#pump();
    return changes.job;
  }

  async remove(id: string): Promise<void> {
    const outcome = await this.#store.remove(id);
    if (outcome === null) throw notFound(id);
    if (isInvalidState(outcome)) throw new KilnError('invalid_state', outcome.message);
  }

  async queueInfo(): Promise<QueueInfo> {
    const counts = await this.#store.counts();
    const byPriority: Record<string, number> = {};
    for (let priority = counts.queuedByPriority.length - 1; priority >= 0; priority--) {
      byPriority[String(priority)] = counts.queuedByPriority[priority] ?? 0;
    }
    return {
      capacity: this.#options.capacity,
      pending: counts.pending,
      byStatus: counts.byStatus,
      byPriority,
      threads: { size: this.#options.threads, busy: this.#running.size },
      paused: this.#paused,
    };
  }

  /** Whether the pool has live threads (for /ready). */
  get poolAlive(): boolean {
    return !this.#draining && this.#pool.liveThreads > 0;
  }

  /** Delete terminal jobs past their retention. */
  async purgeExpired(): Promise<number> {
    const now = Date.now();
    try {
      const completed = await this.#store.purge(now - this.#options.retainCompletedMs, ['completed']);
      const failed = await this.#store.purge(now - this.#options.retainFailedMs, ['failed', 'cancelled']);
      return completed + failed;
    } catch (error) {
      this.#log.error({ err: error }, 'retention purge failed');
      return 0;
    }
  }

  // ── dispatch ──────────────────────────────────────────────────────────────

  #lease(now: number): Lease {
    return { owner: this.#owner, expiresAt: now + this.#options.leaseMs };
  }

  /** Claim as many jobs as there are free threads; re-runs itself if asked while busy. */
  #pump(): void {
    if (!this.#started) return;
    if (this.#pumping) {
      this.#pumpAgain = true;
      return;
    }
    this.#pumping = true;
    void this.#pumpLoop().finally(() => {
      this.#pumping = false;
    });
  }

  async #pumpLoop(): Promise<void> {
    try {
      do {
        this.#pumpAgain = false;
        if (this.#paused || this.#draining) return;
        const free = this.#options.threads - this.#running.size;
        if (free <= 0) continue;
        const now = Date.now();
        const claimed = await this.#store.claim(free, this.#lease(now), now);
        for (const job of claimed) this.#run(job, now);
        if (claimed.length === free) this.#pumpAgain = true;
      } while (this.#pumpAgain);
    } catch (error) {
      this.#log.error({ err: error }, 'dispatch failed; retrying on the next change');
    } finally {
      await this.#armDueTimer();
    }
  }

  async #armDueTimer(): Promise<void> {
    if (this.#draining || this.#paused) return;
    const dueAt = await this.#store.nextDueAt();
    if (dueAt === this.#dueAt && this.#dueTimer !== null) return;
    if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
    this.#dueTimer = null;
    this.#dueAt = dueAt;
    if (dueAt === null) return;
    const delay = Math.min(Math.max(0, dueAt - Date.now()), 2 ** 31 - 1);
    this.#dueTimer = setTimeout(() => {
      this.#dueTimer = null;
      this.#dueAt = null;
      this.#pump();
    }, delay);
    this.#dueTimer.unref();
  }

  #run(job: ClaimedJob, now: number): void {
    const controller = new AbortController();
    const attempt: RunningAttempt = {
      job,
      controller,
      abortReason: null,
      timer: setTimeout(() => this.#abort(job.id, 'timeout'), job.timeoutMs),
      startedAt: now,
    };
    this.#running.set(job.id, attempt);
    if (job.readyAt !== null) this.metrics.waited(job.type, Math.max(0, now - job.readyAt) / 1000);
    this.events.publish(job);
    const input = {
      jobId: job.id,
      type: job.type,
      attempt: job.attempts,
      payload: job.payload,
      parents: job.parents,
      timeoutMs: job.timeoutMs,
    };
    const settled = this.#pool
      .run({ attempts: [input] }, controller.signal)
      .then(
        (results) => this.#settle(attempt, results[0] ?? null, null),
        (error: unknown) => this.#settle(attempt, null, error),
      )
      .catch((error: unknown) => this.#log.error({ err: error, jobId: job.id }, 'recording an attempt failed'));
    this.#settling.add(settled);
    void settled.finally(() => this.#settling.delete(settled));
  }

  #abort(id: string, reason: AbortReason): void {
    const attempt = this.#running.get(id);
    if (attempt === undefined || attempt.abortReason !== null) return;
    attempt.abortReason = reason;
    this.#pool.notifyAbort(id, reason);
    attempt.controller.abort(new Error(`attempt aborted: ${reason}`));
  }

  async #settle(attempt: RunningAttempt, result: AttemptResult | null, failure: unknown): Promise<void> {
    const { job } = attempt;
    clearTimeout(attempt.timer);
    this.#running.delete(job.id);
    if (this.#running.size === 0) {
      for (const resolve of this.#idleWaiters.splice(0)) resolve();
    }
    this.#pump();

    const now = Date.now();
    const seconds = (now - attempt.startedAt) / 1000;
    const lease = this.#lease(now);
    let outcome: AttemptOutcome;
    let metric: AttemptMetricOutcome;
    if (result?.ok === true) {
      metric = 'success';
      outcome = { kind: 'completed', result: result.result };
    } else if (result !== null && result.ok === false) {
      metric = 'error';
      const error: JobError = {
        code: 'handler_error',
        message: `${result.error.name}: ${result.error.message}`,
        attempt: job.attempts,
      };
      outcome = this.#failure(job, error, result.error.retryable, now);
    } else if (attempt.abortReason === 'timeout') {
      metric = 'timeout';
      const error: JobError = {
        code: 'timeout',
        message: `attempt ${job.attempts} ran longer than ${job.timeoutMs} ms; its thread was terminated`,
        attempt: job.attempts,
      };
      outcome = this.#failure(job, error, true, now);
    } else if (attempt.abortReason === 'shutdown') {
      metric = 'error';
      outcome = {
        kind: 'released',
        error: { code: 'interrupted', message: 'the server shut down during the attempt', attempt: job.attempts },
        retryAt: now,
      };
    } else if (attempt.abortReason !== null) {
      // Cancelled, or the lease was lost: the store already moved the job on.
      this.metrics.attempt(job.type, 'error', seconds);
      return;
    } else {
      metric = 'crash';
      const reason = failure instanceof Error ? failure.message : String(failure);
      const error: JobError = {
        code: 'worker_crashed',
        message: `the worker thread died during attempt ${job.attempts}: ${reason}`,
        attempt: job.attempts,
      };
      outcome = this.#failure(job, error, true, now);
    }
    this.metrics.attempt(job.type, metric, seconds);
    const changes = await this.#store.finish(job.id, lease, outcome, now);
    if (changes === null) return;
    this.#publish(changes);
    if (changes.others.length > 0 || outcome.kind !== 'completed') this.#pump();
  }

  #failure(job: Job, error: JobError, retryable: boolean, now: number): AttemptOutcome {
    if (!retryable || job.attempts >= job.maxAttempts) return { kind: 'failed', error, retryAt: null };
    return { kind: 'failed', error, retryAt: now + retryDelayMs(job.backoff, job.attempts, this.#random) };
  }

  async #heartbeat(): Promise<void> {
    try {
      const now = Date.now();
      if (this.#running.size > 0) {
        const lost = await this.#store.heartbeat([...this.#running.keys()], this.#lease(now));
        for (const id of lost) this.#abort(id, 'lease_lost');
      }
      const recovered = await this.#store.recoverExpired(now);
      for (const job of recovered) this.#publishJob(job);
      if (recovered.length > 0) this.#pump();
    } catch (error) {
      this.#log.error({ err: error }, 'heartbeat failed');
    }
  }

  // ── progress and events ───────────────────────────────────────────────────

  /** Progress reported by a thread (wired to the pool's channel by the composition root). */
  onThreadMessage(message: ChannelMessage): void {
    if (message.kind !== 'progress') return;
    const attempt = this.#running.get(message.jobId);
    if (attempt === undefined || attempt.job.attempts !== message.attempt) return;
    const now = Date.now();
    void this.#store
      .progress(message.jobId, this.#lease(now), { percent: message.percent, message: message.message })
      .then((job) => {
        if (job !== null) this.events.publish(job);
      })
      .catch((error: unknown) => this.#log.warn({ err: error, jobId: message.jobId }, 'storing progress failed'));
  }

  #publish(changes: Changes): void {
    this.#publishJob(changes.job);
    for (const job of changes.others) this.#publishJob(job);
  }

  #publishJob(job: Job): void {
    this.events.publish(job);
    if (isTerminal(job.status)) this.#countFinished(job);
  }

  #countFinished(job: Job): void {
    this.metrics.finished(job.type, job.status as 'completed' | 'failed' | 'cancelled');
    this.#recentFinishes.push(Date.now());
    if (this.#recentFinishes.length > 100_000) this.#recentFinishes.splice(0, 50_000);
  }
}

function notFound(id: string): KilnError {
  return new KilnError('not_found', `no job has the id ${JSON.stringify(id)}`);
}
