/**
 * Two words of shared memory per message in flight to a thread, so the main thread and
 * the thread agree without a message on whether that message has started, and on which
 * thread runs it (the second word: its threadId). The first word:
 *
 *   0            posted, not started
 *   -1           recalled by the main thread: the thread skips it
 *   t > 0        started by the thread at t (ms since the epoch)
 *
 * Both sides move a word out of 0 with a compare-and-exchange, so a recall and a start
 * can race and exactly one of them wins. This is what lets each thread hold a
 * look-ahead message that it starts the moment it finishes the one before, without
 * waiting for the main thread, while the main thread can still take the look-ahead back
 * (a better job arrived) or tell, when a thread dies, which of its messages had started.
 */
const WORDS = 2;
export const NOT_STARTED = 0n;
export const RECALLED = -1n;

export class AttemptSlots {
  readonly buffer: SharedArrayBuffer;
  readonly #words: BigInt64Array;
  readonly #free: number[] = [];

  constructor(size: number) {
    this.buffer = new SharedArrayBuffer(size * WORDS * BigInt64Array.BYTES_PER_ELEMENT);
    this.#words = new BigInt64Array(this.buffer);
    for (let i = size - 1; i >= 0; i--) this.#free.push(i);
  }

  /** A slot for a new message, set to "not started"; null when all are taken. */
  acquire(): number | null {
    const slot = this.#free.pop();
    if (slot === undefined) return null;
    Atomics.store(this.#words, slot * WORDS + 1, 0n);
    Atomics.store(this.#words, slot * WORDS, NOT_STARTED);
    return slot;
  }

  release(slot: number): void {
    this.#free.push(slot);
  }

  /** Take a message back before it starts; false if the thread started it first. */
  recall(slot: number): boolean {
    return Atomics.compareExchange(this.#words, slot * WORDS, NOT_STARTED, RECALLED) === NOT_STARTED;
  }

  /** The threadId of the thread that started the message, or null. */
  threadOf(slot: number): number | null {
    if (this.startedAt(slot) === null) return null;
    return Number(Atomics.load(this.#words, slot * WORDS + 1));
  }

  /** When the thread started the message, or null if it has not (or was recalled). */
  startedAt(slot: number): number | null {
    const word = Atomics.load(this.#words, slot * WORDS);
    return word > 0n ? Number(word) : null;
  }
}

/** The thread's side: start the message in `slot` unless it was recalled. */
export function claimSlot(words: BigInt64Array, slot: number, threadId: number): boolean {
  // The thread's id first: whoever sees the message started can find its thread.
  Atomics.store(words, slot * WORDS + 1, BigInt(threadId));
  return Atomics.compareExchange(words, slot * WORDS, NOT_STARTED, BigInt(Date.now())) === NOT_STARTED;
}
