/**
 * Preloaded into a Kiln server by the soak (`node --import …/memory-probe.mjs`): every
 * KILN_BENCH_MEMORY_MS (default 1000) ms the main thread appends one JSON line of
 * process.memoryUsage() and the V8 heap spaces to the file KILN_BENCH_MEMORY_LOG. Worker
 * threads inherit the option and do nothing. The timer is unref()ed, so it never keeps
 * the process alive.
 */
import { appendFileSync } from 'node:fs';
import { getHeapSpaceStatistics } from 'node:v8';
import { isMainThread } from 'node:worker_threads';

const path = process.env.KILN_BENCH_MEMORY_LOG;
if (isMainThread && path !== undefined && path !== '') {
  const everyMs = Number(process.env.KILN_BENCH_MEMORY_MS ?? 1000);
  const timer = setInterval(() => {
    const spaces = Object.fromEntries(getHeapSpaceStatistics().map((s) => [s.space_name, s.space_used_size]));
    appendFileSync(path, `${JSON.stringify({ at: Date.now(), ...process.memoryUsage(), spaces })}\n`);
  }, everyMs);
  timer.unref();
}
