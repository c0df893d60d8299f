import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { FaultLog, type FaultLogger } from '../fault-log.js';
import type { JobError } from '../contract/job.js';
import type { AttemptOutcome, ClaimedJob, FinishItem, JobStore } from '../store/store.js';
import { LOOK_AHEAD_DEPTH, type WorkerPool } from '../workers/pool.js';
import type { AttemptInput, TaskAnswer } from '../workers/protocol.js';
import { settleWithin } from './clock.js';
import { LeaseKeeper } from './lease-keeper.js';
import type { KilnMetrics } from './metrics.js';
import { type MicroBatchOptions, MicroBatching } from './micro-batch.js';
import { refusalReason } from './refused-outcome.js';
import { type AttemptEnd, decideAttempt } from './retry-policy.js';
import { TaskLimiter } from './task-limits.js';

export interface DispatcherOptions {
  store: JobStore;
  pool: WorkerPool;
  metrics: KilnMetrics;
  threads: number;
  leaseMs: number;
  /** A shared store's node lease (see LeaseKeeper); null or absent for a store of one process. */
  nodeLeaseMs?: number | null;
  /** One-off failures (an attempt that could not be recorded). */
  onError(message: string, error: unknown): void;
  /** Where the faults of the retry loops (claims, outcomes, heartbeats) are logged. */
  log: FaultLogger;
  random?: () => number;
  microBatch?: MicroBatchOptions;
  /** The registered task types (a shared store that applies task limits claims type by type). */
  taskTypes?: () => readonly string[];
  /** Whether a task type runs each attempt on a fresh thread (never micro-batched). */
  isolated?: (type: string) => boolean;
}

type AbortReason = 'timeout' | 'cancel' | 'shutdown' | 'lease_lost';

/** Why a thread was stopped, for the log line of its end. */
const ABORT_CAUSES: Record<Exclude<AbortReason, 'timeout'>, string> = {
  cancel: 'its job was cancelled',
  shutdown: 'the server shut down before the attempt finished',
  lease_lost: "its job's lease was lost",
};

/** One message to one thread: one job, or a micro-batch of tiny ones. */
interface Batch {
  jobs: ClaimedJob[];
  /** Its word in the pool's attempt slots: whether the thread has started it. */
  slot: number;
  /** Taken back before its thread started it: the jobs go back first in line. */
  recalled: boolean;
  /** The best priority in it (claims go best first: the first job's). */
  priority: number;
  abortReason: AbortReason | null;
  /** Jobs cancelled or whose lease was lost while the batch ran: their outcome is dropped. */
  dropped: Set<string>;
  timer: NodeJS.Timeout;
  /** When this process claimed its jobs (Date.now()): their leases run from then at least. */
  claimedAt: number;
}

/**
 * Runs ready jobs on the pool, pulled by demand.
 *
 * `pump` claims one batch per free thread, best first, so piscina's own queue stays
 * empty and priority is decided at the last moment. A finishing batch frees its
 * thread and pumps before its outcomes are even written.
 *
 * Micro-batching (micro-batch.ts): jobs of types known to be tiny share one message
 * to a thread, up to a budget of expected work; the store's claim stops a batch at the
 * first job that does not qualify, which stays first in line, so a batch never holds
 * a slow job and priority order holds across batches. The price: a job that arrives
 * meanwhile waits for at most one running batch (≈ the budget) instead of one job.
 *
 * Look-ahead: each thread holds one message beyond the one it runs and starts it the
 * moment it finishes the one before, without waiting for this thread to win a core
 * (the hand-off gap). A look-ahead that has not started is taken back (recalled, no
 * thread terminated) when a better job arrives, so a new priority-9 job still waits
 * for at most one running attempt per thread: recalled jobs go back first in line.
 * Whether a message has started is one word of shared memory per message
 * (workers/slots.ts), which also tells, when a thread dies, which of its messages ran.
 *
 * Starts are recorded: when a thread starts a message, its jobs' starts go to the store
 * with its next group of writes. An attempt counts against `maxAttempts` only once its
 * start is recorded (or it ends): should this server die first, the rescue gives the
 * attempt back (retry-policy.ts, decideExpired).
 *
 * Each attempt has one timeout, here, counted from when its thread started it: when it
 * fires, handlers that await see ctx.signal abort and the thread is terminated at once.
 *
 * Timers: one per running message (its timeout), one for the store's earliest
 * `runAt`, the lease keeper's heartbeat. Never one per queued job.
 */
export class Dispatcher {
  readonly #store: JobStore;
  readonly #pool: WorkerPool;
  readonly #metrics: KilnMetrics;
  readonly #options: DispatcherOptions;
  readonly #random: () => number;
  readonly #micro: MicroBatching;
  readonly #leases: LeaseKeeper;
  readonly owner = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  /** Task limits (concurrency, rate) as this server applies them. */
  readonly limiter = new TaskLimiter();
  #limitTimer: NodeJS.Timeout | null = null;
  #limitWakeAt: number | null = null;
  /** job id → the batch it runs in. */
  readonly #byJob = new Map<string, Batch>();
  readonly #batches = new Set<Batch>();
  readonly #settling = new Set<Promise<void>>();
  /** Outcomes the store could not take yet, by job id. */
  readonly #unwritten = new Map<string, FinishItem>();
  #rewriteTimer: NodeJS.Timeout | null = null;
  readonly #claimFault: FaultLog;
  readonly #writeFault: FaultLog;
  /** Set while claims back off after a failure: changes do not claim then, the timer does. */
  #claimRetryTimer: NodeJS.Timeout | null = null;
  #recalled = 0;
  #started = false;
  #paused = false;
  #stopped = false;
  #pumping = false;
  #pumpAgain = false;
  #dueTimer: NodeJS.Timeout | null = null;
  #dueAt: number | null = null;
  #idleWaiters: Array<() => void> = [];
  #messagesSent = 0;
  #attemptsSent = 0;

  constructor(options: DispatcherOptions) {
    this.#options = options;
    this.#store = options.store;
    this.#pool = options.pool;
    this.#metrics = options.metrics;
    this.#random = options.random ?? Math.random;
    this.#micro = new MicroBatching(options.microBatch ?? {});
    this.#claimFault = new FaultLog(options.log, { what: 'dispatch', random: this.#random });
    this.#writeFault = new FaultLog(options.log, { what: 'writing outcomes', random: this.#random });
    this.#leases = new LeaseKeeper({
      store: options.store,
      owner: this.owner,
      leaseMs: options.leaseMs,
      nodeLeaseMs: options.nodeLeaseMs ?? null,
      running: () => [...this.#byJob.keys(), ...this.#unwritten.keys()],
      lost: (id) => this.abandon(id, 'lease_lost'),
      held: (id) => {
        const batch = this.#byJob.get(id);
        const job = batch?.jobs.find((j) => j.id === id);
        if (batch !== undefined && job !== undefined) return { attempt: job.attempts, claimedAt: batch.claimedAt };
        const unwritten = this.#unwritten.get(id);
        return unwritten === undefined ? undefined : { attempt: unwritten.attempt, claimedAt: 0 };
      },
      log: options.log,
    });
  }

  /** Starts dispatching, unless the store says dispatch was left paused. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    this.#paused = await this.#store.paused();
    // The first heartbeat also makes this server known to the others sharing the store.
    await this.#leases.beat();
    this.#leases.start();
    this.pump();
  }

  /**
   * Stop dispatching, give running batches `graceMs` to finish, release the rest
   * (`interrupted`, attempt not counted), and wait until every outcome is written.
   */
  async stop(graceMs: number): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#limitTimer !== null) clearTimeout(this.#limitTimer);
    this.#limitTimer = null;
    if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
    this.#dueTimer = null;
    if (this.#claimRetryTimer !== null) clearTimeout(this.#claimRetryTimer);
    this.#claimRetryTimer = null;
    // Look-aheads that have not started go back to the queue rather than wait for the grace.
    for (const batch of this.#batches) this.#recall(batch);
    if (this.#batches.size > this.#recalled) {
      await settleWithin(this.#whenIdle(), graceMs);
      for (const batch of [...this.#batches]) this.#abortBatch(batch, 'shutdown');
    }
    while (this.#settling.size > 0) await Promise.allSettled([...this.#settling]);
    if (this.#rewriteTimer !== null) clearTimeout(this.#rewriteTimer);
    this.#rewriteTimer = null;
    // Outcomes still unwritten get one last try; if the store is still down they stay
    // running in the file and the next start retries them as interrupted.
    const unwritten = [...this.#unwritten.values()];
    this.#unwritten.clear();
    if (unwritten.length > 0) await this.#store.finish(unwritten).catch(() => undefined);
    this.#leases.stop();
  }

  get paused(): boolean {
    return this.#paused;
  }

  async pause(): Promise<void> {
    await this.#store.setPaused(true);
    this.#paused = true;
  }

  /** Another server paused or resumed dispatch (the store already refuses claims while paused). */
  pausedElsewhere(paused: boolean): void {
    this.#paused = paused;
    if (!paused) this.pump();
  }

  async resume(): Promise<void> {
    await this.#store.setPaused(false);
    this.#paused = false;
    this.pump();
  }

  /** Messages sent to threads and attempts they carried, since start: their ratio is the mean batch size. */
  get stats(): { messages: number; attempts: number } {
    return { messages: this.#messagesSent, attempts: this.#attemptsSent };
  }

  /** Threads running a message now. */
  get busyThreads(): number {
    return Math.min(this.#options.threads, this.#batches.size - this.#recalled);
  }

  /**
   * A job of `priority` became ready: take back every look-ahead of lower priority that
   * has not started. Taking back only as many as there are new jobs is not enough: the
   * first thread to come free would start its own look-ahead before the new job reached it.
   */
  preempt(priority: number): void {
    let recalled = false;
    for (const batch of this.#batches) {
      if (!batch.recalled && batch.priority < priority && this.#recall(batch)) recalled = true;
    }
    if (recalled) this.pump();
  }

  /**
   * Another server changed a job this one runs (a cancel, a rescue): ask the store which
   * leases still hold, and stop the attempts whose lease is gone. News from other servers
   * can be late, so it is checked against the store rather than acted on.
   */
  checkLeases(): void {
    if (this.#started && !this.#stopped) void this.#leases.beat();
  }

  /** The job reached a terminal status: nothing about it needs remembering. */
  forget(id: string): void {
    this.#micro.setSolo(id, false);
  }

  /** Whether this job's attempt runs (or waits as a look-ahead) here now. */
  runs(id: string): boolean {
    return this.#byJob.has(id);
  }

  /**
   * The store moved the job on (cancelled, its lease is gone, its claim was lost):
   * stop its attempt: a look-ahead is taken back; a running message has its thread
   * terminated, except that a cancelled job inside a micro-batch only has its outcome
   * dropped.
   */
  abandon(id: string, reason: 'cancel' | 'lease_lost'): void {
    const batch = this.#byJob.get(id);
    if (batch === undefined) return;
    batch.dropped.add(id);
    if (this.#recall(batch)) return;
    // A cancelled job in a micro-batch just has its outcome dropped (the batch ends within
    // milliseconds); a lost lease means the job may be handed out again at once, so its
    // thread is stopped even then, and the rest of the batch runs again, alone.
    if (batch.jobs.length === 1 || reason === 'lease_lost') this.#abortBatch(batch, reason);
  }

  /** Progress reported by a thread. */
  onProgress(jobId: string, attempt: number, percent: number, message: string | null): void {
    const batch = this.#byJob.get(jobId);
    if (batch === undefined) return;
    this.#store.progress(jobId, attempt, this.owner, { percent, message });
  }

  /**
   * Claim work for every free thread; re-runs itself if asked while busy. After a failed
   * claim it waits for its back-off timer, however many changes come meanwhile.
   */
  pump(): void {
    if (!this.#started || this.#stopped || this.#claimRetryTimer !== null) return;
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

  async #pumpLoop(): Promise<void> {
    try {
      do {
        this.#pumpAgain = false;
        if (this.#paused || this.#stopped) return;
        // Recalled messages free their thread's place at once but keep their slot until
        // their thread gets to them: never post more messages than there are slots.
        const free = Math.min(
          this.#options.threads * LOOK_AHEAD_DEPTH - (this.#batches.size - this.#recalled),
          this.#pool.slots.available,
        );
        if (free <= 0) continue;
        const allowance = this.limiter.active ? this.limiter.allowance() : null;
        const passed = new Set<string>();
        const batches = await this.#store.claim({
          owner: this.owner,
          leaseMs: this.#options.leaseMs,
          batches: free,
          micro: this.#micro.request(),
          ...(allowance === null
            ? {}
            : {
                allowance: allowance.left,
                limits: this.limiter.limits(),
                types: this.#options.taskTypes?.() ?? [],
                passedOver: (type: string) => passed.add(type),
              }),
        });
        // A claim answered while the store cannot write (it hands out nothing, or claims it
        // then loses) does not end the fault: only a store that writes again does.
        if (this.#store.available) this.#claimFault.succeeded();
        for (const type of passed) {
          this.#metrics.limited(type, allowance?.held.get(type) ?? 'concurrency');
        }
        // A job held by its rate limit is claimed when a token comes back; one held by its
        // concurrency when an attempt of its type ends, which pumps anyway.
        this.#armLimitTimer(passed.size > 0 ? (allowance?.wakeAt ?? null) : null);
        if (this.#stopped) {
          // Stopped while the claim read its jobs: they go back, unrun.
          for (const jobs of batches) this.#giveBackJobs(jobs, new Set());
          return;
        }
        for (const jobs of batches) this.#run(jobs);
        if (batches.length === free) this.#pumpAgain = true;
      } while (this.#pumpAgain);
    } catch (error) {
      const waitMs = this.#claimFault.failed(error);
      this.#pumpAgain = false;
      this.#claimRetryTimer = setTimeout(() => {
        this.#claimRetryTimer = null;
        this.pump();
      }, waitMs);
      this.#claimRetryTimer.unref();
    } finally {
      this.#armDueTimer();
    }
  }

  #armLimitTimer(wakeAt: number | null): void {
    if (wakeAt === null || this.#stopped) return;
    if (this.#limitTimer !== null && this.#limitWakeAt !== null && this.#limitWakeAt <= wakeAt) return;
    if (this.#limitTimer !== null) clearTimeout(this.#limitTimer);
    this.#limitWakeAt = wakeAt;
    this.#limitTimer = setTimeout(
      () => {
        this.#limitTimer = null;
        this.#limitWakeAt = null;
        this.pump();
      },
      Math.max(1, wakeAt - Date.now()),
    );
    this.#limitTimer.unref();
  }

  /** Attempts of each type this server runs now (a look-ahead included). */
  runningByType(): Map<string, number> {
    const running = new Map<string, number>();
    for (const batch of this.#batches) {
      if (batch.recalled) continue;
      for (const job of batch.jobs) running.set(job.type, (running.get(job.type) ?? 0) + 1);
    }
    return running;
  }

  #armDueTimer(): void {
    if (this.#stopped || this.#paused) return;
    if (this.#batches.size - this.#recalled >= this.#options.threads * LOOK_AHEAD_DEPTH) {
      // No thread is free: the next batch to end pumps (which promotes due jobs), so a
      // timer would only wake to find nothing to do.
      if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
      this.#dueTimer = null;
      this.#dueAt = null;
      return;
    }
    void this.#store.nextDueAt().then(
      (dueAt) => {
        if (this.#stopped || this.#paused) return;
        if (dueAt === this.#dueAt && this.#dueTimer !== null) return;
        if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
        this.#dueTimer = null;
        this.#dueAt = dueAt;
        if (dueAt === null) return;
        const delay = Math.min(Math.max(0, dueAt - this.#store.now()), 2 ** 31 - 1);
        this.#dueTimer = setTimeout(() => {
          this.#dueTimer = null;
          this.#dueAt = null;
          this.pump();
        }, delay);
        this.#dueTimer.unref();
      },
      () => {
        // The store cannot answer now; it says when it is back ('ready'), which pumps and re-arms.
      },
    );
  }

  #run(jobs: ClaimedJob[]): void {
    const slot = this.#pool.slots.acquire();
    if (slot === null) {
      // The claim asked for no more batches than there are slots; should one be missing
      // all the same, the jobs go back rather than wait for a thread.
      this.#giveBackJobs(jobs, new Set());
      return;
    }
    let timeoutMs = Number.POSITIVE_INFINITY;
    for (const job of jobs) timeoutMs = Math.min(timeoutMs, job.timeoutMs);
    const batch: Batch = {
      jobs,
      slot,
      claimedAt: Date.now(),
      recalled: false,
      priority: jobs[0]?.priority ?? 0,
      abortReason: null,
      dropped: new Set(),
      timer: this.#timeout(() => batch, timeoutMs, timeoutMs),
    };
    this.#batches.add(batch);
    if (this.limiter.active) {
      for (const job of jobs) this.limiter.claimed(job.type, job.id, () => this.#pool.slots.startedAt(slot));
    }
    this.#messagesSent += 1;
    this.#attemptsSent += jobs.length;
    void this.#pool.slots.leftPosted(slot).then(() => this.#recordStart(batch));
    const attempts: AttemptInput[] = [];
    for (const job of jobs) {
      this.#byJob.set(job.id, batch);
      attempts.push({
        jobId: job.id,
        type: job.type,
        attempt: job.attempts,
        payloadText: job.payloadText,
        parents: job.parents,
      });
    }
    const settled = this.#pool
      .run({ attempts, slot })
      .then(
        (answer) => this.#settle(batch, answer, null),
        (error: unknown) => this.#settle(batch, null, error),
      )
      .catch((error: unknown) => this.#options.onError('recording an attempt failed', error));
    this.#settling.add(settled);
    void settled.finally(() => this.#settling.delete(settled));
  }

  /** The thread started the message: its attempts count from now, whatever becomes of this server. */
  #recordStart(batch: Batch): void {
    // A settled batch's finish records its start itself (and its slot may serve another message by now).
    if (!this.#batches.has(batch) || batch.recalled) return;
    const startedAt = this.#pool.slots.startedAt(batch.slot);
    if (startedAt === null) return;
    const items = batch.jobs
      .filter((job) => !batch.dropped.has(job.id))
      .map((job) => ({ id: job.id, attempt: job.attempts, owner: this.owner, startedAt }));
    // A start the store could not take leaves the attempt to be given back should this
    // server die before it ends; the store's failure is reported by the writes that wait.
    this.#store.started(items).catch(() => undefined);
  }

  /**
   * The attempt's one timer, counted from when its thread started it: a look-ahead may
   * wait for the message before it, so until it starts the timer only re-arms itself.
   */
  #timeout(batch: () => Batch, delayMs: number, timeoutMs: number): NodeJS.Timeout {
    return setTimeout(
      () => {
        const current = batch();
        if (current.recalled || !this.#batches.has(current)) return;
        const started = this.#pool.slots.startedAt(current.slot);
        const left = started === null ? timeoutMs : started + timeoutMs - Date.now();
        if (left <= 0) this.#abortBatch(current, 'timeout');
        else current.timer = this.#timeout(batch, left, timeoutMs);
      },
      // setTimeout's range ends at 2^31-1 ms; timeoutMs is at most a day.
      Math.min(Math.max(delayMs, 1), 2 ** 31 - 1),
    );
  }

  /**
   * Take back a look-ahead its thread has not started; false if it has. Its jobs go
   * back first in line at once: the slot guarantees the thread will skip them.
   */
  #recall(batch: Batch): boolean {
    if (batch.recalled) return true;
    if (batch.abortReason !== null || !this.#pool.slots.recall(batch.slot)) return false;
    batch.recalled = true;
    this.#recalled += 1;
    this.#giveBack(batch);
    return true;
  }

  /** Jobs of a message that never started go back first in line, their attempts not counted. */
  #giveBack(batch: Batch): void {
    for (const job of batch.jobs) {
      if (this.#byJob.get(job.id) === batch) this.#byJob.delete(job.id);
    }
    this.#giveBackJobs(batch.jobs, batch.dropped);
  }

  #giveBackJobs(jobs: ClaimedJob[], dropped: ReadonlySet<string>): void {
    for (const job of jobs) this.limiter.ended(job.type, job.id, null);
    const back = jobs.filter((job) => !dropped.has(job.id));
    const released = this.#store
      .release(back.map((job) => ({ id: job.id, attempt: job.attempts, owner: this.owner })))
      .then(
        () => this.pump(),
        // The store cannot take them back now: they go the way of outcomes, kept (their
        // leases with them) and written again until it can, as attempts given back.
        () => this.#write(back.map((job) => this.#givenBack(job))),
      );
    this.#settling.add(released);
    void released.finally(() => this.#settling.delete(released));
  }

  #givenBack(job: ClaimedJob): FinishItem {
    const error: JobError = {
      code: 'interrupted',
      message: 'claimed, then given back before it started',
      attempt: job.attempts,
    };
    const outcome: AttemptOutcome = { kind: 'released', error, retryAt: this.#store.now() };
    return { id: job.id, attempt: job.attempts, owner: this.owner, outcome };
  }

  #abortBatch(batch: Batch, reason: AbortReason): void {
    // A recalled message never runs; aborting it would terminate the thread it waits on.
    if (batch.recalled || batch.abortReason !== null || !this.#batches.has(batch)) return;
    batch.abortReason = reason;
    for (const job of batch.jobs) this.#pool.notifyAbort(job.id, reason);
    const cause =
      reason === 'timeout'
        ? `ran longer than its timeout of ${Math.min(...batch.jobs.map((job) => job.timeoutMs))} ms`
        : ABORT_CAUSES[reason];
    this.#pool.stop(batch.slot, reason === 'timeout' ? 'timeout' : 'stopped', cause);
  }

  #whenIdle(): Promise<void> {
    if (this.#batches.size === this.#recalled) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  async #settle(batch: Batch, answer: TaskAnswer | null, failure: unknown): Promise<void> {
    clearTimeout(batch.timer);
    const started = this.#pool.slots.startedAt(batch.slot);
    for (const job of batch.jobs) this.limiter.ended(job.type, job.id, started);
    this.#pool.slots.release(batch.slot);
    this.#batches.delete(batch);
    if (batch.recalled) this.#recalled -= 1;
    for (const job of batch.jobs) {
      if (this.#byJob.get(job.id) === batch) this.#byJob.delete(job.id);
    }
    if (this.#batches.size === this.#recalled) {
      for (const resolve of this.#idleWaiters.splice(0)) resolve();
    }
    this.pump();

    if (answer === 'recalled' || started === null) {
      // Never started: a recalled message was given back when it was recalled; one whose
      // thread died before it got to it is given back now.
      if (!batch.recalled) this.#giveBack(batch);
      return;
    }
    const results = answer;
    const now = this.#store.now();
    const elapsedMs = Date.now() - started;
    const alone = batch.jobs.length === 1;
    for (const [index, job] of batch.jobs.entries()) {
      if (job.readyAt !== null) this.#metrics.waited(job.type, Math.max(0, started - job.readyAt) / 1000);
      // An isolated type is never learned, so never tiny: each of its attempts needs a thread of its own.
      if (results !== null && this.#options.isolated?.(job.type) !== true) {
        this.#micro.learn(job.type, results[index]?.ms ?? elapsedMs / batch.jobs.length);
      }
      // A broken batch cannot say which job was at fault: each runs alone next.
      this.#micro.setSolo(job.id, !alone && results === null && batch.abortReason !== 'shutdown');
    }
    const seconds = elapsedMs / 1000 / batch.jobs.length;
    const items: FinishItem[] = [];
    for (const [index, job] of batch.jobs.entries()) {
      if (batch.dropped.has(job.id)) {
        this.#metrics.attempt(job.type, 'error', seconds);
        continue;
      }
      // A handler that saw the abort (ctx.signal) and failed because of it, before its
      // thread was stopped, failed of the abort: the abort's reason decides.
      const answered = results?.[index];
      const result = answered !== undefined && (batch.abortReason === null || answered.ok) ? answered : undefined;
      let end: AttemptEnd;
      if (result !== undefined) end = { kind: 'answered', result };
      else if (batch.abortReason === 'timeout' || batch.abortReason === 'shutdown') {
        end = { kind: 'aborted', reason: batch.abortReason };
      } else end = { kind: 'crashed', cause: failure instanceof Error ? failure.message : String(failure) };
      const { outcome, metric } = decideAttempt(job, end, alone, now, this.#random);
      this.#metrics.attempt(job.type, metric, seconds);
      items.push({ id: job.id, attempt: job.attempts, owner: this.owner, outcome, startedAt: started });
    }
    if (items.length > 0) await this.#write(items);
  }

  /**
   * Writes outcomes. If the store cannot take them now (its thread is restarting, a
   * transaction was lost), they are kept, their leases kept alive, and written again,
   * with back-off, until the store takes them or refuses them (their lease is gone): an
   * attempt that ended is never run again only because the store was briefly down.
   */
  async #write(items: FinishItem[]): Promise<void> {
    let finished: Awaited<ReturnType<JobStore['finish']>>;
    try {
      finished = await this.#store.finish(items);
    } catch (error) {
      const waitMs = this.#writeFault.failed(error);
      for (const item of items) this.#unwritten.set(item.id, item);
      this.#rewriteTimer ??= setTimeout(() => {
        this.#rewriteTimer = null;
        const again = [...this.#unwritten.values()];
        this.#unwritten.clear();
        if (again.length > 0) void this.#write(again);
      }, waitMs);
      return;
    }
    this.#writeFault.succeeded();
    // A retry that is due at once, or dependents made ready, may be work for a free thread.
    if (finished.some((answer) => answer !== null && (answer.others > 0 || answer.status !== 'completed'))) {
      this.pump();
    }
    const refused = items.filter((_, index) => finished[index] === null);
    if (refused.length > 0) void this.#reportRefused(refused);
  }

  /**
   * An outcome the store's fence refused: the attempt was no longer this server's to end.
   * Rare by design (a cancel or a lost lease mid-attempt), so each is read back once to
   * say why, logged and counted.
   */
  async #reportRefused(items: FinishItem[]): Promise<void> {
    const jobs = await this.#store.getMany(items.map((item) => item.id)).catch(() => null);
    const byId = new Map((jobs ?? []).map((job) => [job.id, job]));
    for (const item of items) {
      const job = jobs === null ? undefined : (byId.get(item.id) ?? null);
      const reason = job === undefined ? 'unknown' : refusalReason(item.attempt, job);
      this.#metrics.outcomeRefused(reason);
      this.#options.log.warn(
        { job: item.id, attempt: item.attempt, outcome: item.outcome.kind, reason, status: job?.status ?? null },
        `the outcome of attempt ${item.attempt} of job ${item.id} was refused (${reason}): the attempt was no longer this server's`,
      );
    }
  }
}
