import { randomUUID } from 'node:crypto';
import { BroadcastChannel } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type {
  AttemptInput,
  ChannelMessage,
  Retirement,
  TaskAnswer,
  ThreadAnswer,
  ThreadData,
  ThreadTask,
} from './protocol.js';
import { AttemptSlots } from './slots.js';
import type { TaskRegistry } from './registry.js';

/** piscina's hook that picks a thread for a message (its type is not exported by name). */
type LoadBalancer = NonNullable<NonNullable<ConstructorParameters<typeof Piscina>[0]>['loadBalancer']>;

export type ProgressMessage = Extract<ChannelMessage, { kind: 'progress' }>;

export interface WorkerPoolOptions {
  /** Worker threads, all started at once and kept warm. */
  threads: number;
  /** Heap (old generation) limit of each thread; a thread that exceeds it dies and is replaced. */
  maxMemoryMb: number;
  /** Nice increment of the worker threads over the main and store threads (Linux; 0: none). */
  nice?: number;
  registry: TaskRegistry;
  /** Called on the main thread for every progress report of a running attempt. */
  onProgress(message: ProgressMessage): void;
  /** Attempts a thread runs before it is replaced (recycling); null: no limit. */
  maxJobsPerThread?: number | null;
  /** The largest JSON result, in UTF-8 bytes, an attempt may return; a larger one fails it. */
  maxResultBytes?: number;
  /** Called once for every thread that ends while the pool is open, with why. */
  onThreadEnd?(end: ThreadEnd): void;
}

/**
 * Why a thread ended: `crashed` (process.exit, an uncaught error, an error at import),
 * `memory` (its heap limit), `timeout` and `stopped` (terminated for a timeout, or a
 * cancel, a lost lease, a shutdown), `recycled` (KILN_THREAD_MAX_JOBS, or after a
 * result over the size limit) and `isolated` (after, or to make room for, an isolated
 * task's attempt).
 */
export const THREAD_END_REASONS = ['crashed', 'memory', 'timeout', 'stopped', 'recycled', 'isolated'] as const;
export type ThreadEndReason = (typeof THREAD_END_REASONS)[number];

export interface ThreadEnd {
  reason: ThreadEndReason;
  /** What happened: the error, the abort's reason, the job count. */
  cause: string;
  /** The attempts its message held when it ended (empty when it ran none). */
  attempts: Array<{ jobId: string; attempt: number }>;
  /** The attempt whose work raised an uncaught error, when known; `late`: after its outcome was answered. */
  culprit: { jobId: string; attempt: number; late: boolean } | null;
}

/** Messages a thread holds at once: the one it runs and one look-ahead. */
export const LOOK_AHEAD_DEPTH = 2;

/** How a rejected run() is to be read: the caller aborted it (timeout, cancel), or the thread died. */
export type RunFailure = 'aborted' | 'crashed';

export function classifyRunFailure(_err: unknown, signal: AbortSignal): RunFailure {
  return signal.aborted ? 'aborted' : 'crashed';
}

/**
 * A fixed-size pool of worker threads (piscina) that runs ThreadTasks.
 *
 * The threads are spawned by the constructor, so a broken worker entry shows at
 * start-up. Aborting run()'s signal terminates the thread at once, even inside a
 * synchronous loop; a thread that exits, throws outside a handler or hits its heap
 * limit rejects its run(); piscina replaces the thread in every case. The scheduler
 * only calls run() when it knows a thread is free, so piscina's own queue stays empty;
 * it is left unbounded so that a thread being replaced at that moment delays the task
 * instead of rejecting it.
 */
export class WorkerPool {
  readonly #size: number;
  readonly #onProgress: (message: ProgressMessage) => void;
  readonly #onThreadEnd: (end: ThreadEnd) => void;
  /** The attempts of each message in flight, by slot. */
  readonly #messages = new Map<number, AttemptInput[]>();
  /** Slots whose thread the pool is terminating: their rejection is no crash. */
  readonly #terminating = new Set<number>();
  /** The threads that started up (piscina's workerCreate); a replacement still starting is not one. */
  readonly #ready = new WeakSet<object>();
  /** Threads ended (piscina's workerDestroy). */
  #destroyed = 0;
  /** Thread ends reported; fewer than #destroyed means a thread died while idle. */
  #reported = 0;
  /** Threads the pool is terminating, until they have exited. */
  readonly #exiting = new Set<Promise<number>>();
  /** The last error piscina could pin on no message (a thread that died idle). */
  #idleError: Error | null = null;
  /** One word per message in flight (two per thread: the one running and its look-ahead). */
  readonly slots: AttemptSlots;
  /** Threads that new messages go to (see useThreads); the others stay parked. */
  #inUse: number;
  /** Messages each thread has started, by threadId. */
  readonly #startedBy = new Map<number, number>();
  #piscina: Piscina<ThreadTask, ThreadAnswer> | null;
  #channel: BroadcastChannel | null;
  #closing: Promise<void> | null = null;

  constructor(options: WorkerPoolOptions) {
    if (!Number.isInteger(options.threads) || options.threads < 1) {
      throw new RangeError(`threads must be an integer >= 1, got ${options.threads}`);
    }
    if (!Number.isInteger(options.maxMemoryMb) || options.maxMemoryMb < 8) {
      throw new RangeError(`maxMemoryMb must be an integer >= 8, got ${options.maxMemoryMb}`);
    }
    this.#size = options.threads;
    this.#inUse = options.threads;
    this.#onProgress = options.onProgress;
    const channelName = `kiln-pool-${process.pid}-${randomUUID()}`;
    this.slots = new AttemptSlots(options.threads * LOOK_AHEAD_DEPTH + 16);
    const workerData: ThreadData = {
      modules: options.registry.modules(),
      channelName,
      slots: this.slots.buffer,
      nice: options.nice ?? 0,
      maxJobs: options.maxJobsPerThread ?? null,
      maxResultBytes: options.maxResultBytes ?? Number.MAX_SAFE_INTEGER,
    };
    this.#onThreadEnd = options.onThreadEnd ?? (() => {});

    this.#channel = new BroadcastChannel(channelName);
    (this.#channel as BroadcastChannel & { unref(): void }).unref();
    this.#channel.onmessage = (event) => {
      const message = event.data as ChannelMessage;
      if (message.kind === 'progress') this.#onProgress(message);
      else if (message.kind === 'retire') this.#retire(message.retirement, []);
    };

    const piscina = new Piscina<ThreadTask, ThreadAnswer>({
      filename: new URL('./thread.js', import.meta.url).href,
      minThreads: options.threads,
      maxThreads: options.threads,
      // A thread holds its next message while it runs the current one, and starts it
      // without waiting for the main thread (a look-ahead, see slots.ts).
      concurrentTasksPerWorker: LOOK_AHEAD_DEPTH,
      idleTimeout: Number.POSITIVE_INFINITY,
      loadBalancer: this.#balance,
      resourceLimits: {
        maxOldGenerationSizeMb: options.maxMemoryMb,
        // V8's default young generation is sized for a whole process; a small heap limit wants a smaller one.
        maxYoungGenerationSizeMb: Math.min(48, Math.max(4, Math.floor(options.maxMemoryMb / 8))),
      },
      workerData,
    });
    this.#piscina = piscina;
    // Without a listener an 'error' event would throw on the main thread and end the process.
    piscina.on('error', (err: Error) => {
      this.#idleError = err;
    });
    piscina.on('workerCreate', (worker: { id: number }) => {
      const thread = piscina.threads.find((candidate) => candidate.threadId === worker.id);
      if (thread !== undefined) this.#ready.add(thread);
    });
    piscina.on('workerDestroy', () => {
      this.#destroyed += 1;
      // piscina rejects the messages of a crashed thread just after this event, and run()
      // reports the crash then; an end still unreported after that was a thread that
      // held no started message.
      setImmediate(() => this.#reportIdleEnds());
    });
  }

  /**
   * Which thread a message goes to: the least busy of the first `useThreads` threads
   * with room (piscina lists them in the order they became ready, so these are the same
   * threads from one message to the next and the rest stay parked); should none of them
   * have room (a recalled message still holds its place), the first of the others that has.
   */
  readonly #balance: LoadBalancer = (_task, workers) => {
    let best: (typeof workers)[number] | null = null;
    let counted = 0;
    for (const worker of workers) {
      if (worker.terminating || worker.destroyed) continue;
      counted += 1;
      if (counted > this.#inUse && best !== null) break;
      if (worker.currentUsage < LOOK_AHEAD_DEPTH && (best === null || worker.currentUsage < best.currentUsage)) {
        best = worker;
      }
    }
    return best;
  };

  /**
   * Sends new messages to `count` threads (1 to `threads`), leaving the others parked.
   * Messages already on a thread stay there.
   */
  useThreads(count: number): void {
    this.#inUse = Math.min(this.#size, Math.max(1, Math.floor(count)));
  }

  /** The threads new messages go to. */
  get threadsInUse(): number {
    return this.#inUse;
  }

  /** Messages started since the pool opened, by the threadId of the thread that ran each. */
  startedByThread(): ReadonlyMap<number, number> {
    return this.#startedBy;
  }

  #reportIdleEnds(): void {
    if (this.#piscina === null) return;
    while (this.#reported < this.#destroyed) {
      const cause = this.#idleError?.message ?? 'the thread exited while it ran no attempt';
      this.#report({ reason: 'crashed', cause, attempts: [], culprit: null });
    }
    this.#idleError = null;
  }

  #report(end: ThreadEnd): void {
    this.#reported += 1;
    this.#onThreadEnd(end);
  }

  /** The threads are running from construction; start() exists for the common service life cycle. */
  start(): void {
    if (this.#piscina === null) throw new Error('worker pool is closed');
  }

  /**
   * Runs the attempts in one thread, or answers 'recalled' if its slot was recalled
   * before the thread started it. Aborting `signal` recalls a message that has not
   * started and terminates the thread of one that has (the pool replaces it); a thread
   * that dies rejects every message it held, and the slot says which had started.
   *
   * Piscina is not given the signal: it would never let a thread hold a second
   * abortable message, and the look-ahead is exactly that.
   */
  run(task: ThreadTask, signal?: AbortSignal): Promise<TaskAnswer> {
    if (this.#piscina === null) return Promise.reject(new Error('worker pool is closed'));
    if (signal?.aborted === true) return Promise.reject(new Error('attempt aborted before it was sent'));
    this.#messages.set(task.slot, task.attempts);
    const piscina = this.#piscina;
    // piscina would still hand a message to a thread the pool is terminating: wait for its exit.
    const posted =
      this.#exiting.size === 0
        ? piscina.run(task)
        : Promise.allSettled([...this.#exiting]).then(() => piscina.run(task));
    const answer = posted.then(
      (answered) => this.#answered(task, answered),
      (error: unknown) => {
        this.#failed(task, error);
        throw error;
      },
    );
    if (signal !== undefined) {
      const onAbort = () => this.stop(task.slot, 'stopped', String(signal.reason ?? 'aborted'));
      signal.addEventListener('abort', onAbort, { once: true });
      void answer.then(
        () => signal.removeEventListener('abort', onAbort),
        () => signal.removeEventListener('abort', onAbort),
      );
    }
    return answer;
  }

  /**
   * Stops the message in `slot`: recalls it if its thread has not started it, else
   * terminates the thread while it still runs it (the pool replaces the thread).
   * `reason` and `cause` say why, for the thread's end.
   */
  stop(slot: number, reason: 'timeout' | 'stopped', cause: string): void {
    if (this.slots.recall(slot)) return;
    const threadId = this.slots.kill(slot);
    if (threadId === null || !this.#terminateThread(threadId)) return;
    this.#terminating.add(slot);
    this.#report({ reason, cause, attempts: attemptsOf(this.#messages.get(slot)), culprit: null });
  }

  #answered(task: ThreadTask, answer: ThreadAnswer): TaskAnswer {
    this.#messages.delete(task.slot);
    this.#terminating.delete(task.slot);
    if (answer === 'recalled') return answer;
    const threadId = this.slots.startedBy(task.slot);
    if (threadId !== null) this.#startedBy.set(threadId, (this.#startedBy.get(threadId) ?? 0) + 1);
    if (answer.retire !== null) this.#retire(answer.retire, task.attempts);
    return answer.results;
  }

  /** A message rejected: its thread died. A crash is reported here, unless the pool ended the thread itself. */
  #failed(task: ThreadTask, error: unknown): void {
    this.#messages.delete(task.slot);
    if (this.#terminating.delete(task.slot) || this.#piscina === null) return;
    // A look-ahead that never started died with the thread that held it: that thread's end is its message's.
    if (this.slots.startedAt(task.slot) === null) return;
    const code = (error as { code?: unknown } | null)?.code;
    this.#report({
      reason: code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'memory' : 'crashed',
      cause: error instanceof Error ? error.message : String(error),
      attempts: attemptsOf(task.attempts),
      culprit: null,
    });
  }

  /** A thread asked to be replaced: it starts nothing more, so it is terminated at once. */
  #retire(retirement: Retirement, attempts: AttemptInput[]): void {
    if (!this.#terminateThread(retirement.threadId)) return;
    this.#report({
      reason: retirement.reason,
      cause: retirement.cause,
      attempts: attemptsOf(attempts),
      culprit: retirement.culprit === null ? null : { ...retirement.culprit, late: retirement.late },
    });
  }

  /** Terminates the thread with this id; false if it is not (or no longer) in the pool. */
  #terminateThread(threadId: number): boolean {
    if (this.#piscina === null) return false;
    const thread = this.#piscina.threads.find((candidate) => candidate.threadId === threadId);
    if (thread === undefined) return false;
    const exited = thread.terminate();
    this.#exiting.add(exited);
    void exited.finally(() => this.#exiting.delete(exited));
    return true;
  }

  /** Tells the thread running this job that it is being aborted, so a handler that awaits sees ctx.signal abort. */
  notifyAbort(jobId: string, reason: string): void {
    const message: ChannelMessage = { kind: 'abort', jobId, reason };
    this.#channel?.postMessage(message);
  }

  /** The configured number of threads. */
  get threads(): number {
    return this.#size;
  }

  /** Threads up and able to run now: below `threads` while a dead thread's replacement starts. */
  get liveThreads(): number {
    if (this.#piscina === null) return 0;
    return this.#piscina.threads.filter((thread) => this.#ready.has(thread)).length;
  }

  /** Terminates every thread; a run() still in flight rejects. */
  close(): Promise<void> {
    if (this.#closing === null) {
      const piscina = this.#piscina;
      this.#piscina = null;
      this.#channel?.close();
      this.#channel = null;
      this.#closing = piscina === null ? Promise.resolve() : piscina.destroy();
    }
    return this.#closing;
  }
}

function attemptsOf(attempts: AttemptInput[] | undefined): ThreadEnd['attempts'] {
  return (attempts ?? []).map(({ jobId, attempt }) => ({ jobId, attempt }));
}
