import { randomUUID } from 'node:crypto';
import { BroadcastChannel } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { AttemptResult, ChannelMessage, ThreadData, ThreadTask } from './protocol.js';
import type { TaskRegistry } from './registry.js';

export type ProgressMessage = Extract<ChannelMessage, { kind: 'progress' }>;

export interface WorkerPoolOptions {
  /** Worker threads, all started at once and kept warm. */
  threads: number;
  /** Heap (old generation) limit of each thread; a thread that exceeds it dies and is replaced. */
  maxMemoryMb: number;
  registry: TaskRegistry;
  /** Called on the main thread for every progress report of a running attempt. */
  onProgress(message: ProgressMessage): void;
  /** A thread error that no running task could be blamed for (e.g. a stray timer throwing after its task ended). */
  onThreadError?(err: Error): void;
}

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
  #piscina: Piscina<ThreadTask, AttemptResult[]> | null;
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
    const workerData: ThreadData = { modules: options.registry.modules(), channelName };

    this.#channel = new BroadcastChannel(channelName);
    (this.#channel as BroadcastChannel & { unref(): void }).unref();
    this.#channel.onmessage = (event) => {
      const message = event.data as ChannelMessage;
      if (message.kind === 'progress') this.#onProgress(message);
    };

    this.#piscina = new Piscina<ThreadTask, AttemptResult[]>({
      filename: new URL('./thread.js', import.meta.url).href,
      minThreads: options.threads,
      maxThreads: options.threads,
      concurrentTasksPerWorker: 1,
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

  /** Runs the attempts in one thread. Rejects when the signal aborts or the thread dies (see classifyRunFailure). */
  run(task: ThreadTask, signal: AbortSignal): Promise<AttemptResult[]> {
    if (this.#piscina === null) return Promise.reject(new Error('worker pool is closed'));
    return this.#piscina.run(task, { signal });
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
