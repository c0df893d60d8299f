/**
 * The queue every worker thread takes its work from, in shared memory: no message per
 * job travels from the main thread to a thread, and no job is bound to a thread before
 * the thread starts it.
 *
 * The main thread publishes messages (one job, or a micro-batch of tiny ones) in the
 * order it claimed them; each thread, when it has nothing running, takes the oldest
 * message not yet taken. So a message waits only while every thread in use is busy, and
 * messages start in the order they were published, across threads.
 *
 *   ring     one Int32 per position: the attempt slot of the message published there
 *            (and its ISOLATED bit). Positions are counters: `tail` messages published,
 *            `head` taken; position p lives at ring[p % size].
 *   texts    one growable SharedArrayBuffer per attempt slot holding its message as UTF-8
 *            JSON, then, once a thread has run it, its answer; `lengths[slot]` the byte
 *            length of what it holds.
 *
 * Invariants:
 * - Only the main thread writes `tail`, a ring entry, a slot's text and its length, and it
 *   writes the entry and the text before it moves `tail` past them.
 * - Anyone moves `head` with a compare-and-exchange from the value it read; a thread reads
 *   a message's text before it moves `head` past it, and a text is rewritten only once its
 *   slot is free again, which is after `head` has passed it: so a thread whose
 *   compare-and-exchange succeeded read the text whole.
 * - The thread that started a message writes its answer over the text, and its length,
 *   before it marks the slot DONE (slots.ts); the main thread reads the answer once it sees
 *   DONE, and only then frees the slot. So neither side writes a text the other reads. An
 *   answer too large for the slot goes on the thread's port, posted before DONE, with the
 *   length word saying so.
 * - Each message holds its attempt slot until `head` has passed it, and there are as many
 *   ring positions as slots, so `tail - head` never exceeds the ring.
 * - A message taken back before it starts (its slot RECALLED, see slots.ts) stays in the
 *   ring until `head` passes it: a thread, or the main thread when it is at the head,
 *   skips it without running it.
 *
 * Wakes: a thread with nothing to take waits on `tail` (Atomics.waitAsync; the main thread
 * wakes one waiter per message it publishes, and on its beat wakes waiters again for
 * messages none took, see rewake) and, as it starts waiting, counts itself on DRY and notifies
 * it, which is what wakes the main thread to claim more. A parked thread waits on IN_USE.
 * Answers are not rung, and travel on no port (a message on a port wakes its receiver's
 * event loop whether or not it listens): the main thread collects them on its own beat
 * while work is in flight (see pool.ts).
 */
const TAIL = 0;
const HEAD = 1;
/** Threads that take work (seats 0 to IN_USE - 1); the others stay parked. */
const IN_USE = 2;
/** Counts threads that found nothing to take; the main thread waits on it. */
const DRY = 3;
/** Counts messages the threads posted on their ports: a drain reads the ports only when it moved. */
const POSTED = 4;
const CONTROL_WORDS = 5;

const SLOT_MASK = 0x3fffffff;
const ISOLATED = 0x40000000;

/** A slot's text starts at this size and grows by doubling as larger messages need. */
const INITIAL_TEXT_BYTES = 16 * 1024;
/** The largest answer a slot's text grows to hold; a larger one goes on the thread's port. */
const ANSWER_IN_SLOT_BYTES = 64 * 1024;
/** The length word of a slot whose answer went on the thread's port. */
const ANSWER_ON_PORT = -1;
/** The largest message (its attempts' payloads and parents' results, as JSON). */
const MAX_TEXT_BYTES = 2 ** 31 - 1;

export interface WorkQueueBuffers {
  control: SharedArrayBuffer;
  ring: SharedArrayBuffer;
  lengths: SharedArrayBuffer;
  texts: SharedArrayBuffer[];
}

/** The main thread's side. */
export class WorkQueue {
  readonly buffers: WorkQueueBuffers;
  readonly #control: Int32Array;
  readonly #ring: Int32Array;
  readonly #lengths: Int32Array;
  readonly #texts: Buffer[];
  /** `head` at the last rewake(). */
  #headAtRewake = -1;

  constructor(slots: number, threadsInUse: number) {
    this.buffers = {
      control: new SharedArrayBuffer(CONTROL_WORDS * 4),
      ring: new SharedArrayBuffer(slots * 4),
      lengths: new SharedArrayBuffer(slots * 4),
      texts: Array.from(
        { length: slots },
        () => new SharedArrayBuffer(INITIAL_TEXT_BYTES, { maxByteLength: MAX_TEXT_BYTES }),
      ),
    };
    this.#control = new Int32Array(this.buffers.control);
    this.#ring = new Int32Array(this.buffers.ring);
    this.#lengths = new Int32Array(this.buffers.lengths);
    this.#texts = this.buffers.texts.map((buffer) => Buffer.from(buffer));
    Atomics.store(this.#control, IN_USE, threadsInUse);
  }

  /**
   * The answer a thread wrote over the message in `slot` (read once the slot is DONE);
   * null when it was too large for the slot and went on the thread's port instead.
   */
  answer(slot: number): string | null {
    if (Atomics.load(this.#lengths, slot) === ANSWER_ON_PORT) return null;
    return readText(this.buffers.texts, this.#texts, this.#lengths, slot);
  }

  /** Messages taken (started or skipped) since the pool opened. */
  get head(): number {
    return Atomics.load(this.#control, HEAD);
  }

  /**
   * Publishes the message in `slot` (its JSON text) behind every one published before;
   * answers its position. The slot must be free of any earlier message (see the header).
   */
  publish(slot: number, text: string, isolated: boolean): number {
    writeText(this.buffers.texts, this.#texts, this.#lengths, slot, text, Buffer.byteLength(text, 'utf8'));
    const position = Atomics.load(this.#control, TAIL);
    Atomics.store(this.#ring, position % this.#ring.length, slot | (isolated ? ISOLATED : 0));
    Atomics.store(this.#control, TAIL, position + 1);
    // One waiter per message: waking every waiting thread for each message woke all but
    // one for nothing, and each of those counted itself dry and woke the main thread.
    Atomics.notify(this.#control, TAIL, 1);
    return position;
  }

  /**
   * Wakes waiting threads again for messages that no thread took since the last call
   * (`head` has not moved while messages waited): a wake can go to a thread that is
   * being terminated, or that was parked as it woke, and its message would otherwise wait
   * for the next publish or for a busy thread to finish. Called on the main thread's beat;
   * answers how many threads it woke.
   */
  rewake(): number {
    const head = Atomics.load(this.#control, HEAD);
    const queued = Atomics.load(this.#control, TAIL) - head;
    const unmoved = head === this.#headAtRewake;
    this.#headAtRewake = head;
    return queued > 0 && unmoved ? Atomics.notify(this.#control, TAIL, queued) : 0;
  }

  /**
   * Moves `head` past the messages at the head that `skippable` says no thread is to run
   * (recalled), so their slots come free without waiting for a thread.
   */
  skipHead(skippable: (slot: number) => boolean): void {
    for (;;) {
      const head = Atomics.load(this.#control, HEAD);
      if (head >= Atomics.load(this.#control, TAIL)) return;
      const slot = Atomics.load(this.#ring, head % this.#ring.length) & SLOT_MASK;
      if (!skippable(slot)) return;
      Atomics.compareExchange(this.#control, HEAD, head, head + 1);
    }
  }

  /** Sets the threads that take work; the others stay parked (they are woken to see it). */
  useThreads(count: number): void {
    if (Atomics.exchange(this.#control, IN_USE, count) !== count) Atomics.notify(this.#control, IN_USE);
  }

  /** Resolves when a thread next finds nothing to take (from `seen`, the count last read). */
  async dry(seen: number): Promise<number> {
    const wait = Atomics.waitAsync(this.#control, DRY, seen);
    if (wait.async) await wait.value;
    return Atomics.load(this.#control, DRY);
  }

  get dryCount(): number {
    return Atomics.load(this.#control, DRY);
  }

  /** Messages the threads posted on their ports so far. */
  get postedCount(): number {
    return Atomics.load(this.#control, POSTED);
  }
}

/** A message a thread took: its slot and its text. */
export interface Taken {
  slot: number;
  text: string;
}

/** The worker thread's side. */
export class WorkQueueReader {
  readonly #buffers: WorkQueueBuffers;
  readonly #control: Int32Array;
  readonly #ring: Int32Array;
  readonly #lengths: Int32Array;
  readonly #texts: Buffer[];

  constructor(buffers: WorkQueueBuffers) {
    this.#buffers = buffers;
    this.#control = new Int32Array(buffers.control);
    this.#ring = new Int32Array(buffers.ring);
    this.#lengths = new Int32Array(buffers.lengths);
    this.#texts = buffers.texts.map((buffer) => Buffer.from(buffer));
  }

  /** Counts a message this thread posted on its port (after posting it). */
  posted(): void {
    Atomics.add(this.#control, POSTED, 1);
  }

  /** Whether a thread in `seat` takes work now. */
  inUse(seat: number): boolean {
    return seat < Atomics.load(this.#control, IN_USE);
  }

  /**
   * Takes the oldest message not taken, skipping those `runnable` refuses (recalled);
   * `'isolated'` when the oldest asks for a fresh thread and `fresh` is false (it is left
   * for another thread); null when there is none.
   */
  take(fresh: boolean, runnable: (slot: number) => boolean): Taken | 'isolated' | null {
    for (;;) {
      const head = Atomics.load(this.#control, HEAD);
      if (head >= Atomics.load(this.#control, TAIL)) return null;
      const entry = Atomics.load(this.#ring, head % this.#ring.length);
      const slot = entry & SLOT_MASK;
      const run = runnable(slot);
      if (run && (entry & ISOLATED) !== 0 && !fresh) return 'isolated';
      const text = run ? this.#read(slot) : null;
      if (Atomics.compareExchange(this.#control, HEAD, head, head + 1) !== head) continue;
      if (text !== null) return { slot, text };
    }
  }

  /** Resolves when the threads in use may have changed (a parked thread waits here). */
  async seatsChanged(seat: number): Promise<void> {
    const inUse = Atomics.load(this.#control, IN_USE);
    if (seat < inUse) return;
    const wait = Atomics.waitAsync(this.#control, IN_USE, inUse);
    if (wait.async) await wait.value;
  }

  /**
   * Resolves when a message may have been published since the queue was found empty;
   * counts this thread on DRY first, which wakes the main thread to claim more.
   */
  async published(): Promise<void> {
    const tail = Atomics.load(this.#control, TAIL);
    if (Atomics.load(this.#control, HEAD) < tail) return;
    Atomics.add(this.#control, DRY, 1);
    Atomics.notify(this.#control, DRY);
    const wait = Atomics.waitAsync(this.#control, TAIL, tail);
    if (wait.async) await wait.value;
  }

  /**
   * Writes the answer to the message this thread started in `slot` over its text; the
   * caller then marks the slot DONE (slots.ts endSlot), which is what the main thread
   * reads. False for an answer larger than the slot holds and than ANSWER_IN_SLOT_BYTES
   * (a large result): the slot says so, and the caller posts the answer on its port
   * before it marks the slot DONE. A slot's memory never shrinks, so a slot is not grown
   * for a result; a wake per large result costs little beside making it.
   */
  answer(slot: number, text: string): boolean {
    const bytes = Buffer.byteLength(text, 'utf8');
    const buffer = this.#buffers.texts[slot];
    if (buffer === undefined) throw new RangeError(`no attempt slot ${slot}`);
    if (bytes > Math.max(buffer.byteLength, ANSWER_IN_SLOT_BYTES)) {
      Atomics.store(this.#lengths, slot, ANSWER_ON_PORT);
      return false;
    }
    writeText(this.#buffers.texts, this.#texts, this.#lengths, slot, text, bytes);
    return true;
  }

  #read(slot: number): string {
    return readText(this.#buffers.texts, this.#texts, this.#lengths, slot);
  }
}

/** The view of a slot's text, made again when the buffer grew (on this thread or another). */
function viewOf(buffers: SharedArrayBuffer[], views: Buffer[], slot: number, bytes: number): Buffer {
  const buffer = buffers[slot];
  let view = views[slot];
  if (buffer === undefined || view === undefined) throw new RangeError(`no attempt slot ${slot}`);
  if (bytes > buffer.byteLength) {
    if (bytes > MAX_TEXT_BYTES) throw new RangeError(`a text of ${bytes} bytes is over ${MAX_TEXT_BYTES}`);
    buffer.grow(Math.min(MAX_TEXT_BYTES, 2 ** Math.ceil(Math.log2(bytes))));
  }
  if (view.length !== buffer.byteLength) {
    view = Buffer.from(buffer);
    views[slot] = view;
  }
  return view;
}

/** Writes `text` (`bytes` long in UTF-8) as the slot's text: its bytes, then its length. */
function writeText(
  buffers: SharedArrayBuffer[],
  views: Buffer[],
  lengths: Int32Array,
  slot: number,
  text: string,
  bytes: number,
): void {
  viewOf(buffers, views, slot, bytes).write(text, 0, bytes, 'utf8');
  Atomics.store(lengths, slot, bytes);
}

function readText(buffers: SharedArrayBuffer[], views: Buffer[], lengths: Int32Array, slot: number): string {
  const bytes = Atomics.load(lengths, slot);
  return viewOf(buffers, views, slot, 0).toString('utf8', 0, bytes);
}
