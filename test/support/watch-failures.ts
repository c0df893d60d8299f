import type { JobStore } from '../../src/store/store.js';

export interface WatchedStore {
  /** The same store, whose calls of the watched method are counted as they fail. */
  store: JobStore;
  failures(): number;
  /** Resolves at the next failure of the watched method. */
  nextFailure(timeoutMs?: number): Promise<void>;
}

/** A real store, with a signal each time one of its methods rejects. */
export function watchFailures(store: JobStore, method: 'claim' | 'claimDeliveries'): WatchedStore {
  let failures = 0;
  const waiters: (() => void)[] = [];
  const watched = new Proxy(store, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      const bound = (value as (...args: unknown[]) => unknown).bind(target);
      if (property !== method) return bound;
      return (...args: unknown[]) =>
        (bound(...args) as Promise<unknown>).catch((error: unknown) => {
          failures += 1;
          for (const resolve of waiters.splice(0)) resolve();
          throw error;
        });
    },
  });
  return {
    store: watched,
    failures: () => failures,
    nextFailure: (timeoutMs = 30_000) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${method} failed within ${timeoutMs} ms`)), timeoutMs);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}
