/**
 * What one wake of a sleeping Node thread costs it on a core on this machine, doing
 * nothing: the main thread woken by a 1 ms timer for 2 s, beside 0, 1 or 2 worker threads
 * that spin, read from Linux's /proc/<pid>/task/<pid>/schedstat (ns on a core, ns waiting
 * for one, times put on a core). The floor under every wake main-thread-cost counts.
 *
 *   node bench/wake-floor.mjs
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import { mainThreadSchedstat } from './lib/thread-cpu.mjs';

const SPIN = `const end = Date.now() + Number(require('node:worker_threads').workerData); let n = 0; while (Date.now() < end) n++;`;

for (const spinners of [0, 1, 2]) {
  const workers = Array.from({ length: spinners }, () => new Worker(SPIN, { eval: true, workerData: 3000 }));
  await sleep(300);
  const before = mainThreadSchedstat(process.pid);
  let ticks = 0;
  const timer = setInterval(() => {
    ticks += 1;
  }, 1);
  await sleep(2000);
  clearInterval(timer);
  const after = mainThreadSchedstat(process.pid);
  const runs = after.runs - before.runs;
  console.log(
    `beside ${spinners} spinning thread(s): ${ticks} timer wakes, ${runs} times on a core, ` +
      `${((after.onCpuNs - before.onCpuNs) / 1000 / runs).toFixed(1)} µs on a core and ` +
      `${((after.waitingNs - before.waitingNs) / 1000 / runs).toFixed(1)} µs waiting for one per time`,
  );
  await Promise.all(workers.map((worker) => worker.terminate()));
}
