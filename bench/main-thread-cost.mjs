/**
 * Main-thread CPU per job: the Kiln server runs under `node --cpu-prof` (a fresh server,
 * durable SQLite, for each workload and run) while a load generator submits
 *   - noop:     50,000 noop jobs, POST /v1/jobs/batch of 100, 8 requests in flight;
 *   - cpu.spin: 2,000 cpu.spin jobs of 5 ms, the same way;
 * and waits until all have finished. From the main thread's profile only (thread id 0 in
 * the profile's file name; the worker threads write files of their own), the sampled time
 * the thread was not idle between the first request and the last completion (the load
 * generator's clock, which is the profile's: monotonic µs), divided by the jobs completed:
 * µs of main-thread CPU per job, and the functions that take it. Warm-up, start-up and
 * shutdown fall outside that window.
 *
 * "Not idle" is every sample but `(idle)`: JavaScript, native code, GC, and time the
 * thread was runnable but had no core (a sampling profiler cannot tell those apart), so on
 * a busy machine it is an upper bound of CPU time. Samples are taken every 1 ms (Node's
 * default interval), with some overhead of their own. Where Linux's schedstat is readable,
 * the main thread's own accounting over the same run is shown next to it: time on a core,
 * and time it was runnable but waited for one (this span also holds two /metrics scrapes).
 *
 *   node bench/main-thread-cost.mjs [--size tiny|full] [--runs N] [--threads N] [--top N]
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { mainThreadProfile, readProfile, selfTimes } from './lib/cpu-profile.mjs';
import { measureKilnRun, warmKiln } from './lib/measure.mjs';
import { startKiln } from './lib/processes.mjs';
import { mainThreadSchedstat } from './lib/thread-cpu.mjs';
import {
  benchOptions,
  formatSummary,
  printTable,
  RESULTS_DIR,
  runBenchmark,
  summarize,
  writeResult,
} from './lib/report.mjs';

const NAME = 'main-thread-cost';

async function measure(workload, run, options) {
  const dir = join(
    RESULTS_DIR,
    'profiles',
    `${NAME}${options.variant === null ? '' : `.${options.variant}`}.${workload.name}.${run}`,
  );
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const server = await startKiln({ store: 'sqlite', threads: options.threads, cpuProf: dir });
  let result;
  let schedstat = null;
  try {
    const warm = await warmKiln(server, workload.job, workload.warm);
    const before = mainThreadSchedstat(server.pid);
    result = await measureKilnRun(
      server,
      { total: workload.total, job: workload.job, mode: 'batch', batchSize: 100, concurrency: 8 },
      { completedBefore: warm },
    );
    const after = mainThreadSchedstat(server.pid);
    if (before !== null && after !== null) {
      schedstat = {
        onCpuMicrosPerJob: (after.onCpuNs - before.onCpuNs) / 1000 / workload.total,
        waitingMicrosPerJob: (after.waitingNs - before.waitingNs) / 1000 / workload.total,
        runsPerJob: (after.runs - before.runs) / workload.total,
      };
    }
  } finally {
    // The profile is written when the server exits.
    await server.stop();
  }
  const profile = mainThreadProfile(dir, server.pid);
  const [fromUs, toUs] = result.monotonicWindowUs;
  const times = selfTimes(readProfile(profile.path), { fromUs, toUs });
  if (times.toUs - times.fromUs < (toUs - fromUs) * 0.99) {
    throw new Error(`the main-thread profile ${profile.path} does not cover the measured run`);
  }
  return {
    run,
    workload: workload.name,
    jobs: workload.total,
    jobsPerSecond: result.jobsPerSecond,
    windowMs: (toUs - fromUs) / 1000,
    sampledMs: times.totalUs / 1000,
    busyMs: times.busyUs / 1000,
    busyShare: times.busyUs / times.totalUs,
    microsPerJob: times.busyUs / workload.total,
    schedstat,
    profile: profile.path,
    workerProfiles: profile.workerProfiles,
    functions: times.functions.slice(0, 40).map((f) => ({ ...f, microsPerJob: f.selfUs / workload.total })),
  };
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 }, { threads: true, own: { top: { type: 'string', default: '8' } } });
  const top = Number(options.own.top);
  if (!Number.isInteger(top) || top < 1) throw new Error(`--top must be a positive integer, got ${options.own.top}`);
  const { threads } = options;
  const workloads = [
    {
      name: 'noop',
      label: 'noop jobs, batches of 100',
      job: { type: 'noop' },
      total: options.tiny ? 2000 : 50_000,
      warm: threads * 4,
    },
    {
      name: 'cpu.spin',
      label: '× 5 ms cpu.spin, batches of 100',
      job: { type: 'cpu.spin', payload: { ms: 5 } },
      total: options.tiny ? 100 : 2000,
      warm: threads * 2,
    },
  ];
  const parameters = {
    workloads: workloads.map(({ name, job, total }) => ({ name, job, total })),
    threads,
    store: 'sqlite (KILN_SQLITE_SYNC=full)',
    submission: 'POST /v1/jobs/batch, 100 jobs per request, 8 requests in flight',
    profile: 'node --cpu-prof (1 ms sampling interval), main thread only',
    runs: options.runs,
  };
  console.log(
    `${NAME}: ${workloads.map((w) => `${w.total} ${w.name}`).join(' and ')} jobs, ${threads} threads, ${options.runs} run(s)`,
  );

  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    // Which workload goes first alternates from run to run.
    const order = run % 2 === 1 ? workloads : [...workloads].reverse();
    for (const workload of order) {
      const record = await measure(workload, run, options);
      runs.push(record);
      console.log(
        `  run ${run}, ${workload.name}: ${record.microsPerJob.toFixed(1)} µs/job sampled busy (${(record.busyShare * 100).toFixed(0)} % of ${record.windowMs.toFixed(0)} ms, ${record.jobsPerSecond.toFixed(0)} jobs/s; ${record.workerProfiles} worker-thread profiles set aside)${record.schedstat === null ? '' : `; schedstat: on a core ${record.schedstat.onCpuMicrosPerJob.toFixed(1)} µs/job, waiting for one ${record.schedstat.waitingMicrosPerJob.toFixed(1)} µs/job`}`,
      );
    }
  }

  const figures = workloads.map((workload) => {
    const mine = runs.filter((r) => r.workload === workload.name);
    const jobs = mine.reduce((sum, r) => sum + r.jobs, 0);
    // Each function over every run: its self time summed, per job of all runs.
    const byKey = new Map();
    for (const f of mine.flatMap((r) => r.functions)) {
      const key = `${f.name}\t${f.location}`;
      const entry = byKey.get(key) ?? { name: f.name, location: f.location, selfUs: 0 };
      entry.selfUs += f.selfUs;
      byKey.set(key, entry);
    }
    const busyUs = mine.reduce((sum, r) => sum + r.busyMs * 1000, 0);
    const topFunctions = [...byKey.values()]
      .sort((a, b) => b.selfUs - a.selfUs)
      .slice(0, top)
      .map((f) => ({ ...f, microsPerJob: f.selfUs / jobs, shareOfBusy: f.selfUs / busyUs }));
    return {
      workload: workload.name,
      label: workload.label,
      jobs: workload.total,
      microsPerJob: summarize(mine.map((r) => r.microsPerJob)),
      busyShare: summarize(mine.map((r) => r.busyShare * 100)),
      onCpuMicrosPerJob: summarize(mine.map((r) => r.schedstat?.onCpuMicrosPerJob ?? null)),
      waitingMicrosPerJob: summarize(mine.map((r) => r.schedstat?.waitingMicrosPerJob ?? null)),
      runsPerJob: summarize(mine.map((r) => r.schedstat?.runsPerJob ?? null)),
      jobsPerSecond: summarize(mine.map((r) => r.jobsPerSecond)),
      // The dispatch ceiling of one process: jobs handed out per second of main-thread CPU.
      jobsPerMainCpuSecond: summarize(
        mine.map((r) => (r.schedstat === null ? null : 1e6 / r.schedstat.onCpuMicrosPerJob)),
      ),
      topFunctions,
    };
  });

  printTable(
    `Main-thread CPU per job (${threads} threads; median (min–max) of ${options.runs} run(s))`,
    [
      'workload',
      'jobs',
      'µs/job (sampled busy)',
      'main thread busy',
      'on a core µs/job',
      'waiting µs/job',
      'times on a core per job',
      'jobs/s',
      'jobs per main-thread CPU second',
    ],
    figures.map((f) => [
      f.label,
      f.jobs.toLocaleString('en-US'),
      formatSummary(f.microsPerJob, 1),
      formatSummary(f.busyShare, 0, ' %'),
      formatSummary(f.onCpuMicrosPerJob, 1),
      formatSummary(f.waitingMicrosPerJob, 1),
      formatSummary(f.runsPerJob, 2),
      formatSummary(f.jobsPerSecond),
      formatSummary(f.jobsPerMainCpuSecond),
    ]),
  );
  for (const f of figures) {
    printTable(
      `Top functions, ${f.label} (self time of every run, per job)`,
      ['µs/job', '% busy', 'function', 'file:line'],
      f.topFunctions.map((fn) => [fn.microsPerJob.toFixed(1), (fn.shareOfBusy * 100).toFixed(1), fn.name, fn.location]),
    );
  }
  const path = writeResult(NAME, { size: options.size, variant: options.variant, parameters, figures, runs });
  console.log(`wrote ${path}`);
});
