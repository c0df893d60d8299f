/** Measurements shared by several benchmarks: a Kiln submission run and a raw piscina run. */
import { join } from 'node:path';
import { eventLoopLag, requestJson, waitUntilIdle } from './kiln-client.mjs';
import { BENCH_DIR, runNodeJson } from './processes.mjs';

/**
 * Submits `total` jobs from a load-generator child and waits until all have finished;
 * answers the rate from the first request to the last completion, and the server's
 * event-loop lag over exactly that span. Throws if any job did not complete.
 */
export async function measureKilnRun(server, load, options = {}) {
  await eventLoopLag(server.url); // resets the server's lag histogram
  const result = await runNodeJson(
    join(BENCH_DIR, 'load', 'submit-jobs.mjs'),
    { url: server.url, ...load },
    { cpus: options.cpus ?? null, timeoutMs: options.timeoutMs ?? 600_000 },
  );
  const lag = await eventLoopLag(server.url);
  const expected = (options.completedBefore ?? 0) + load.total;
  if (result.submitted !== load.total) throw new Error(`submitted ${result.submitted} of ${load.total} jobs`);
  if (result.completed !== expected || result.failed !== 0) {
    throw new Error(
      `expected ${expected} completed jobs, the queue says ${result.completed} completed, ${result.failed} failed`,
    );
  }
  const elapsedMs = result.doneAt - result.startedAt;
  return {
    elapsedMs,
    submitMs: result.submittedAt - result.startedAt,
    jobsPerSecond: (load.total / elapsedMs) * 1000,
    // First request → idle seen, on the clock of CPU profiles (µs).
    monotonicWindowUs: [result.startedAtUs, result.doneAtUs],
    eventLoopLag: lag,
    ...(result.latencyP99Ms === undefined ? {} : { submitLatencyP99Ms: result.latencyP99Ms }),
  };
}

/**
 * Jobs run before a measurement so that it sees a server as it runs for hours, not one
 * still compiling: V8 optimizes the functions of the job's path on helper threads over
 * its first few thousand jobs. Measured with cpu-budget's 5 ms jobs: after 200 jobs of
 * warm-up, every thread but the main thread and the workers (the store thread and V8's
 * helpers, busy compiling) spent 535-626 µs per job; after 5,000 more, 355-400.
 */
export const WARM_JOBS = 5000;

/**
 * Runs `count` jobs and waits for them, so that V8 has compiled the job's path (HTTP,
 * store, dispatch, finish) and the threads have loaded the task module before a
 * measurement: the last 4 (or all, when fewer) like `job`, the rest noop, in batches of 100.
 * The bulk is noop, not `job` at no cost: the dispatcher learns each type's run time, and a
 * cpu.spin learned at 0 ms would be micro-batched and given one thread. Answers `count`.
 */
export async function warmKiln(server, job, count = WARM_JOBS) {
  const send = (jobs) => requestJson(`${server.url}/v1/jobs/batch`, { method: 'POST', body: { jobs } });
  const own = Math.min(4, count);
  for (let sent = 0; sent < count - own; sent += 100) {
    await send(Array.from({ length: Math.min(100, count - own - sent) }, () => ({ type: 'noop' })));
  }
  const last = await send(Array.from({ length: own }, () => job));
  await waitUntilIdle(server.url, { lastJobId: last.jobs.at(-1).id, timeoutMs: 120_000 });
  return count;
}

/** Raw piscina, one task per job, same handler; see baseline/piscina-tasks.mjs. */
export async function measurePiscinaRun(input) {
  const result = await runNodeJson(join(BENCH_DIR, 'baseline', 'piscina-tasks.mjs'), input, { timeoutMs: 600_000 });
  const elapsedMs = result.doneAt - result.startedAt;
  return { elapsedMs, jobsPerSecond: (input.count / elapsedMs) * 1000, singleThreadTaskMs: result.singleThreadTaskMs };
}
