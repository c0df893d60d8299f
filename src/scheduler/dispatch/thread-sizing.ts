/**
 * How many worker threads to hand work to. Each job costs the main thread about
 * MAIN_MS_PER_JOB to hand out and settle (claim, message, outcome, events), whatever
 * its handler does. A thread running jobs of mean run time `t` is kept busy by the main
 * thread for a share t ÷ MAIN_MS_PER_JOB of its time, so that many threads (rounded,
 * at least one) run all the main thread can hand out; more only take cores from the
 * main thread and the store thread without finishing a job sooner. Jobs of a type not
 * measured yet are taken to be large.
 */

/** The main thread's CPU per job handed out, in ms (bench/README.md: main-thread CPU per noop job). */
export const MAIN_MS_PER_JOB = 0.02;

/** The work each thread has queued ahead of it, in ms: enough to cover a claim's round trip to the store and its commit. */
export const AHEAD_MS = 10;

/**
 * Messages queued ahead of each thread for jobs whose mean run time is `meanMs` (null: not
 * known yet): about AHEAD_MS of work, from one to `maxAhead`. Short jobs need several, or a
 * thread runs dry while the next claim is committed; long ones need one, so a server does
 * not hold work other servers could start.
 */
export function queueAhead(meanMs: number | null, maxAhead: number): number {
  if (meanMs === null || meanMs <= 0) return 1;
  return Math.min(maxAhead, Math.max(1, Math.ceil(AHEAD_MS / meanMs)));
}

/** Threads for jobs whose mean run time is `meanMs` (null: not known yet), out of `threads`. */
export function threadsFor(meanMs: number | null, threads: number, mainMsPerJob = MAIN_MS_PER_JOB): number {
  if (meanMs === null) return threads;
  return Math.min(threads, Math.max(1, Math.round(meanMs / mainMsPerJob)));
}

/**
 * The largest mean run time among the claimed jobs, in ms, by `meanMs` of each type; null
 * as soon as one type has none (not measured yet, or isolated): such jobs get every thread.
 */
export function largestMeanMs(
  batches: readonly (readonly { type: string }[])[],
  meanMs: (type: string) => number | null,
): number | null {
  let largest = 0;
  for (const jobs of batches) {
    for (const job of jobs) {
      const mean = meanMs(job.type);
      if (mean === null) return null;
      largest = Math.max(largest, mean);
    }
  }
  return largest;
}

/** What of the pool the work ahead is sized against. */
export interface SizedPool {
  /** Threads that take work. */
  readonly threadsInUse: number;
  /** Message slots free in the work queue. */
  readonly slots: { readonly available: number };
  useThreads(count: number): void;
}

/**
 * How many threads take work and how many claimed messages wait ahead of them: sized
 * after each claim to the jobs it brought (threadsFor, queueAhead), and asked before each
 * claim how many messages it may bring.
 */
export class WorkAhead {
  readonly #pool: SizedPool;
  readonly #options: { threads: number; maxAhead: number; mainMsPerJob?: number | undefined };
  /** Messages queued ahead of each thread in use (queueAhead, from the jobs last claimed). */
  #ahead = 1;

  constructor(pool: SizedPool, options: { threads: number; maxAhead: number; mainMsPerJob?: number | undefined }) {
    this.#pool = pool;
    this.#options = options;
  }

  /**
   * How many messages a claim may bring now, with `held` claimed here and not ended (recalled
   * ones aside). Every thread in use has one running and `ahead` queued at most. Recalled
   * messages free their thread's place at once but keep their slot until their thread gets
   * to them: never more messages than there are slots. While every thread has a message,
   * the queue is refilled only once half of what it holds ahead has been taken: a claim
   * that waits for its commit then brings several messages, not one per job that ends
   * (each a commit of its own), and the half left ahead still covers that commit.
   */
  room(held: number): number {
    const threads = this.#pool.threadsInUse;
    const free = Math.min(threads * (1 + this.#ahead) - held, this.#pool.slots.available);
    if (held >= threads && free < Math.ceil((threads * this.#ahead) / 2)) return 0;
    return free;
  }

  /**
   * Threads and depth sized to the largest mean run time among the jobs just claimed (null:
   * not known). More threads come into use with the next claim, fewer as the messages on
   * the others end. Answers whether there is more room than before (a claim should follow).
   */
  sizeTo(meanMs: number | null): boolean {
    const wanted = threadsFor(meanMs, this.#options.threads, this.#options.mainMsPerJob);
    const ahead = queueAhead(meanMs, this.#options.maxAhead);
    const more = ahead > this.#ahead || wanted > this.#pool.threadsInUse;
    this.#ahead = ahead;
    this.#pool.useThreads(wanted);
    return more;
  }
}
