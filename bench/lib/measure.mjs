/** Measurements shared by several benchmarks: a Kiln submission run and a raw piscina run. */
import { join } from 'node:path';
import { eventLoopLag, waitUntilIdle } from './kiln-client.mjs';
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

/** Runs a few jobs and waits for them, so threads have loaded the task module before a measurement. */
export async function warmKiln(server, job, count) {
  const { requestJson } = await import('./kiln-client.mjs');
  const answer = await requestJson(`${server.url}/v1/jobs/batch`, {
    method: 'POST',
    body: { jobs: Array.from({ length: count }, () => job) },
  });
  await waitUntilIdle(server.url, { lastJobId: answer.jobs.at(-1).id, timeoutMs: 60_000 });
  return count;
}

/** Raw piscina, one task per job, same handler; see baseline/piscina-tasks.mjs. */
export async function measurePiscinaRun(input) {
  const result = await runNodeJson(join(BENCH_DIR, 'baseline', 'piscina-tasks.mjs'), input, { timeoutMs: 600_000 });
  const elapsedMs = result.doneAt - result.startedAt;
  return { elapsedMs, jobsPerSecond: (input.count / elapsedMs) * 1000, singleThreadTaskMs: result.singleThreadTaskMs };
}
