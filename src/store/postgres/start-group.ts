import type { StartedAttempt } from '../store.js';

/** How soon a group that could not be written (the database is away) is tried again. */
const AGAIN_AFTER_FAILURE_MS = 1000;

/**
 * Handlers' starts, gathered and written as one statement per period, so that recording
 * a start never costs a round trip of its own. A finish of the attempt before its group
 * goes takes the start out (the finish writes the start itself), and puts it back if the
 * finish does not land: the start is a fact, whatever became of the outcome. So is a group
 * that cannot be written: its starts are kept and tried again a second later, until the
 * database takes them or the store closes.
 */
export class StartGroup {
  readonly #write: (items: StartedAttempt[]) => Promise<void>;
  readonly #everyMs: number;
  readonly #pending = new Map<string, StartedAttempt>();
  #waiters: { resolve: () => void; reject: (error: unknown) => void }[] = [];
  #timer: NodeJS.Timeout | null = null;
  #closed = false;

  constructor(write: (items: StartedAttempt[]) => Promise<void>, everyMs: number) {
    this.#write = write;
    this.#everyMs = everyMs;
  }

  /** Resolves once the group holding these starts is written. */
  add(items: StartedAttempt[]): Promise<void> {
    for (const item of items) this.#pending.set(item.id, item);
    this.#arm(this.#everyMs);
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /** The attempt ended: its start is taken out, for the finish to write. */
  take(id: string, attempt: number): StartedAttempt | undefined {
    const start = this.#pending.get(id);
    if (start?.attempt !== attempt) return undefined;
    this.#pending.delete(id);
    return start;
  }

  /** A finish of this attempt did not land: its start goes with the next group. */
  restore(start: StartedAttempt): void {
    if (this.#pending.has(start.id)) return;
    this.#pending.set(start.id, start);
    this.#arm(this.#everyMs);
  }

  /** Writes what is pending now; rejects if it could not (the starts are kept for later). */
  async flush(): Promise<void> {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    const items = [...this.#pending.values()];
    const waiters = this.#waiters;
    this.#pending.clear();
    this.#waiters = [];
    try {
      if (items.length > 0) await this.#write(items);
      for (const waiter of waiters) waiter.resolve();
    } catch (error) {
      // A start taken by a finish meanwhile is the finish's to write.
      for (const item of items) if (!this.#pending.has(item.id)) this.#pending.set(item.id, item);
      this.#arm(AGAIN_AFTER_FAILURE_MS);
      for (const waiter of waiters) waiter.reject(error);
      throw error;
    }
  }

  /** The store closes: one last write of what is pending; what it cannot write is dropped. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.flush().catch(() => undefined);
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#pending.clear();
  }

  #arm(delayMs: number): void {
    if (this.#closed || this.#pending.size === 0) return;
    this.#timer ??= setTimeout(() => void this.flush().catch(() => undefined), delayMs);
    this.#timer.unref();
  }
}
