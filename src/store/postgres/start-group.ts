import type { StartedAttempt } from '../store.js';

/**
 * Handlers' starts, gathered and written as one statement per period, so that recording
 * a start never costs a round trip of its own. A finish of the attempt before its group
 * goes takes the start out: the finish writes the start itself.
 */
export class StartGroup {
  readonly #write: (items: StartedAttempt[]) => Promise<void>;
  readonly #everyMs: number;
  readonly #pending = new Map<string, StartedAttempt>();
  #waiters: { resolve: () => void; reject: (error: unknown) => void }[] = [];
  #timer: NodeJS.Timeout | null = null;

  constructor(write: (items: StartedAttempt[]) => Promise<void>, everyMs: number) {
    this.#write = write;
    this.#everyMs = everyMs;
  }

  /** Resolves once the group holding these starts is written. */
  add(items: StartedAttempt[]): Promise<void> {
    for (const item of items) this.#pending.set(item.id, item);
    this.#timer ??= setTimeout(() => void this.flush(), this.#everyMs);
    this.#timer.unref();
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /** The attempt ended: its start need not be written. */
  drop(id: string, attempt: number): void {
    if (this.#pending.get(id)?.attempt === attempt) this.#pending.delete(id);
  }

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
      for (const waiter of waiters) waiter.reject(error);
    }
  }
}
