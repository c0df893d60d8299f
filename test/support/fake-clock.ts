import type { Clock } from '../../src/time/clock.js';

/**
 * A clock that stands still until a test moves it, with timers that fire as it moves:
 * `advance` runs every timer that falls due, in time order, each at its own time. What
 * the timers start (a pass over due schedule ticks) is awaited by the test itself.
 */
export class FakeClock implements Clock {
  #now: number;
  #timers: { at: number; seq: number; callback: () => void }[] = [];
  #seq = 0;

  constructor(start: number) {
    this.#now = start;
  }

  readonly now = (): number => this.#now;

  #waiters: { at: number; resolve: () => void }[] = [];

  setTimer(callback: () => void, ms: number): () => void {
    const timer = { at: this.#now + Math.max(0, ms), seq: ++this.#seq, callback };
    this.#timers.push(timer);
    for (const waiter of this.#waiters.filter((w) => w.at === timer.at)) waiter.resolve();
    this.#waiters = this.#waiters.filter((w) => w.at !== timer.at);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** Timers set and not yet fired or cancelled. */
  get pendingTimers(): number {
    return this.#timers.length;
  }

  /** When the earliest pending timer fires, or null. */
  get nextTimerAt(): number | null {
    return this.#timers.reduce<number | null>((at, t) => (at === null || t.at < at ? t.at : at), null);
  }

  /** Resolves when a timer is (or already stands) set for `at`. */
  whenTimerSetFor(at: number): Promise<void> {
    if (this.#timers.some((t) => t.at === at)) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ at, resolve }));
  }

  /** Moves time on by `ms`, firing the timers that fall due on the way. */
  advance(ms: number): void {
    this.set(this.#now + ms);
  }

  set(to: number): void {
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= to).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (due === undefined) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = Math.max(this.#now, due.at);
      due.callback();
    }
    this.#now = Math.max(this.#now, to);
  }
}
