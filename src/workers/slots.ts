/**
 * Three words of shared memory per message in flight to a thread, so the main thread
 * and the thread agree without a message on what became of it: its state, the
 * threadId of the thread that started it, and when it started (ms since the epoch).
 *
 *   POSTED    → STARTED     the thread begins it             (thread, compare-and-exchange)
 *   POSTED    → RECALLED    the main thread takes it back    (main, compare-and-exchange)
 *   STARTED   → DONE        the thread finished it           (thread, compare-and-exchange)
 *   STARTED   → KILLING     the main thread will terminate its thread (main, compare-and-exchange)
 *
 * Each pair of moves out of one state races, and exactly one side wins. This is what
 * lets each thread hold a look-ahead message that it starts the moment it finishes the
 * one before, without waiting for the main thread, while the main thread can still
 * take the look-ahead back (a better job arrived), terminate a thread only while it
 * still runs the message meant (never the look-ahead that followed it), and tell, when
 * a thread dies, which of its messages had started. A move out of POSTED, and the release
 * of a slot, notify the state word, so the main thread hears of a start without polling.
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
    // Wakes a waiter for a message that never left POSTED (its thread died first).
    Atomics.notify(this.#words, slot * WORDS + STATE);
    this.#free.push(slot);
  }

  /**
   * Resolves once the message in `slot` is no longer POSTED (started or recalled) or the
   * slot is released; the caller reads which with `startedAt`.
   */
  async leftPosted(slot: number): Promise<void> {
    const wait = Atomics.waitAsync(this.#words, slot * WORDS + STATE, POSTED);
    if (wait.async) await wait.value;
  }

  /** Take a message back before it starts; false if the thread started it first. */
  recall(slot: number): boolean {
    if (Atomics.compareExchange(this.#words, slot * WORDS + STATE, POSTED, RECALLED) !== POSTED) return false;
    Atomics.notify(this.#words, slot * WORDS + STATE);
    return true;
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
  if (Atomics.compareExchange(words, slot * WORDS + STATE, POSTED, STARTED) !== POSTED) return false;
  Atomics.notify(words, slot * WORDS + STATE);
  return true;
}

/**
 * The thread's side: the message is done. False if the main thread is terminating this
 * thread for it: then the thread must not start anything else.
 */
export function endSlot(words: BigInt64Array, slot: number): boolean {
  return Atomics.compareExchange(words, slot * WORDS + STATE, STARTED, DONE) === STARTED;
}
