import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { TaskAnswer } from '../../workers/protocol.js';
import type { ClaimedJob, JobStore } from '../../store/store.js';
import type { KilnMetrics } from '../statistics/metrics.js';
import { AttemptStarts } from './attempt-start.js';
import { FaultLog } from '../../fault-log.js';
import { LOOK_AHEAD_DEPTH, type WorkerPool } from '../../workers/pool.js';
import { LeaseKeeper } from './lease-keeper.js';
import { MicroBatching } from './micro-batch.js';
import { JobLimits } from './task-limits.js';
import { WakeTimers } from './wake-timers.js';
import { attemptsBy, busyThreads, type Held } from './held-attempts.js';
import { InFlight } from './in-flight.js';
import type { DispatcherOptions } from './dispatcher-options.js';
import { largestMeanMs, WorkAhead } from './thread-sizing.js';
import { claimLimits } from './claim-limits.js';
import { reconfigure } from './limit-changes.js';
import type { TaskLimits } from '../../contract/limits.js';
import { abortCause, type AbortReason, attemptInputs, type Batch, newBatch } from './batch.js';
import { batchOutcomes, givenBack, type OutcomeContext, OutcomeWriter } from './outcomes.js';
import { settleWithin } from '../../time/settle-within.js';
import type { Tracing } from '../../tracing/tracing.js';

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
 * The work queue (workers/work-queue.ts): claimed messages wait in shared memory, about
 * 10 ms of work ahead of each thread (thread-sizing.ts: queueAhead, and WorkAhead, which
 * refills it once half has been taken), and the first thread
 * to come free takes the oldest, without waiting for this thread to win a core. A claimed
 * message not started is taken back (recalled, no thread terminated) when a better job
 * arrives, so a new priority-9 job still waits for at most one running attempt per
 * thread: recalled jobs go back first in line. Whether a message has started is one word
 * of shared memory per message (workers/slots.ts), which also tells, when a thread dies,
 * which message it ran.
 *
 * Starts are recorded: when a thread starts a message, its jobs' starts go to the store
 * with its next group of writes. An attempt counts against `maxAttempts` only once its
 * start is recorded (or it ends): should this server die first, the rescue gives the
 * attempt back (retry-policy.ts, decideExpired).
 *
 * Each attempt has one timeout, counted from when its thread started it (attempt-start.ts):
 * when it fires, handlers that await see ctx.signal abort and the thread is terminated at once.
 *
 * Timers: one per running message (its timeout), one for the store's earliest
 * `runAt` and one for a rate limit's next token (wake-timers.ts), the lease keeper's
 * heartbeat. Never one per queued job. Outcomes are decided and written in outcomes.ts.
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
  /** Task and group limits (concurrency, rate) as this server applies them. */
  readonly limits = new JobLimits();
  readonly #inFlight = new InFlight();
  readonly #settling = new Set<Promise<void>>();
  readonly #outcomes: OutcomeWriter;
  readonly #outcomeContext: OutcomeContext;
  readonly #wake: WakeTimers;
  readonly #starts: AttemptStarts;
  readonly #claimFault: FaultLog;
  readonly #tracing: Tracing | null;
  /** Set while claims back off after a failure: changes do not claim then, the timer does. */
  #claimRetryTimer: NodeJS.Timeout | null = null;
  readonly #workAhead: WorkAhead;
  #started = false;
  #paused = false;
  #stopped = false;
  #pumping = false;
  #pumpAgain = false;
  /** The best priority that became ready while a claim was under way (null: none). */
  #betterDuringClaim: number | null = null;
  #messagesSent = 0;
  #attemptsSent = 0;

  constructor(options: DispatcherOptions) {
    this.#options = options;
    this.#store = options.store;
    this.#pool = options.pool;
    this.#workAhead = new WorkAhead(options.pool, {
      threads: options.threads,
      maxAhead: LOOK_AHEAD_DEPTH - 1,
      mainMsPerJob: options.mainMsPerJob,
    });
    this.#metrics = options.metrics;
    this.#random = options.random ?? Math.random;
    this.#micro = new MicroBatching(options.microBatch ?? {});
    this.#claimFault = new FaultLog(options.log, { what: 'dispatch', random: this.#random });
    this.#outcomes = new OutcomeWriter({
      store: options.store,
      metrics: options.metrics,
      log: options.log,
      random: this.#random,
      pump: () => this.pump(),
    });
    this.#outcomeContext = {
      store: options.store,
      metrics: options.metrics,
      micro: this.#micro,
      owner: this.owner,
      random: this.#random,
      isolated: options.isolated,
      maxSnoozes: options.maxSnoozes,
    };
    this.#tracing = options.tracing ?? null;
    this.#starts = new AttemptStarts({
      store: options.store,
      slots: options.pool.slots,
      owner: this.owner,
      live: (batch) => !batch.recalled && this.#inFlight.has(batch),
      timedOut: (batch) => this.#abortBatch(batch, 'timeout'),
    });
    options.pool.onDrain({
      started: (slots) => this.#starts.record(this.#inFlight.ofSlots(slots)),
      dry: () => this.pump(),
    });
    this.#wake = new WakeTimers({
      store: options.store,
      pump: () => this.pump(),
      stopped: () => this.#stopped,
      paused: () => this.#paused,
    });
    this.#leases = new LeaseKeeper({
      store: options.store,
      owner: this.owner,
      leaseMs: options.leaseMs,
      nodeLeaseMs: options.nodeLeaseMs ?? null,
      running: () => [...this.#inFlight.jobIds(), ...this.#outcomes.unwritten.keys()],
      lost: (id) => this.abandon(id, 'lease_lost'),
      held: (id) => {
        const inFlight = this.#inFlight.attemptOf(id);
        if (inFlight !== undefined) return inFlight;
        const unwritten = this.#outcomes.unwritten.get(id);
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
    this.#wake.stop();
    if (this.#claimRetryTimer !== null) clearTimeout(this.#claimRetryTimer);
    this.#claimRetryTimer = null;
    // Claimed messages not started go back to the store's queue rather than wait for the grace.
    this.#recallWaiting();
    if (this.#inFlight.held > 0) {
      await settleWithin(this.#inFlight.whenIdle(), graceMs);
      for (const batch of [...this.#inFlight]) this.#abortBatch(batch, 'shutdown');
    }
    while (this.#settling.size > 0) await Promise.allSettled([...this.#settling]);
    await this.#outcomes.flush();
    this.#leases.stop();
  }

  get paused(): boolean {
    return this.#paused;
  }

  /**
   * Pause dispatch: running attempts go on; claimed messages no thread has started go back
   * (as does a claim under way, when it answers), so no job starts once this resolves.
   */
  async pause(): Promise<void> {
    await this.#store.setPaused(true);
    this.#paused = true;
    this.#recallWaiting();
  }

  /** Another server paused or resumed dispatch (the store already refuses claims while paused). */
  pausedElsewhere(paused: boolean): void {
    this.#paused = paused;
    if (paused) this.#recallWaiting();
    else this.pump();
  }

  /** Takes back every claimed message no thread has started. */
  #recallWaiting(): void {
    for (const batch of this.#inFlight) this.#recall(batch);
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
    return busyThreads(this.#inFlight, this.#options.threads, (slot) => this.#pool.slots.startedAt(slot));
  }

  /** Attempts this server holds by task type or group (held-attempts.ts). */
  attemptsBy(by: 'type' | 'group', held: Held): Map<string, number> {
    return attemptsBy(this.#inFlight, by, held, (slot) => this.#pool.slots.startedAt(slot));
  }

  /** Attempts of each group with limits that a thread started here (kiln_group_running). */
  startedByLimitedGroup(): Map<string, number> {
    const started = this.attemptsBy('group', 'started');
    return new Map([...this.limits.runningByGroup().keys()].map((group) => [group, started.get(group) ?? 0]));
  }

  /**
   * A job of `priority` became ready: take back every claimed message of lower priority
   * that has not started. Taking back only as many as there are new jobs is not enough: the
   * first thread to come free would start one of them before the new job reached it.
   */
  preempt(priority: number): void {
    // A claim under way may bring jobs of lower priority that were not here to recall: they
    // are taken back as soon as it answers (#pumpLoop).
    if (this.#pumping) this.#betterDuringClaim = Math.max(this.#betterDuringClaim ?? priority, priority);
    if (this.#recallBelow(priority)) this.pump();
  }

  /**
   * New limits for every task type or every group (limit-changes.ts): claimed messages not
   * started that hold a job whose limits became stricter go back, to be claimed again under
   * them (as does such a job of a claim under way, when it answers: claim-limits.ts).
   */
  configureLimits(by: 'type' | 'group', limits: ReadonlyMap<string, TaskLimits>): void {
    const limiter = by === 'type' ? this.limits.byType : this.limits.byGroup;
    const startedAt = (slot: number) => this.#pool.slots.startedAt(slot);
    for (const batch of reconfigure(limiter, by, limits, this.#inFlight, startedAt)) this.#recall(batch);
    this.pump();
  }

  /** Takes back every claimed message below `priority` that has not started; answers whether any was. */
  #recallBelow(priority: number): boolean {
    let recalled = false;
    for (const batch of this.#inFlight) {
      if (!batch.recalled && batch.priority < priority && this.#recall(batch)) recalled = true;
    }
    return recalled;
  }

  /**
   * Another server changed a job this one runs (a cancel, a rescue): ask the store which
   * leases still hold, and stop the attempts whose lease is gone. News from other servers
   * can be late, so it is checked against the store rather than acted on.
   */
  checkLeases(): void {
    if (this.#started && !this.#stopped) void this.#leases.beat();
  }

  /**
   * After the store was away: this server's heartbeat (its node lease and every job lease
   * it holds) and the outcomes it kept are written now, before it claims or rescues
   * anything; rejects while the store cannot take them.
   */
  async catchUp(): Promise<void> {
    await this.#leases.catchUp();
    await this.#outcomes.writeKept();
  }

  /** The job reached a terminal status: nothing about it needs remembering. */
  forget(id: string): void {
    this.#micro.setSolo(id, false);
  }

  /** Whether this job's attempt runs here now, or is claimed and waits for a thread. */
  runs(id: string): boolean {
    return this.#inFlight.ofJob(id) !== undefined;
  }

  /**
   * The store moved the job on (cancelled, its lease is gone, its claim was lost):
   * stop its attempt: a claimed message not started is taken back; a running message has its thread
   * terminated, except that a cancelled job inside a micro-batch only has its outcome
   * dropped.
   */
  abandon(id: string, reason: 'cancel' | 'lease_lost'): void {
    const batch = this.#inFlight.ofJob(id);
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
    if (this.#inFlight.ofJob(jobId) === undefined) return;
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
    // Tracked: a claim in flight at stop hands its jobs back before the store closes.
    this.#track(
      this.#pumpLoop().finally(() => {
        this.#pumping = false;
        // A pump asked for while the loop was finishing must not be lost.
        if (this.#pumpAgain) this.pump();
      }),
    );
  }

  /** Work stop() waits for before its last write and the store's close. */
  #track(work: Promise<void>): void {
    this.#settling.add(work);
    void work.finally(() => this.#settling.delete(work));
  }

  async #pumpLoop(): Promise<void> {
    try {
      do {
        this.#pumpAgain = false;
        if (this.#paused || this.#stopped) return;
        const free = this.#room();
        if (free <= 0) continue;
        if (this.#leases.behind || this.#outcomes.unwritten.size > 0) await this.catchUp();
        const limits = claimLimits(this.limits, () => this.#options.taskTypes?.() ?? []);
        this.#betterDuringClaim = null;
        const batches = await this.#store.claim({
          owner: this.owner,
          leaseMs: this.#options.leaseMs,
          batches: free,
          micro: this.#micro.request(),
          ...limits.request,
        });
        // A claim answered while the store cannot write (it hands out nothing, or claims it
        // then loses) does not end the fault: only a store that writes again does.
        if (this.#store.available) this.#claimFault.succeeded();
        this.#wake.armLimit(limits.passedOver(this.#metrics));
        if (this.#stopped || this.#paused) {
          // Stopped or paused while the claim read its jobs: they go back, unrun.
          for (const jobs of batches) this.#giveBackJobs(jobs, new Set());
          return;
        }
        // A job whose type's or group's limits became stricter while the claim was under way goes back.
        for (const jobs of batches) {
          if (limits.outdated(jobs)) this.#giveBackJobs(jobs, new Set());
          else this.#run(jobs);
        }
        if (this.#betterDuringClaim !== null && this.#recallBelow(this.#betterDuringClaim)) this.#pumpAgain = true;
        this.#betterDuringClaim = null;
        if (batches.length > 0) this.#sizeThreads(batches);
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
      this.#wake.armDue(this.#room() > 0);
    }
  }

  /** How many messages a claim may bring now (thread-sizing.ts, WorkAhead). */
  #room(): number {
    return this.#workAhead.room(this.#inFlight.held);
  }

  /** Threads and the work ahead of them sized to the jobs just claimed (thread-sizing.ts). */
  #sizeThreads(batches: ClaimedJob[][]): void {
    const meanMs = largestMeanMs(batches, (type) =>
      this.#options.isolated?.(type) === true ? null : this.#micro.meanMs(type),
    );
    if (this.#workAhead.sizeTo(meanMs)) this.#pumpAgain = true;
  }

  #run(jobs: ClaimedJob[]): void {
    const slot = this.#pool.slots.acquire();
    if (slot === null) {
      // The claim asked for no more batches than there are slots; should one be missing
      // all the same, the jobs go back rather than wait for a thread.
      this.#giveBackJobs(jobs, new Set());
      return;
    }
    const batch = newBatch(jobs, slot, this.#tracing, this.#starts);
    this.#inFlight.add(batch);
    this.limits.claimed(jobs, () => this.#pool.slots.startedAt(slot));
    this.#messagesSent += 1;
    this.#attemptsSent += jobs.length;
    const attempts = attemptInputs(batch);
    const settled = this.#pool
      .run({ attempts, slot })
      .then(
        (answer) => this.#settle(batch, answer, null),
        (error: unknown) => this.#settle(batch, null, error),
      )
      .catch((error: unknown) => this.#options.onError('recording an attempt failed', error));
    this.#track(settled);
  }

  /**
   * Take back a claimed message no thread has started; false if one has. Its jobs go
   * back first in line at once: the slot guarantees the thread will skip them.
   */
  #recall(batch: Batch): boolean {
    if (batch.recalled) return true;
    if (batch.abortReason !== null || !this.#pool.slots.recall(batch.slot)) return false;
    this.#inFlight.recalled(batch);
    this.#giveBack(batch);
    return true;
  }

  /** Jobs of a message that never started go back first in line, their attempts not counted. */
  #giveBack(batch: Batch): void {
    this.#inFlight.forgetJobs(batch);
    for (const span of batch.spans ?? []) span.end({ kind: 'released', errorType: 'interrupted' }, null);
    this.#giveBackJobs(batch.jobs, batch.dropped);
  }

  #giveBackJobs(jobs: ClaimedJob[], dropped: ReadonlySet<string>): void {
    this.limits.ended(jobs, null);
    const back = jobs.filter((job) => !dropped.has(job.id));
    const released = this.#store
      .release(back.map((job) => ({ id: job.id, attempt: job.attempts, owner: this.owner })))
      .then(
        () => this.pump(),
        // The store cannot take them back now: they go the way of outcomes, kept (their
        // leases with them) and written again until it can, as attempts given back.
        () => this.#outcomes.write(back.map((job) => givenBack(job, this.owner, this.#store.now()))),
      );
    this.#track(released);
  }

  #abortBatch(batch: Batch, reason: AbortReason): void {
    // A recalled message never runs; aborting it would terminate the thread it waits on.
    if (batch.recalled || batch.abortReason !== null || !this.#inFlight.has(batch)) return;
    batch.abortReason = reason;
    for (const job of batch.jobs) this.#pool.notifyAbort(job.id, reason);
    this.#pool.stop(batch.slot, reason === 'timeout' ? 'timeout' : 'stopped', abortCause(batch, reason));
  }

  async #settle(batch: Batch, answer: TaskAnswer | null, failure: unknown): Promise<void> {
    clearTimeout(batch.timer);
    const started = this.#pool.slots.startedAt(batch.slot);
    // A recalled message's jobs ended their count when it was recalled: they may be claimed again by now.
    if (!batch.recalled) this.limits.ended(batch.jobs, started);
    this.#pool.slots.release(batch.slot);
    this.#inFlight.remove(batch);
    this.pump();

    if (answer === 'recalled' || started === null) {
      // Never started: a recalled message was given back when it was recalled; one whose
      // thread died before it got to it is given back now.
      if (!batch.recalled) this.#giveBack(batch);
      return;
    }
    const items = batchOutcomes(batch, answer, failure, started, this.#outcomeContext);
    if (items.length > 0) await this.#outcomes.write(items);
  }
}
