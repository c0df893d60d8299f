import type { JobEvents } from './events.js';
import type { JobStore } from '../store/store.js';
import { isTerminal, type Job } from '../contract/job.js';
import { unavailable } from './errors.js';

export interface LongPollSources {
  store: JobStore;
  events: JobEvents;
  /** Aborted when draining starts: a long poll answers at once then. */
  drain: AbortSignal;
}

/**
 * The job once it is terminal, or as it is after `waitMs` (or when `signal` or the drain
 * aborts); null if there is no such job.
 */
export async function waitForTerminal(
  sources: LongPollSources,
  id: string,
  waitMs: number,
  signal?: AbortSignal,
): Promise<Job | null> {
  const { store, events, drain } = sources;
  if (waitMs <= 0 || drain.aborted) return store.get(id).catch(unavailable);
  let settle: (() => void) | undefined;
  const terminal = new Promise<void>((resolve) => {
    settle = resolve;
  });
  const unsubscribe = events.subscribe(id, (job) => {
    if (job === null || isTerminal(job.status)) settle?.();
  });
  const timer = setTimeout(() => settle?.(), waitMs);
  const onAbort = () => settle?.();
  signal?.addEventListener('abort', onAbort, { once: true });
  drain.addEventListener('abort', onAbort, { once: true });
  try {
    const job = await store.get(id).catch(unavailable);
    if (job === null || isTerminal(job.status)) return job;
    // A change another server made whose notification was lost shows in the watch sweep.
    await terminal;
    return await store.get(id).catch(unavailable);
  } finally {
    clearTimeout(timer);
    unsubscribe();
    signal?.removeEventListener('abort', onAbort);
    drain.removeEventListener('abort', onAbort);
  }
}
