import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { retryDelayMs } from '../jobs/backoff.js';
import type { Job, JobError } from '../jobs/model.js';
import type { AttemptOutcome, Changes, ClaimedJob, JobStore, Lease } from '../store/store.js';
import type { WorkerPool } from '../workers/pool.js';
import type { AttemptInput, AttemptResult, ChannelMessage } from '../workers/protocol.js';
import type { AttemptMetricOutcome, KilnMetrics } from './metrics.js';

export interface DispatcherOptions {
  store: JobStore;
  pool: WorkerPool;
  metrics: KilnMetrics;
  threads: number;
  leaseMs: number;
  /** Called with every change the dispatcher makes (running, finished, released dependents). */
  onChanges(changes: Changes): void;
  onError(message: string, error: unknown): void;
  random?: () => number;
  /** Upper bound of one micro-batch's expected run time. */
  batchBudgetMs?: number;
  /** Largest micro-batch. */
  maxBatch?: number;
}

type AbortReason = 'timeout' | 'cancel' | 'shutdown' | 'lease_lost';

/** One message to one thread: one job, or a micro-batch of tiny ones. */
interface Batch {
  jobs: ClaimedJob[];
  controller: AbortController;
  abortReason: AbortReason | null;
  /** Jobs cancelled or whose lease was lost while the batch ran: their outcome is dropped. */
  dropped: Set<string>;
  timer: NodeJS.Timeout;
  startedAt: number;
}

/** A task type's mean attempt time (ms), learnt from finished batches. */
interface TypeCost {
  meanMs: number;
  samples: number;
}

const TINY_JOB_MS = 0.5;
const COST_WEIGHT = 0.2;

/**
 * Runs ready jobs on the pool, pulled by demand.
 *
 * `pump` claims one job per free thread, best first, so piscina's own queue stays
 * empty and priority is decided at the last moment. A finishing batch frees its
 * thread and pumps before its outcomes are even written.
 *
 * Micro-batching: when a claimed job's type is known to be tiny (mean attempt time,
 * measured inside the thread, under TINY_JOB_MS) the dispatcher claims more of the
 * next-best jobs for the same thread, up to `batchBudgetMs` of expected work, and
 * sends them in one message. That claim stops at the first job that is not tiny,
 * which stays first in line for the next free thread, so a batch never holds a slow
 * job and priority order holds across batches. The price: a job that arrives
 * meanwhile waits for at most one running batch (≈ batchBudgetMs) instead of one
 * job. A batch that times out or loses its thread cannot tell which job was at
 * fault, so every job in it is released (the attempt is not counted) and runs alone
 * next, where a timeout or crash is its own; a single-job message keeps exact
 * per-job timeouts and crash attribution.
 *
 * Timers: one per running message (its timeout), one for the store's earliest
 * `runAt`, one heartbeat. Never one per queued job.
 */
export class Dispatcher {
  readonly #store: JobStore;
  readonly #pool: WorkerPool;
  readonly #metrics: KilnMetrics;
  readonly #options: DispatcherOptions;
  readonly #random: () => number;
  readonly #batchBudgetMs: number;
  readonly #maxBatch: number;
  readonly #owner = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  /** job id → the batch it runs in. */
  readonly #byJob = new Map<string, Batch>();
  readonly #batches = new Set<Batch>();
  readonly #settling = new Set<Promise<void>>();
  readonly #costs = new Map<string, TypeCost>();
  /** Jobs given back by a batch that timed out or lost its thread: each runs alone next. */
  readonly #solo = new Set<string>();
  #started = false;
  #paused = false;
  #stopped = false;
  #pumping = false;
  #pumpAgain = false;
  #dueTimer: NodeJS.Timeout | null = null;
  #dueAt: number | null = null;
  #heartbeatTimer: NodeJS.Timeout | null = null;
  #idleWaiters: Array<() => void> = [];
  #messagesSent = 0;
  #attemptsSent = 0;

  constructor(options: DispatcherOptions) {
    this.#options = options;
    this.#store = options.store;
    this.#pool = options.pool;
    this.#metrics = options.metrics;
    this.#random = options.random ?? Math.random;
    this.#batchBudgetMs = options.batchBudgetMs ?? 2;
    this.#maxBatch = options.maxBatch ?? 100;
  }

  /** Starts dispatching, unless the store says dispatch was left paused. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#paused = await this.#store.paused();
    const beat = Math.max(100, Math.floor(this.#options.leaseMs / 3));
    this.#heartbeatTimer = setInterval(() => void this.#heartbeat(), beat);
    this.#heartbeatTimer.unref();
    this.pump();
  }

  /**
   * Stop dispatching, give running batches `graceMs` to finish, release the rest
   * (`interrupted`, attempt not counted), and wait until every outcome is written.
   */
  async stop(graceMs: number): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#heartbeatTimer !== null) clearInterval(this.#heartbeatTimer);
    if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
    this.#heartbeatTimer = null;
    this.#dueTimer = null;
    if (this.#batches.size > 0) {
      let graceTimer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.#whenIdle(),
        new Promise<void>((resolve) => {
          graceTimer = setTimeout(resolve, graceMs);
        }),
      ]);
      clearTimeout(graceTimer);
      for (const batch of [...this.#batches]) this.#abortBatch(batch, 'shutdown');
    }
    while (this.#settling.size > 0) await Promise.allSettled([...this.#settling]);
  }

  get paused(): boolean {
    return this.#paused;
  }

  async pause(): Promise<void> {
    this.#paused = true;
    await this.#store.setPaused(true);
  }

  async resume(): Promise<void> {
    this.#paused = false;
    await this.#store.setPaused(false);
    this.pump();
  }

  /** Messages sent to threads and attempts they carried, since start: their ratio is the mean batch size. */
  get stats(): { messages: number; attempts: number } {
    return { messages: this.#messagesSent, attempts: this.#attemptsSent };
  }

  /** Threads running a message now. */
  get busyThreads(): number {
    return this.#batches.size;
  }

  /**
   * The store already moved the job on (cancelled, or its lease is gone): stop its
   * attempt. A job alone in its message has its thread terminated; a job in a
   * micro-batch (which ends within milliseconds) just has its outcome dropped.
   */
  abandon(id: string, reason: 'cancel' | 'lease_lost'): void {
    const batch = this.#byJob.get(id);
    if (batch === undefined) return;
    batch.dropped.add(id);
    if (batch.jobs.length === 1) this.#abortBatch(batch, reason);
  }

  /** Progress reported by a thread. */
  onThreadMessage(message: ChannelMessage): void {
    if (message.kind !== 'progress') return;
    const batch = this.#byJob.get(message.jobId);
    const job = batch?.jobs.find((j) => j.id === message.jobId);
    if (job === undefined || job.attempts !== message.attempt) return;
    const now = Date.now();
    void this.#store
      .progress(message.jobId, this.#lease(now), { percent: message.percent, message: message.message })
      .then((updated) => {
        if (updated !== null) this.#options.onChanges({ job: updated, others: [] });
      })
      .catch((error: unknown) => this.#options.onError('storing progress failed', error));
  }

  /** Claim work for every free thread; re-runs itself if asked while busy. */
  pump(): void {
    if (!this.#started || this.#stopped) return;
    if (this.#pumping) {
      this.#pumpAgain = true;
      return;
    }
    this.#pumping = true;
    void this.#pumpLoop().finally(() => {
      this.#pumping = false;
      // A pump asked for while the loop was finishing must not be lost.
      if (this.#pumpAgain) this.pump();
    });
  }

  #lease(now: number): Lease {
    return { owner: this.#owner, expiresAt: now + this.#options.leaseMs };
  }

  async #pumpLoop(): Promise<void> {
    try {
      do {
        this.#pumpAgain = false;
        if (this.#paused || this.#stopped) return;
        const free = this.#options.threads - this.#batches.size;
        if (free <= 0) continue;
        const now = Date.now();
        const claimed = await this.#store.claim(free, this.#lease(now), now);
        for (const job of claimed) {
          const batch = [job];
          await this.#extendBatch(batch, now);
          this.#run(batch, now);
        }
        if (claimed.length === free) this.#pumpAgain = true;
      } while (this.#pumpAgain);
    } catch (error) {
      this.#options.onError('dispatch failed; retrying on the next change', error);
    } finally {
      await this.#armDueTimer();
    }
  }

  /**
   * Grow a batch of tiny jobs with the next-best ready jobs, up to the budget. The
   * claim stops at the first job that is not tiny (or must run alone): it stays first
   * in line for the next free thread, so a batch never holds a slow job.
   */
  async #extendBatch(batch: ClaimedJob[], now: number): Promise<void> {
    const first = batch[0];
    if (first === undefined || this.#solo.has(first.id)) return;
    let expectedMs = this.#tinyCost(first.type);
    if (expectedMs === null) return;
    const accept = (job: { id: string; type: string }) => !this.#solo.has(job.id) && this.#tinyCost(job.type) !== null;
    while (batch.length < this.#maxBatch && expectedMs < this.#batchBudgetMs) {
      const room = Math.min(
        this.#maxBatch - batch.length,
        Math.max(1, Math.floor((this.#batchBudgetMs - expectedMs) / Math.max(expectedMs / batch.length, 0.001))),
      );
      const more = await this.#store.claim(room, this.#lease(now), now, accept);
      for (const job of more) {
        batch.push(job);
        expectedMs += this.#tinyCost(job.type) ?? this.#batchBudgetMs;
      }
      if (more.length < room) return;
    }
  }

  /** The mean cost of a type known to be tiny; null if it is not (or not known yet). */
  #tinyCost(type: string | undefined): number | null {
    if (type === undefined) return null;
    const cost = this.#costs.get(type);
    if (cost === undefined || cost.samples < 3 || cost.meanMs > TINY_JOB_MS) return null;
    return Math.max(cost.meanMs, 0.001);
  }

  /** Learn each type's cost from the time its attempts took inside the thread. */
  #learnCost(batch: Batch, results: AttemptResult[], elapsedMs: number): void {
    for (const [index, job] of batch.jobs.entries()) {
      const ms = results[index]?.ms ?? elapsedMs / batch.jobs.length;
      const cost = this.#costs.get(job.type);
      if (cost === undefined) this.#costs.set(job.type, { meanMs: ms, samples: 1 });
      else {
        cost.meanMs += COST_WEIGHT * (ms - cost.meanMs);
        cost.samples += 1;
      }
    }
  }

  async #armDueTimer(): Promise<void> {
    if (this.#stopped || this.#paused) return;
    if (this.#batches.size >= this.#options.threads) {
      // No thread is free: the next batch to end pumps (which promotes due jobs), so a
      // timer would only wake to find nothing to do.
      if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
      this.#dueTimer = null;
      this.#dueAt = null;
      return;
    }
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
      this.pump();
    }, delay);
    this.#dueTimer.unref();
  }

  #run(jobs: ClaimedJob[], now: number): void {
    const controller = new AbortController();
    let timeoutMs = Number.POSITIVE_INFINITY;
    for (const job of jobs) timeoutMs = Math.min(timeoutMs, job.timeoutMs);
    const batch: Batch = {
      jobs,
      controller,
      abortReason: null,
      dropped: new Set(),
      timer: setTimeout(() => this.#abortBatch(batch, 'timeout'), timeoutMs),
      startedAt: now,
    };
    this.#batches.add(batch);
    this.#messagesSent += 1;
    this.#attemptsSent += jobs.length;
    const attempts: AttemptInput[] = [];
    for (const job of jobs) {
      this.#byJob.set(job.id, batch);
      if (job.readyAt !== null) this.#metrics.waited(job.type, Math.max(0, now - job.readyAt) / 1000);
      this.#options.onChanges({ job, others: [] });
      attempts.push({
        jobId: job.id,
        type: job.type,
        attempt: job.attempts,
        payload: job.payload,
        parents: job.parents,
        timeoutMs: job.timeoutMs,
      });
    }
    const settled = this.#pool
      .run({ attempts }, controller.signal)
      .then(
        (results) => this.#settle(batch, results, null),
        (error: unknown) => this.#settle(batch, null, error),
      )
      .catch((error: unknown) => this.#options.onError('recording an attempt failed', error));
    this.#settling.add(settled);
    void settled.finally(() => this.#settling.delete(settled));
  }

  #abortBatch(batch: Batch, reason: AbortReason): void {
    if (batch.abortReason !== null || !this.#batches.has(batch)) return;
    batch.abortReason = reason;
    for (const job of batch.jobs) this.#pool.notifyAbort(job.id, reason);
    batch.controller.abort(new Error(`attempt aborted: ${reason}`));
  }

  #whenIdle(): Promise<void> {
    if (this.#batches.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  async #settle(batch: Batch, results: AttemptResult[] | null, failure: unknown): Promise<void> {
    clearTimeout(batch.timer);
    this.#batches.delete(batch);
    for (const job of batch.jobs) {
      if (this.#byJob.get(job.id) === batch) this.#byJob.delete(job.id);
    }
    if (this.#batches.size === 0) {
      for (const resolve of this.#idleWaiters.splice(0)) resolve();
    }
    this.pump();

    const now = Date.now();
    const elapsedMs = now - batch.startedAt;
    if (results !== null) this.#learnCost(batch, results, elapsedMs);
    if (batch.jobs.length === 1) this.#solo.delete(batch.jobs[0]?.id ?? '');
    else if (results === null && batch.abortReason !== 'shutdown') {
      // The thread cannot say which job was at fault: each runs alone next, where a
      // timeout or crash is its own (and uses up its attempt).
      for (const job of batch.jobs) this.#solo.add(job.id);
    }
    const seconds = elapsedMs / 1000 / batch.jobs.length;
    const lease = this.#lease(now);
    let pumpAfter = false;
    const writes = batch.jobs.map(async (job, index) => {
      if (batch.dropped.has(job.id)) {
        this.#metrics.attempt(job.type, 'error', seconds);
        return;
      }
      const [outcome, metric] = this.#outcome(batch, job, results?.[index] ?? null, failure, now);
      this.#metrics.attempt(job.type, metric, seconds);
      const changes = await this.#store.finish(job.id, lease, outcome, now);
      if (changes === null) return;
      this.#options.onChanges(changes);
      if (changes.others.length > 0 || outcome.kind !== 'completed') pumpAfter = true;
    });
    await Promise.all(writes);
    if (pumpAfter) this.pump();
  }

  #outcome(
    batch: Batch,
    job: ClaimedJob,
    result: AttemptResult | null,
    failure: unknown,
    now: number,
  ): [AttemptOutcome, AttemptMetricOutcome] {
    if (result?.ok === true) return [{ kind: 'completed', result: result.result }, 'success'];
    if (result !== null && result.ok === false) {
      const error: JobError = {
        code: 'handler_error',
        message: `${result.error.name}: ${result.error.message}`,
        attempt: job.attempts,
      };
      return [this.#failure(job, error, result.error.retryable, now), 'error'];
    }
    const reason = batch.abortReason;
    if (reason === 'shutdown' || batch.jobs.length > 1) {
      const message =
        reason === 'shutdown'
          ? 'the server shut down during the attempt'
          : `the batch this attempt ran in ${reason === 'timeout' ? 'timed out' : 'lost its thread'}; it runs again alone`;
      const error: JobError = { code: 'interrupted', message, attempt: job.attempts };
      return [{ kind: 'released', error, retryAt: now }, reason === 'timeout' ? 'timeout' : 'crash'];
    }
    if (reason === 'timeout') {
      const error: JobError = {
        code: 'timeout',
        message: `attempt ${job.attempts} ran longer than ${job.timeoutMs} ms; its thread was terminated`,
        attempt: job.attempts,
      };
      return [this.#failure(job, error, true, now), 'timeout'];
    }
    const cause = failure instanceof Error ? failure.message : String(failure);
    const error: JobError = {
      code: 'worker_crashed',
      message: `the worker thread died during attempt ${job.attempts}: ${cause}`,
      attempt: job.attempts,
    };
    return [this.#failure(job, error, true, now), 'crash'];
  }

  #failure(job: Job, error: JobError, retryable: boolean, now: number): AttemptOutcome {
    if (!retryable || job.attempts >= job.maxAttempts) return { kind: 'failed', error, retryAt: null };
    return { kind: 'failed', error, retryAt: now + retryDelayMs(job.backoff, job.attempts, this.#random) };
  }

  async #heartbeat(): Promise<void> {
    try {
      const now = Date.now();
      if (this.#byJob.size > 0) {
        const lost = await this.#store.heartbeat([...this.#byJob.keys()], this.#lease(now));
        for (const id of lost) this.abandon(id, 'lease_lost');
      }
      const recovered = await this.#store.recoverExpired(now);
      for (const job of recovered) {
        // One of ours whose lease ran out (the event loop stalled): it runs again elsewhere.
        this.abandon(job.id, 'lease_lost');
        this.#options.onChanges({ job, others: [] });
      }
      if (recovered.length > 0) this.pump();
    } catch (error) {
      this.#options.onError('heartbeat failed', error);
    }
  }
}
