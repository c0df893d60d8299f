import { randomUUID } from 'node:crypto';
import { BroadcastChannel, MessageChannel, type MessagePort, receiveMessageOnPort } from 'node:worker_threads';
import { Piscina } from 'piscina';
import {
  type AttemptInput,
  type ChannelMessage,
  decodeAnswer,
  encodeAttempts,
  type LoopMessage,
  type Retirement,
  type TaskAnswer,
  type ThreadData,
  type ThreadLoop,
  type ThreadTask,
} from './protocol.js';
import { AttemptSlots } from './slots.js';
import type { TaskRegistry } from './registry.js';
import { WorkQueue } from './work-queue.js';

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

/**
 * The most messages queued or running per thread in use: one running and up to seven
 * waiting for the first thread to come free (the dispatcher sizes the queue's depth by
 * the jobs' run time, queueAhead in thread-sizing.ts).
 */
export const LOOK_AHEAD_DEPTH = 8;

/** How often, while messages are in flight, the main thread reads what the threads answered. */
export const DRAIN_MS = 5;

/** How a rejected run() is to be read: the caller aborted it (timeout, cancel), or the thread died. */
export type RunFailure = 'aborted' | 'crashed';

export function classifyRunFailure(_err: unknown, signal: AbortSignal): RunFailure {
  return signal.aborted ? 'aborted' : 'crashed';
}

/** What the pool tells its user on each drain. */
export interface DrainListener {
  /** Messages (by slot) whose thread started them since the last drain. */
  started(slots: readonly number[]): void;
  /** A thread found nothing to take: work can be published for it. */
  dry(): void;
}

/** A message published and not yet settled. */
interface InFlight {
  readonly task: ThreadTask;
  /** Its position in the work queue. */
  readonly position: number;
  /** Its start was reported to the drain listener. */
  startSeen: boolean;
  resolve(answer: TaskAnswer): void;
  reject(error: unknown): void;
}

/** A thread's loop (piscina task): its port, and its thread once it said hello. */
interface Loop {
  readonly seat: number;
  readonly port: MessagePort;
  threadId: number | null;
}

/**
 * A fixed-size pool of worker threads (piscina) that run messages of attempts.
 *
 * piscina owns the threads: it creates them (all at once, kept warm), applies their
 * resource limits, and replaces one that exits, crashes, runs out of heap or is
 * terminated. Each thread runs one piscina task for its whole life (thread.ts, a loop):
 * it takes messages from the work queue in shared memory (work-queue.ts) whenever it has
 * nothing running, and writes each answer over the message's text in shared memory.
 * Its port carries only what is rare (its hello, a retirement, progress, an answer too
 * large for the slot's text): a message on a port wakes the main thread's event loop
 * even unread. run() publishes a message;
 * nothing is posted to a thread per message, and no thread is chosen for it: the first
 * thread to come free takes the oldest message, so no message waits behind a long one
 * while another thread is idle, and messages start in the order they were published.
 *
 * The main thread is not woken per start or per answer: while messages are in flight it
 * drains every DRAIN_MS (the starts and answers the slot words show, and the ports when
 * a thread posted on one), and a thread that finds the queue empty wakes it at once
 * (DRY), so more work is claimed without waiting for the beat. Aborting run()'s signal takes back a message no
 * thread has started, and terminates the thread of one that has (piscina replaces it).
 */
export class WorkerPool {
  readonly #size: number;
  readonly #onProgress: (message: ProgressMessage) => void;
  readonly #onThreadEnd: (end: ThreadEnd) => void;
  /** Messages published and not settled, by slot. */
  readonly #inFlight = new Map<number, InFlight>();
  /** Slots whose thread the pool is terminating: their rejection is no crash. */
  readonly #terminating = new Set<number>();
  /** Threads the pool terminated itself (by threadId): their end is no crash. */
  readonly #terminated = new Set<number>();
  /** The loop of each seat. */
  readonly #loops = new Map<number, Loop>();
  /** The threads that started up (piscina's workerCreate); a replacement still starting is not one. */
  readonly #ready = new WeakSet<object>();
  readonly #queue: WorkQueue;
  readonly #registry: TaskRegistry;
  /** One word per message queued or running. */
  readonly slots: AttemptSlots;
  /** Threads that take work (see useThreads); the others stay parked. */
  #inUse: number;
  /** Messages each thread has started, by threadId. */
  readonly #startedBy = new Map<number, number>();
  #listener: DrainListener | null = null;
  /** Answers too large for their slot, read from the ports, by slot, until their slot is seen DONE. */
  readonly #postedAnswers = new Map<number, string>();
  /** The threads' posted count at the last drain that read the ports. */
  #postedRead = 0;
  #drainTimer: NodeJS.Timeout | null = null;
  #piscina: Piscina<ThreadLoop, never> | null;
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
    this.#registry = options.registry;
    const channelName = `kiln-pool-${process.pid}-${randomUUID()}`;
    // Recalled messages keep their slot until every thread has passed them: room for those too.
    const slotCount = options.threads * LOOK_AHEAD_DEPTH * 2 + 16;
    this.slots = new AttemptSlots(slotCount);
    this.#queue = new WorkQueue(slotCount, options.threads);
    const workerData: ThreadData = {
      modules: options.registry.modules(),
      channelName,
      slots: this.slots.buffer,
      queue: this.#queue.buffers,
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

    const piscina = new Piscina<ThreadLoop, never>({
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
    this.#piscina = piscina;
    // Without a listener an 'error' event would throw on the main thread and end the process.
    piscina.on('error', () => {});
    piscina.on('workerCreate', (worker: { id: number }) => {
      const thread = piscina.threads.find((candidate) => candidate.threadId === worker.id);
      if (thread !== undefined) this.#ready.add(thread);
    });
    for (let seat = 0; seat < options.threads; seat++) this.#startLoop(seat);
    void this.#watchDry(this.#queue.dryCount);
  }

  /** Who hears of starts and of threads running dry; one listener. */
  onDrain(listener: DrainListener): void {
    this.#listener = listener;
  }

  /** Starts the loop of `seat` on the next thread piscina has free (a new one after a death). */
  #startLoop(seat: number): void {
    const piscina = this.#piscina;
    if (piscina === null) return;
    const channel = new MessageChannel();
    const loop: Loop = { seat, port: channel.port1, threadId: null };
    this.#loops.set(seat, loop);
    piscina.run({ port: channel.port2, seat }, { transferList: [channel.port2] }).then(
      () => undefined,
      (error: unknown) => this.#loopEnded(loop, error),
    );
  }

  /** A thread's loop ended: its thread died or was terminated. Its seat gets a new one. */
  #loopEnded(loop: Loop, error: unknown): void {
    this.#readPort(loop);
    loop.port.close();
    if (this.#piscina === null) return;
    const threadId = loop.threadId;
    const stopped = threadId !== null && this.#terminated.delete(threadId);
    let reported = stopped;
    for (const [slot, flight] of [...this.#inFlight]) {
      if (threadId === null || this.slots.startedBy(slot) !== threadId) continue;
      // Answered before the thread ended: the answer stands.
      if (this.slots.done(slot)) {
        this.#answer(slot);
        continue;
      }
      this.#inFlight.delete(slot);
      if (!this.#terminating.delete(slot) && !stopped) {
        const code = (error as { code?: unknown } | null)?.code;
        this.#report({
          reason: code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'memory' : 'crashed',
          cause: error instanceof Error ? error.message : String(error),
          attempts: attemptsOf(flight.task.attempts),
          culprit: null,
        });
        reported = true;
      }
      flight.reject(error);
    }
    if (!reported) {
      const cause = error instanceof Error ? error.message : 'the thread exited while it ran no attempt';
      this.#report({ reason: 'crashed', cause, attempts: [], culprit: null });
    }
    this.#startLoop(loop.seat);
  }

  /**
   * Sends new messages to `count` threads (1 to `threads`), leaving the others parked.
   * Messages already running stay where they are.
   */
  useThreads(count: number): void {
    this.#inUse = Math.min(this.#size, Math.max(1, Math.floor(count)));
    this.#queue.useThreads(this.#inUse);
  }

  /** The threads that take new messages. */
  get threadsInUse(): number {
    return this.#inUse;
  }

  /** Messages started since the pool opened, by the threadId of the thread that ran each. */
  startedByThread(): ReadonlyMap<number, number> {
    return this.#startedBy;
  }

  #report(end: ThreadEnd): void {
    this.#onThreadEnd(end);
  }

  /** The threads are running from construction; start() exists for the common service life cycle. */
  start(): void {
    if (this.#piscina === null) throw new Error('worker pool is closed');
  }

  /**
   * Publishes the attempts for the first free thread to take. Answers their results, or
   * 'recalled' if the slot was recalled before a thread started it. Aborting `signal`
   * recalls a message that has not started and terminates the thread of one that has (the
   * pool replaces it); a thread that dies rejects the message it had started.
   */
  run(task: ThreadTask, signal?: AbortSignal): Promise<TaskAnswer> {
    if (this.#piscina === null) return Promise.reject(new Error('worker pool is closed'));
    if (signal?.aborted === true) return Promise.reject(new Error('attempt aborted before it was sent'));
    const isolated = task.attempts.some((input) => this.#registry.get(input.type)?.isolate === true);
    const position = this.#queue.publish(task.slot, encodeAttempts(task.attempts), isolated);
    const answer = new Promise<TaskAnswer>((resolve, reject) => {
      this.#inFlight.set(task.slot, { task, position, startSeen: false, resolve, reject });
    });
    this.#beat();
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
   * Stops the message in `slot`: recalls it if no thread has started it, else terminates
   * the thread while it still runs it (the pool replaces the thread). `reason` and `cause`
   * say why, for the thread's end.
   */
  stop(slot: number, reason: 'timeout' | 'stopped', cause: string): void {
    if (this.slots.recall(slot)) {
      this.#queue.skipHead((candidate) => this.slots.recalled(candidate));
      this.#settleRecalled();
      return;
    }
    const threadId = this.slots.kill(slot);
    if (threadId === null || !this.#terminateThread(threadId)) return;
    this.#terminating.add(slot);
    this.#report({ reason, cause, attempts: attemptsOf(this.#inFlight.get(slot)?.task.attempts), culprit: null });
  }

  /** While messages are in flight, a drain every DRAIN_MS; none while there are none. */
  #beat(): void {
    if (this.#drainTimer !== null || this.#inFlight.size === 0) return;
    this.#drainTimer = setInterval(() => this.drain(), DRAIN_MS);
  }

  /** Wakes on every thread that runs dry: drains at once and tells the listener. */
  async #watchDry(seen: number): Promise<void> {
    let count = seen;
    while (this.#piscina !== null) {
      count = await this.#queue.dry(count);
      if (this.#piscina === null) return;
      this.drain();
      this.#listener?.dry();
    }
  }

  /**
   * Reads what the threads did since the last drain: starts and answers in the slot
   * words, what they posted on their ports, recalled messages passed over. Called on the
   * beat and on a dry thread; callable any time.
   */
  drain(): void {
    const started: number[] = [];
    const answered: number[] = [];
    for (const [slot, flight] of this.#inFlight) {
      // An answered message's start goes with its outcome.
      if (this.slots.done(slot)) answered.push(slot);
      else if (!flight.startSeen && this.slots.startedAt(slot) !== null) {
        flight.startSeen = true;
        started.push(slot);
      }
    }
    // The ports after the slots: a thread posts an attempt's progress before it writes the
    // answer, so the last report of every answer seen above is read here, ahead of it.
    this.#readPorts();
    for (const slot of answered) this.#answer(slot);
    this.#queue.skipHead((candidate) => this.slots.recalled(candidate));
    this.#settleRecalled();
    this.#queue.rewake();
    if (started.length > 0) this.#listener?.started(started);
    if (this.#inFlight.size === 0 && this.#drainTimer !== null) {
      clearInterval(this.#drainTimer);
      this.#drainTimer = null;
    }
  }

  /** Settles the recalled messages every thread has passed: no thread will start them. */
  #settleRecalled(): void {
    const head = this.#queue.head;
    for (const [slot, flight] of this.#inFlight) {
      if (flight.position < head && this.slots.recalled(slot)) {
        this.#inFlight.delete(slot);
        flight.resolve('recalled');
      }
    }
  }

  /** Reads every loop's port if a thread posted on one since the last read. */
  #readPorts(): void {
    // Read before the ports: a message posted after it is read now or counted for the next read.
    const posted = this.#queue.postedCount;
    if (posted === this.#postedRead) return;
    this.#postedRead = posted;
    for (const loop of this.#loops.values()) this.#readPort(loop);
  }

  /** Handles every message waiting on a loop's port: hellos, retirements, progress, large answers. */
  #readPort(loop: Loop): void {
    for (;;) {
      const received = receiveMessageOnPort(loop.port);
      if (received === undefined) return;
      const message = received.message as LoopMessage;
      if (message.kind === 'hello') loop.threadId = message.threadId;
      else if (message.kind === 'progress') this.#onProgress(message);
      else if (message.kind === 'answer') this.#postedAnswers.set(message.slot, message.text);
      else this.#retire(message.retirement, []);
    }
  }

  /** Settles the message in `slot`, which its thread answered (its slot is DONE). */
  #answer(slot: number): void {
    const flight = this.#inFlight.get(slot);
    if (flight === undefined) return;
    // One too large for its slot was posted before the slot was marked DONE, so the ports,
    // read after the slot words, have it by now.
    const text = this.#queue.answer(slot) ?? this.#postedAnswers.get(slot);
    if (text === undefined) return;
    this.#postedAnswers.delete(slot);
    const answer = decodeAnswer(text);
    this.#inFlight.delete(slot);
    this.#terminating.delete(slot);
    const threadId = this.slots.startedBy(slot);
    if (threadId !== null) this.#startedBy.set(threadId, (this.#startedBy.get(threadId) ?? 0) + 1);
    if (answer.retire !== null) this.#retire(answer.retire, flight.task.attempts);
    flight.resolve(answer.results);
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
    if (this.#piscina === null || this.#terminated.has(threadId)) return false;
    const thread = this.#piscina.threads.find((candidate) => candidate.threadId === threadId);
    if (thread === undefined) return false;
    this.#terminated.add(threadId);
    void thread.terminate();
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
      if (this.#drainTimer !== null) clearInterval(this.#drainTimer);
      this.#drainTimer = null;
      this.#channel?.close();
      this.#channel = null;
      const closed = new Error('worker pool is closed');
      for (const flight of this.#inFlight.values()) flight.reject(closed);
      this.#inFlight.clear();
      for (const loop of this.#loops.values()) loop.port.close();
      this.#closing = piscina === null ? Promise.resolve() : piscina.destroy();
    }
    return this.#closing;
  }
}

function attemptsOf(attempts: AttemptInput[] | undefined): ThreadEnd['attempts'] {
  return (attempts ?? []).map(({ jobId, attempt }) => ({ jobId, attempt }));
}
