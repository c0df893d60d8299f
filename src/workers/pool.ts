import { randomUUID } from 'node:crypto';
import { BroadcastChannel } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { ChannelMessage, TaskAnswer, ThreadData, ThreadTask } from './protocol.js';
import { AttemptSlots } from './slots.js';
import type { TaskRegistry } from './registry.js';

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
  /** A thread error that no running task could be blamed for (e.g. a stray timer throwing after its task ended). */
  onThreadError?(err: Error): void;
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
  /** One word per message in flight (two per thread: the one running and its look-ahead). */
  readonly slots: AttemptSlots;
  #piscina: Piscina<ThreadTask, TaskAnswer> | null;
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
    this.#onProgress = options.onProgress;
    const channelName = `kiln-pool-${process.pid}-${randomUUID()}`;
    this.slots = new AttemptSlots(options.threads * LOOK_AHEAD_DEPTH + 16);
    const workerData: ThreadData = {
      modules: options.registry.modules(),
      channelName,
      slots: this.slots.buffer,
      nice: options.nice ?? 0,
    };

    this.#channel = new BroadcastChannel(channelName);
    (this.#channel as BroadcastChannel & { unref(): void }).unref();
    this.#channel.onmessage = (event) => {
      const message = event.data as ChannelMessage;
      if (message.kind === 'progress') this.#onProgress(message);
    };

    this.#piscina = new Piscina<ThreadTask, TaskAnswer>({
      filename: new URL('./thread.js', import.meta.url).href,
      minThreads: options.threads,
      maxThreads: options.threads,
      // A thread holds its next message while it runs the current one, and starts it
      // without waiting for the main thread (a look-ahead, see slots.ts).
      concurrentTasksPerWorker: LOOK_AHEAD_DEPTH,
      idleTimeout: Number.POSITIVE_INFINITY,
      resourceLimits: {
        maxOldGenerationSizeMb: options.maxMemoryMb,
        // V8's default young generation is sized for a whole process; a small heap limit wants a smaller one.
        maxYoungGenerationSizeMb: Math.min(48, Math.max(4, Math.floor(options.maxMemoryMb / 8))),
      },
      workerData,
    });
    const onThreadError = options.onThreadError;
    // Without a listener an 'error' event would throw on the main thread and end the process.
    this.#piscina.on('error', (err: Error) => onThreadError?.(err));
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
    const answer = this.#piscina.run(task);
    if (signal !== undefined) {
      const onAbort = () => this.stop(task.slot);
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
   */
  stop(slot: number): void {
    if (!this.slots.recall(slot)) this.#terminate(slot);
  }

  /** Terminates the thread that runs the message in `slot`, if it still runs it. */
  #terminate(slot: number): void {
    const threadId = this.slots.kill(slot);
    if (threadId === null || this.#piscina === null) return;
    for (const thread of this.#piscina.threads) {
      if (thread.threadId === threadId) void thread.terminate();
    }
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

  /** Threads alive right now (a dead thread is replaced at once, so this dips only briefly). */
  get liveThreads(): number {
    if (this.#piscina === null) return 0;
    return this.#piscina.threads.filter((thread) => thread.threadId >= 0).length;
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
