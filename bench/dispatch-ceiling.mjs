/**
 * Figure 17, the dispatch ceiling of one process: how many single jobs (not micro-batched)
 * one Kiln server hands out per second of its main thread's CPU when it runs many threads,
 * as on a machine of many cores.
 *
 * A 2-core machine cannot run 64 CPU-bound handlers at once, so the jobs here are `block`
 * (bench/tasks/block.mjs): each holds its thread for `ms` without using a core, which is
 * what a job of `ms` on a core of its own looks like to the dispatcher. The main thread and
 * the store thread then have this machine's cores to themselves, as they would beside the
 * worker threads' cores on a large machine.
 *
 * For each job length (1, 5 and 20 ms) on a fresh server (durable SQLite, KILN_THREADS =
 * `--pool`, default 64): warm-up, then dispatch paused, `count` jobs submitted, dispatch
 * resumed, and the run timed from the resume until the queue is idle. Over exactly that
 * span, from Linux's per-thread accounting (/proc/<pid>/task/*\/schedstat):
 *   - the main thread's µs on a core per job, and the jobs it hands out per second of its
 *     CPU (1e6 ÷ that): the ceiling;
 *   - the other threads but the workers (the store thread, V8's helpers) per job;
 *   - jobs/s against ideal (threads × 1000 ÷ ms), and the cores the run kept busy
 *     (jobs/s × ms ÷ 1000);
 *   - the worker threads' own µs on a core per job (taking the message, waking, answering:
 *     `block` itself uses none), and how busy the machine was: every thread's time on a
 *     core ÷ (the span × this machine's cores);
 *   - how busy the main thread was: its time on a core ÷ the span. Near 100 % the main
 *     thread is the wall, and jobs/s is the ceiling reached, not only figured. Here the
 *     64 worker threads' own overhead shares the 2 cores with the main thread and the
 *     store thread, so the machine fills first; on a machine of many cores it would not.
 *
 * Then, with most threads idle: single POSTs of 1 ms `block` jobs, each sent once the last
 * was answered (2,000; 200 tiny), on a fresh server: µs on a core per job by kind of thread
 * and the wakes per 100 jobs of the main thread and of the worker threads. A wake of every
 * waiting thread per job shows here.
 *
 * With --cpu-prof, the server runs under `node --cpu-prof`, and each run prints its main
 * thread's functions with the most self time per job over the timed span.
 *
 *   node bench/dispatch-ceiling.mjs [--size tiny|full] [--runs N] [--pool N] [--ms 1,5,20] [--cpu-prof]
 */
import { availableParallelism } from 'node:os';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { mainThreadProfile, readProfile, selfTimes } from './lib/cpu-profile.mjs';
import { pauseQueue, requestJson, resumeQueue, waitUntilIdle } from './lib/kiln-client.mjs';
import { warmKiln } from './lib/measure.mjs';
import { BENCH_DIR, startKiln } from './lib/processes.mjs';
import { mainThreadSchedstat, perJob, threadTimes } from './lib/thread-cpu.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, summarize, writeResult } from './lib/report.mjs';

const NAME = 'dispatch-ceiling';
const TARGET_PER_MAIN_CPU_SECOND = 30_000;
/** KILN_THREAD_NICE's default: the worker threads are the threads at this nice value. */
const WORKER_NICE = 10;
const TASKS_DIR = join(BENCH_DIR, 'tasks');

/** Submits `count` jobs in batches of 100, 8 requests in flight; answers the last job's id. */
async function submit(url, job, count) {
  let next = 0;
  let lastId = null;
  const worker = async () => {
    while (next < count) {
      const size = Math.min(100, count - next);
      next += size;
      const answer = await requestJson(`${url}/v1/jobs/batch`, {
        method: 'POST',
        body: { jobs: Array.from({ length: size }, () => job) },
      });
      lastId = answer.jobs.at(-1).id;
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  return lastId;
}

async function measure(ms, run, options) {
  const profileDir = options.cpuProf === null ? null : join(options.cpuProf, `${NAME}.${options.pool}.${ms}ms.${run}`);
  if (profileDir !== null) {
    rmSync(profileDir, { recursive: true, force: true });
    mkdirSync(profileDir, { recursive: true });
  }
  const server = await startKiln({
    store: 'sqlite',
    threads: options.pool,
    env: { KILN_TASKS_DIR: TASKS_DIR },
    cpuProf: profileDir,
  });
  let record;
  let windowUs;
  try {
    const job = { type: 'block', payload: { ms } };
    const warm = await warmKiln(server, job, options.tiny ? 500 : 5000);
    // A warm-up of the job itself, so that its length is learned and its path compiled.
    await waitUntilIdle(server.url, { lastJobId: await submit(server.url, job, options.pool * 4) });
    await pauseQueue(server.url);
    const lastId = await submit(server.url, job, options.count(ms));
    const before = threadTimes(server.pid);
    const mainBefore = mainThreadSchedstat(server.pid);
    const startedAt = process.hrtime.bigint();
    await resumeQueue(server.url);
    const idle = await waitUntilIdle(server.url, { lastJobId: lastId });
    const endedAt = process.hrtime.bigint();
    const spanMs = Number(endedAt - startedAt) / 1e6;
    windowUs = { fromUs: Number(startedAt / 1000n), toUs: Number(endedAt / 1000n) };
    const after = threadTimes(server.pid);
    const mainAfter = mainThreadSchedstat(server.pid);
    const jobs = options.count(ms);
    const expected = warm + options.pool * 4 + jobs;
    if (idle.completed !== expected || idle.failed !== 0) {
      throw new Error(
        `expected ${expected} completed jobs, the queue says ${idle.completed} completed, ${idle.failed} failed`,
      );
    }
    const cost = perJob(server.pid, WORKER_NICE, before, after, jobs);
    const jobsPerSecond = (jobs / spanMs) * 1000;
    const idealPerSecond = (options.pool * 1000) / ms;
    record = {
      run,
      ms,
      jobs,
      spanMs,
      jobsPerSecond,
      idealPerSecond,
      percentOfIdeal: (jobsPerSecond / idealPerSecond) * 100,
      coresBusy: (jobsPerSecond * ms) / 1000,
      mainUs: cost.mainUs,
      restUs: cost.restUs,
      workersUs: cost.workersUs,
      // Every thread of the server on this machine's cores, as a share of all of them.
      machineBusy: ((cost.mainUs + cost.restUs + cost.workersUs) * jobs) / 1000 / spanMs / availableParallelism(),
      mainWakesPer100: cost.mainWakesPer100,
      perMainCpuSecond: 1e6 / cost.mainUs,
      mainBusy: (mainAfter.onCpuNs - mainBefore.onCpuNs) / 1e6 / spanMs,
    };
  } finally {
    // A profile is written when the server exits.
    await server.stop();
  }
  if (profileDir !== null) {
    // The main thread's functions over the timed span only (the profile's clock is process.hrtime's).
    const times = selfTimes(readProfile(mainThreadProfile(profileDir, server.pid).path), windowUs);
    record.topFunctions = times.functions.slice(0, 12).map((f) => ({ ...f, microsPerJob: f.selfUs / record.jobs }));
    record.sampledBusyUs = times.busyUs / record.jobs;
  }
  return record;
}

/**
 * Most threads idle: single POSTs of 1 ms `block` jobs, each sent once the last was
 * answered, so that a job at a time waits and the other threads wait for work. Answers
 * µs on a core per job by kind of thread, and the wakes of the main and worker threads.
 */
async function measureTrickle(run, options) {
  const server = await startKiln({ store: 'sqlite', threads: options.pool, env: { KILN_TASKS_DIR: TASKS_DIR } });
  try {
    const job = { type: 'block', payload: { ms: 1 } };
    const post = () => requestJson(`${server.url}/v1/jobs`, { method: 'POST', body: job });
    for (let i = 0; i < 300; i++) await post();
    await waitUntilIdle(server.url);
    const jobs = options.tiny ? 200 : 2000;
    const before = threadTimes(server.pid);
    let last = null;
    for (let i = 0; i < jobs; i++) last = await post();
    await waitUntilIdle(server.url, { lastJobId: last.id });
    return { run, jobs, ...perJob(server.pid, WORKER_NICE, before, threadTimes(server.pid), jobs) };
  } finally {
    await server.stop();
  }
}

await runBenchmark(NAME, async () => {
  const options = benchOptions(
    { full: 3, tiny: 1 },
    { own: { pool: { type: 'string' }, ms: { type: 'string', default: '1,5,20' } } },
  );
  const pool = Number(options.own.pool ?? (options.tiny ? 8 : 64));
  if (!Number.isInteger(pool) || pool < 1 || pool > 256)
    throw new Error(`--pool must be 1 to 256, got ${options.own.pool}`);
  const lengths = options.own.ms.split(',').map(Number);
  if (lengths.some((ms) => !Number.isInteger(ms) || ms < 1))
    throw new Error(`--ms must be whole ms, got ${options.own.ms}`);
  // About 3 s of ideal work for each length (0.3 s at the tiny size), at most 30,000 jobs.
  const count = (ms) =>
    Math.min(30_000, Math.max(200, Math.round(((options.tiny ? 0.3 : 3) * pool * 1000) / ms / 100) * 100));
  const run = { ...options, pool, count };
  const parameters = {
    pool,
    threads: pool,
    lengths,
    jobs: Object.fromEntries(lengths.map((ms) => [`${ms} ms`, count(ms)])),
    job: 'block (holds its thread for ms without a core)',
    store: 'sqlite (KILN_SQLITE_SYNC=full)',
    submission: 'dispatch paused, POST /v1/jobs/batch of 100, 8 in flight; then resumed and timed to idle',
    runs: options.runs,
  };
  console.log(`${NAME}: ${pool} threads, block jobs of ${lengths.join(', ')} ms, ${options.runs} run(s)`);

  const runs = [];
  for (let r = 1; r <= options.runs; r++) {
    const order = r % 2 === 1 ? lengths : [...lengths].reverse();
    for (const ms of order) {
      const record = await measure(ms, r, run);
      runs.push(record);
      for (const f of record.topFunctions ?? []) {
        console.log(`      ${f.microsPerJob.toFixed(1).padStart(6)} µs/job  ${f.name}  ${f.location}`);
      }
      console.log(
        `  run ${r}, ${ms} ms: ${record.jobsPerSecond.toFixed(0)} jobs/s (${record.percentOfIdeal.toFixed(1)} % of ideal, ${record.coresBusy.toFixed(1)} cores busy); ` +
          `main thread ${record.mainUs.toFixed(1)} µs/job on a core (${(record.mainBusy * 100).toFixed(0)} % busy, ${record.perMainCpuSecond.toFixed(0)} jobs per CPU second), rest ${record.restUs.toFixed(1)}, workers ${record.workersUs.toFixed(1)} µs/job; the machine ${(record.machineBusy * 100).toFixed(0)} % busy`,
      );
    }
  }

  const trickleRuns = [];
  for (let r = 1; r <= options.runs; r++) {
    const record = await measureTrickle(r, run);
    trickleRuns.push(record);
    console.log(
      `  run ${r}, one 1 ms job at a time: main thread ${record.mainUs.toFixed(1)}, rest ${record.restUs.toFixed(1)}, workers ${record.workersUs.toFixed(1)} µs/job; ` +
        `wakes per 100 jobs: main ${record.mainWakesPer100.toFixed(0)}, workers ${record.workerWakesPer100.toFixed(0)}`,
    );
  }

  const figures = lengths.map((ms) => {
    const of = (pick) => summarize(runs.filter((r) => r.ms === ms).map(pick));
    return {
      ms,
      jobs: count(ms),
      idealPerSecond: (pool * 1000) / ms,
      jobsPerSecond: of((r) => r.jobsPerSecond),
      percentOfIdeal: of((r) => r.percentOfIdeal),
      coresBusy: of((r) => r.coresBusy),
      mainUs: of((r) => r.mainUs),
      mainBusy: of((r) => r.mainBusy * 100),
      perMainCpuSecond: of((r) => r.perMainCpuSecond),
      restUs: of((r) => r.restUs),
      workersUs: of((r) => r.workersUs),
      machineBusy: of((r) => r.machineBusy * 100),
      mainWakesPer100: of((r) => r.mainWakesPer100),
    };
  });
  printTable(
    `Dispatch ceiling (${pool} threads of block jobs; median (min–max) of ${options.runs} run(s))`,
    [
      'job',
      'jobs',
      'ideal/s',
      'jobs/s',
      '% ideal',
      'cores busy',
      'main µs/job',
      'main busy',
      'jobs per main CPU s',
      'rest µs/job',
      'workers µs/job',
      'machine busy',
      'main wakes/100',
    ],
    figures.map((f) => [
      `${f.ms} ms`,
      f.jobs.toLocaleString('en-US'),
      f.idealPerSecond.toLocaleString('en-US'),
      formatSummary(f.jobsPerSecond),
      formatSummary(f.percentOfIdeal, 1, ' %'),
      formatSummary(f.coresBusy, 1),
      formatSummary(f.mainUs, 1),
      formatSummary(f.mainBusy, 0, ' %'),
      formatSummary(f.perMainCpuSecond),
      formatSummary(f.restUs, 1),
      formatSummary(f.workersUs, 1),
      formatSummary(f.machineBusy, 0, ' %'),
      formatSummary(f.mainWakesPer100, 0),
    ]),
  );
  const ofTrickle = (pick) => summarize(trickleRuns.map(pick));
  const trickle = {
    jobs: trickleRuns[0].jobs,
    mainUs: ofTrickle((r) => r.mainUs),
    restUs: ofTrickle((r) => r.restUs),
    workersUs: ofTrickle((r) => r.workersUs),
    mainWakesPer100: ofTrickle((r) => r.mainWakesPer100),
    workerWakesPer100: ofTrickle((r) => r.workerWakesPer100),
  };
  printTable(
    `Most threads idle: ${trickle.jobs} single POSTs of 1 ms block jobs, one at a time (${pool} threads)`,
    ['main µs/job', 'rest µs/job', 'workers µs/job', 'main wakes/100 jobs', 'worker wakes/100 jobs'],
    [
      [
        formatSummary(trickle.mainUs, 1),
        formatSummary(trickle.restUs, 1),
        formatSummary(trickle.workersUs, 1),
        formatSummary(trickle.mainWakesPer100, 0),
        formatSummary(trickle.workerWakesPer100, 0),
      ],
    ],
  );
  // A ceiling is the rate at which the main thread is the wall; of these runs, the shortest
  // jobs come nearest to it (the most jobs per drain, the main thread the busiest), so the
  // target is judged there. Longer jobs need fewer jobs a second for the same threads, and
  // each drain's fixed cost is shared by fewer.
  const shortest = figures.reduce((a, b) => (b.ms < a.ms ? b : a));
  const reached = shortest.perMainCpuSecond.median;
  const target = {
    perMainCpuSecond: TARGET_PER_MAIN_CPU_SECOND,
    judgedAtMs: shortest.ms,
    met: reached >= TARGET_PER_MAIN_CPU_SECOND,
  };
  console.log(
    `target: >= ${TARGET_PER_MAIN_CPU_SECOND.toLocaleString('en-US')} single jobs per second of main-thread CPU (${shortest.ms} ms jobs): ${target.met ? 'met' : 'MISSED'} (${reached.toFixed(0)})`,
  );
  const path = writeResult(NAME, {
    size: options.size,
    variant: null,
    parameters,
    target,
    figures,
    trickle,
    runs,
    trickleRuns,
  });
  console.log(`wrote ${path}`);
});
