/**
 * Time as a service that runs timers sees it: what time it is, and a way to be called
 * back later. The system clock in production; tests give a fake one that they advance,
 * so nothing waits for real time to pass.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Calls `callback` once `ms` have passed on this clock; answers a function that cancels it. */
  setTimer(callback: () => void, ms: number): () => void;
}

/** Real time read through `now` (the store's clock), with unref()ed timers that never hold the process open. */
export function systemClock(now: () => number = Date.now): Clock {
  return {
    now,
    setTimer(callback, ms) {
      const timer = setTimeout(callback, ms);
      timer.unref();
      return () => clearTimeout(timer);
    },
  };
}
