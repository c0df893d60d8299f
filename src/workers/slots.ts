/**
 * Three words of shared memory per message in the work queue (work-queue.ts) or running,
 * so the main thread and the threads agree without a message on what became of it: its state, the
 * threadId of the thread that started it, and when it started (ms since the epoch).
 *
 *   POSTED    → STARTED     the thread begins it             (thread, compare-and-exchange)
 *   POSTED    → RECALLED    the main thread takes it back    (main, compare-and-exchange)
 *   STARTED   → DONE        the thread finished it, its answer written (thread, compare-and-exchange)
 *   STARTED   → KILLING     the main thread will terminate its thread (main, compare-and-exchange)
 *
 * Each pair of moves out of one state races, and exactly one side wins. This is what
 * lets a thread start the next queued message the moment it finishes one, without
 * waiting for the main thread, while the main thread can still take a queued message
 * back (a better job arrived), terminate a thread only while it still runs the message
 * meant (never the one it took next), and tell, when a thread dies, which message it had
 * started. The main thread reads the words when it drains (pool.ts): neither a start nor
 * an answer (in the message's text, work-queue.ts) costs it a wake of its own.
 */
const WORDS = 3;
const STATE = 0;
const THREAD = 1;
const STARTED_AT = 2;

export const POSTED = 0n;
export const RECALLED = -1n;
export const STARTED = 1n;
export const DONE = 2n;
export const KILLING = 3n;

export class AttemptSlots {
  readonly buffer: SharedArrayBuffer;
  readonly #words: BigInt64Array;
  readonly #free: number[] = [];

  constructor(size: number) {
    this.buffer = new SharedArrayBuffer(size * WORDS * BigInt64Array.BYTES_PER_ELEMENT);
    this.#words = new BigInt64Array(this.buffer);
    for (let i = size - 1; i >= 0; i--) this.#free.push(i);
  }

  /** Slots free for new messages. */
  get available(): number {
    return this.#free.length;
  }

  /** A slot for a new message, set to POSTED; null when all are taken. */
  acquire(): number | null {
    const slot = this.#free.pop();
    if (slot === undefined) return null;
    Atomics.store(this.#words, slot * WORDS + THREAD, 0n);
    Atomics.store(this.#words, slot * WORDS + STARTED_AT, 0n);
    Atomics.store(this.#words, slot * WORDS + STATE, POSTED);
    return slot;
  }

  release(slot: number): void {
    this.#free.push(slot);
  }

  /** Whether the message in `slot` was taken back before a thread started it. */
  recalled(slot: number): boolean {
    return Atomics.load(this.#words, slot * WORDS + STATE) === RECALLED;
  }

  /** Take a message back before it starts; false if the thread started it first. */
  recall(slot: number): boolean {
    return Atomics.compareExchange(this.#words, slot * WORDS + STATE, POSTED, RECALLED) === POSTED;
  }

  /**
   * Claim the right to terminate the thread running this message: answers its threadId,
   * or null if the message is not running (not started, recalled, or already done, in
   * which case its thread may be running the next message and must be left alone).
   */
  kill(slot: number): number | null {
    if (Atomics.compareExchange(this.#words, slot * WORDS + STATE, STARTED, KILLING) !== STARTED) return null;
    return Number(Atomics.load(this.#words, slot * WORDS + THREAD));
  }

  /** Whether the thread finished the message: its answer is in the slot's text (work-queue.ts). */
  done(slot: number): boolean {
    return Atomics.load(this.#words, slot * WORDS + STATE) === DONE;
  }

  /** The threadId of the thread that started the message, or null if none did. */
  startedBy(slot: number): number | null {
    const state = Atomics.load(this.#words, slot * WORDS + STATE);
    if (state < STARTED) return null;
    return Number(Atomics.load(this.#words, slot * WORDS + THREAD));
  }

  /** When the thread started the message, or null if it never did (or was recalled). */
  startedAt(slot: number): number | null {
    const state = Atomics.load(this.#words, slot * WORDS + STATE);
    if (state < STARTED) return null;
    return Number(Atomics.load(this.#words, slot * WORDS + STARTED_AT));
  }
}

/** The thread's side: start the message in `slot` unless it was recalled. */
export function startSlot(words: BigInt64Array, slot: number, threadId: number): boolean {
  // Id and time first: whoever sees the message started can find its thread and its start.
  Atomics.store(words, slot * WORDS + THREAD, BigInt(threadId));
  Atomics.store(words, slot * WORDS + STARTED_AT, BigInt(Date.now()));
  return Atomics.compareExchange(words, slot * WORDS + STATE, POSTED, STARTED) === POSTED;
}

/**
 * The thread's side: the message is done, its answer written. False if the main thread is
 * terminating this thread for it: then the thread must not start anything else.
 */
export function endSlot(words: BigInt64Array, slot: number): boolean {
  return Atomics.compareExchange(words, slot * WORDS + STATE, STARTED, DONE) === STARTED;
}

/** The thread's side: whether the message in `slot` still waits to be started (not recalled). */
export function slotPosted(words: BigInt64Array, slot: number): boolean {
  return Atomics.load(words, slot * WORDS + STATE) === POSTED;
}
