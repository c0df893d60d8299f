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
