/**
 * Raw piscina baseline (a child process of a benchmark): runs `count` tasks, one task
 * per job, each calling the same built-in Kiln task handler (dist/src/workers/tasks/…)
 * that Kiln runs, on `threads` threads, all submitted at once (piscina's own queue
 * holds them). Optionally first times that handler on one thread, alone
 * (`singleThreadSamples` calls), which gives the ideal rate: cores ÷ task time.
 *
 * Input: one JSON argument { task: 'cpu.spin'|'noop', payload, count, threads, singleThreadSamples, warm }.
 * Output: one JSON line { startedAt, doneAt, count, singleThreadTaskMs }.
 */
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Piscina } from 'piscina';
import { BENCH_DIR, ROOT_DIR } from '../lib/processes.mjs';

const input = JSON.parse(process.argv[2] ?? '{}');
const { task, payload = {}, count, threads, singleThreadSamples = 0, warm = 0 } = input;
const taskUrl = pathToFileURL(join(ROOT_DIR, 'dist', 'src', 'workers', 'tasks', `${task}.js`)).href;

let singleThreadTaskMs = null;
if (singleThreadSamples > 0) {
  const { default: definition } = await import(taskUrl);
  const ctx = { jobId: 'bench', attempt: 1, signal: new AbortController().signal, progress() {}, parents: [] };
  for (let i = 0; i < Math.min(20, singleThreadSamples); i++) await definition.handler(payload, ctx);
  const start = performance.now();
  for (let i = 0; i < singleThreadSamples; i++) await definition.handler(payload, ctx);
  singleThreadTaskMs = (performance.now() - start) / singleThreadSamples;
}

const pool = new Piscina({
  filename: pathToFileURL(join(BENCH_DIR, 'baseline', 'piscina-worker.mjs')).href,
  minThreads: threads,
  maxThreads: threads,
  idleTimeout: Number.POSITIVE_INFINITY,
  workerData: { taskUrl },
});
// Warm every thread (its import of the task module) before the clock starts, and as many
// tasks as Kiln's warm-up (lib/measure.mjs, WARM_JOBS; a cpu.spin of 0 ms) so that both
// are measured compiled.
await Promise.all(Array.from({ length: threads * 2 }, () => pool.run(payload)));
const warmPayload = task === 'cpu.spin' ? { ...payload, ms: 0 } : payload;
await Promise.all(Array.from({ length: warm }, () => pool.run(warmPayload)));

const startedAt = Date.now();
const runs = new Array(count);
for (let i = 0; i < count; i++) runs[i] = pool.run(payload);
await Promise.all(runs);
const doneAt = Date.now();
await pool.destroy();
process.stdout.write(`${JSON.stringify({ startedAt, doneAt, count, singleThreadTaskMs })}\n`);
