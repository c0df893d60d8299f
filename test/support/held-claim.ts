import assert from 'node:assert/strict';
import { Dispatcher } from '../../src/scheduler/dispatch/dispatcher.js';
import { KilnMetrics } from '../../src/scheduler/statistics/metrics.js';
import { silentLog } from '../../src/fault-log.js';
import type { ClaimRequest } from '../../src/store/facets/claims.js';
import type { JobStore } from '../../src/store/store.js';
import type { WorkerPool } from '../../src/workers/pool.js';

/** A dispatcher on `store` and `pool` (of `threads` threads), as a test drives one: any error it reports fails the test. */
export function testDispatcher(store: JobStore, pool: WorkerPool, threads: number): Dispatcher {
  return new Dispatcher({
    store,
    pool,
    metrics: new KilnMetrics({
      counts: () => store.counts(),
      capacity: 100,
      threads: () => threads,
      busyThreads: () => 0,
    }),
    threads,
    leaseMs: 60_000,
    maxSnoozes: 100,
    onError: (message, error) => assert.fail(`${message}: ${String(error)}`),
    log: silentLog,
  });
}

/** A promise and the function that resolves it. */
export function signal(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => {
    resolve = done;
  });
  return { promise, resolve };
}

/**
 * `real`, except that its first claim to take jobs takes them in the store, then holds its
 * answer until `answer()` (`claimed` resolves meanwhile), and every release is recorded.
 */
export function holdFirstClaim(real: JobStore): {
  store: JobStore;
  claimed: Promise<void>;
  answer: () => void;
  released: string[];
} {
  const claimed = signal();
  const answer = signal();
  const released: string[] = [];
  let holding = true;
  const store = new Proxy(real, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (property === 'claim') {
        return async (request: ClaimRequest) => {
          const batches = await target.claim(request);
          if (batches.length > 0 && holding) {
            holding = false;
            claimed.resolve();
            await answer.promise;
          }
          return batches;
        };
      }
      if (property === 'release') {
        return async (items: Parameters<JobStore['release']>[0]) => {
          await target.release(items);
          released.push(...items.map((item) => item.id));
        };
      }
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store, claimed: claimed.promise, answer: answer.resolve, released };
}
