import type { JobStore } from '../../store/store.js';

export interface WakeTimersOptions {
  store: JobStore;
  /** Claim work for every free thread. */
  pump(): void;
  stopped(): boolean;
  paused(): boolean;
}

/**
 * The timers that make dispatch claim again when nothing else would: one for the store's
 * earliest `runAt` (a delayed or retrying job becomes due), one for the next token of a
 * rate limit that held a job back. Never one per queued job.
 */
export class WakeTimers {
  readonly #options: WakeTimersOptions;
  #limitTimer: NodeJS.Timeout | null = null;
  #limitWakeAt: number | null = null;
  #dueTimer: NodeJS.Timeout | null = null;
  #dueAt: number | null = null;

  constructor(options: WakeTimersOptions) {
    this.#options = options;
  }

  /** A rate limit held a job back until `wakeAt` (null: nothing held back by a rate limit). */
  armLimit(wakeAt: number | null): void {
    if (wakeAt === null || this.#options.stopped()) return;
    if (this.#limitTimer !== null && this.#limitWakeAt !== null && this.#limitWakeAt <= wakeAt) return;
    if (this.#limitTimer !== null) clearTimeout(this.#limitTimer);
    this.#limitWakeAt = wakeAt;
    this.#limitTimer = setTimeout(
      () => {
        this.#limitTimer = null;
        this.#limitWakeAt = null;
        this.#options.pump();
      },
      Math.max(1, wakeAt - Date.now()),
    );
    this.#limitTimer.unref();
  }

  /** Arms the timer for the store's earliest due job; `threadFree`: whether a thread could take it. */
  armDue(threadFree: boolean): void {
    const options = this.#options;
    if (options.stopped() || options.paused()) return;
    if (!threadFree) {
      // No thread is free: the next batch to end pumps (which promotes due jobs), so a
      // timer would only wake to find nothing to do.
      if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
      this.#dueTimer = null;
      this.#dueAt = null;
      return;
    }
    void options.store.nextDueAt().then(
      (dueAt) => {
        if (options.stopped() || options.paused()) return;
        if (dueAt === this.#dueAt && this.#dueTimer !== null) return;
        if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
        this.#dueTimer = null;
        this.#dueAt = dueAt;
        if (dueAt === null) return;
        const delay = Math.min(Math.max(0, dueAt - options.store.now()), 2 ** 31 - 1);
        this.#dueTimer = setTimeout(() => {
          this.#dueTimer = null;
          this.#dueAt = null;
          options.pump();
        }, delay);
        this.#dueTimer.unref();
      },
      () => {
        // The store cannot answer now; it says when it is back ('ready'), which pumps and re-arms.
      },
    );
  }

  stop(): void {
    if (this.#limitTimer !== null) clearTimeout(this.#limitTimer);
    this.#limitTimer = null;
    if (this.#dueTimer !== null) clearTimeout(this.#dueTimer);
    this.#dueTimer = null;
  }
}
