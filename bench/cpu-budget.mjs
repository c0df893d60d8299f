/**
 * The CPU budget per job, kept by CI: CPU time, not wall time, that a Kiln server spends
 * per job on fixed workloads, compared with the budgets in bench/cpu-budget.json.
 *
 * Each run starts a fresh server (2 worker threads), warms it, then reads every thread's
 * own accounting from Linux (/proc/<pid>/task/<tid>/schedstat: ns on a core) before and
 * after the workload and divides by the jobs:
 *   - main:    the main thread (HTTP, scheduling, events, metrics);
 *   - workers: the worker threads (told by their nice value, KILN_THREAD_NICE, 10);
 *   - rest:    every other thread: the SQLite store thread, V8's GC and compiler helpers,
 *              libuv's pool;
 *   - wake-ups: how often the main thread and the worker threads went to sleep (voluntary
 *              context switches), per 100 jobs;
 *   - outside: the cost of a job outside its handler: main + rest + workers for noop jobs
 *              (whose handler does nothing, so the workers' time is the pool's own
 *              messaging); main + rest for jobs whose handler works (a 5 ms cpu.spin), as
 *              the workers' time is then the handler's.
 * Time a thread waited for a core is not counted, so a loaded machine changes the figures
 * far less than it changes wall-time ones.
 *
 *   node bench/cpu-budget.mjs [--check] [--update] [--runs N] [--only a,b]
 *
 * --check exits 1 when a workload's median over the runs is above its budget by more than
 * the file's margin (see bench/README.md for how the margin was chosen); --update writes
 * the medians of this run as the new budgets (a change that must cost more raises its
 * budget in the same commit, and says why). The PostgreSQL workloads need the server at
 * BENCH_PG_URL (else the local one); under CI=true a missing server fails the check.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { requestJson, waitUntilIdle } from './lib/kiln-client.mjs';
import { measureKilnRun } from './lib/measure.mjs';
import { dropSchema, freshSchemaName, KILN_SCHEMA_PREFIX, PG_URL, requirePostgres } from './lib/postgres.mjs';
import { BENCH_DIR, startKiln } from './lib/processes.mjs';
import { formatSummary, printTable, summarize, writeResult } from './lib/report.mjs';

const NAME = 'cpu-budget';
const BUDGET_FILE = join(BENCH_DIR, 'cpu-budget.json');
const THREADS = 2;
const WORKER_NICE = 10;

const WORKLOADS = [
  { name: 'sqlite.noop.batch', store: 'sqlite', job: { type: 'noop' }, total: 20_000, mode: 'batch' },
  {
    name: 'sqlite.noop.single',
    store: 'sqlite',
    job: { type: 'noop' },
    total: 4_000,
    mode: 'single',
    connections: 16,
  },
  {
    name: 'sqlite.spin5.batch',
    store: 'sqlite',
    job: { type: 'cpu.spin', payload: { ms: 5 } },
    total: 600,
    mode: 'batch',
    handlerWorks: true,
  },
  { name: 'postgres.noop.batch', store: 'postgres', job: { type: 'noop' }, total: 10_000, mode: 'batch' },
  {
    name: 'postgres.noop.single',
    store: 'postgres',
    job: { type: 'noop' },
    total: 3_000,
    mode: 'single',
    connections: 16,
  },
];

/** Every thread of process `pid`: its ns on a core, its nice value and how often it went to sleep. */
function threadTimes(pid) {
  const threads = new Map();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const onCpuNs = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      // Field 19 of stat is the nice value; the name in field 2 may hold spaces, so count from its ')'.
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const nice = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
      // A voluntary context switch is the thread going to sleep: one per wake-up.
      const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      const sleeps = Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0);
      threads.set(Number(tid), { onCpuNs, nice, sleeps });
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return threads;
}

/** CPU µs per job by kind of thread between two readings (threads that ended meanwhile are lost to both). */
function perJob(pid, before, after, jobs) {
  const sums = { main: 0, workers: 0, rest: 0 };
  const wakes = { main: 0, workers: 0 };
  for (const [tid, now] of after) {
    const was = before.get(tid);
    const kind = tid === pid ? 'main' : now.nice >= WORKER_NICE ? 'workers' : 'rest';
    sums[kind] += now.onCpuNs - (was?.onCpuNs ?? 0);
    if (kind !== 'rest') wakes[kind] += now.sleeps - (was?.sleeps ?? 0);
  }
  const us = (ns) => ns / 1000 / jobs;
  return {
    mainUs: us(sums.main),
    workersUs: us(sums.workers),
    restUs: us(sums.rest),
    mainWakesPer100: (wakes.main * 100) / jobs,
    workerWakesPer100: (wakes.workers * 100) / jobs,
  };
}

async function measureOnce(workload) {
  let schema = null;
  if (workload.store === 'postgres') schema = freshSchemaName(KILN_SCHEMA_PREFIX);
  const server = await startKiln({
    store: workload.store,
    threads: THREADS,
    env: { KILN_THREAD_NICE: String(WORKER_NICE) },
    ...(schema === null ? {} : { pg: { url: PG_URL, schema } }),
  });
  try {
    const warmJobs = Array.from({ length: 200 }, () => workload.job);
    const warm = await requestJson(`${server.url}/v1/jobs/batch`, { method: 'POST', body: { jobs: warmJobs } });
    await waitUntilIdle(server.url, { lastJobId: warm.jobs.at(-1).id, timeoutMs: 60_000 });
    const before = threadTimes(server.pid);
    const run = await measureKilnRun(
      server,
      {
        total: workload.total,
        job: workload.job,
        mode: workload.mode,
        batchSize: 100,
        concurrency: 8,
        ...(workload.connections === undefined ? {} : { connections: workload.connections }),
      },
      { completedBefore: warmJobs.length },
    );
    const after = threadTimes(server.pid);
    const figures = perJob(server.pid, before, after, workload.total);
    const outsideUs = figures.mainUs + figures.restUs + (workload.handlerWorks === true ? 0 : figures.workersUs);
    return { ...figures, outsideUs, jobsPerSecond: run.jobsPerSecond };
  } finally {
    await server.stop();
    if (schema !== null) await dropSchema(schema);
  }
}

const { values } = parseArgs({
  options: {
    check: { type: 'boolean', default: false },
    update: { type: 'boolean', default: false },
    runs: { type: 'string', default: '3' },
    only: { type: 'string' },
  },
  strict: true,
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${values.runs}`);
if (process.platform !== 'linux') {
  console.log(`${NAME}: needs Linux's per-thread accounting (/proc/<pid>/task); nothing measured`);
  process.exit(values.check && process.env.CI === 'true' ? 1 : 0);
}
const only = values.only?.split(',') ?? null;
let workloads = WORKLOADS.filter((w) => only === null || only.includes(w.name));
if (workloads.some((w) => w.store === 'postgres')) {
  const missing = await requirePostgres().then(
    () => null,
    (error) => error,
  );
  if (missing !== null) {
    if (process.env.CI === 'true') throw missing;
    console.log(`${NAME}: PostgreSQL is not reachable (${missing.message}); its workloads are left out`);
    workloads = workloads.filter((w) => w.store !== 'postgres');
  }
}

const budget = JSON.parse(readFileSync(BUDGET_FILE, 'utf8'));
console.log(`${NAME}: ${workloads.length} workloads, ${runs} run(s) each, ${THREADS} worker threads`);
const samples = new Map(workloads.map((w) => [w.name, []]));
for (let run = 1; run <= runs; run++) {
  for (const workload of workloads) {
    const figures = await measureOnce(workload);
    samples.get(workload.name).push(figures);
    console.log(
      `  run ${run}, ${workload.name}: main ${figures.mainUs.toFixed(1)} µs/job, rest ${figures.restUs.toFixed(1)}, workers ${figures.workersUs.toFixed(1)}, outside the handler ${figures.outsideUs.toFixed(1)} (${figures.jobsPerSecond.toFixed(0)} jobs/s); wake-ups per 100 jobs: main ${figures.mainWakesPer100.toFixed(1)}, workers ${figures.workerWakesPer100.toFixed(1)}`,
    );
  }
}

const KEYS = ['mainUs', 'restUs', 'outsideUs'];
const over = [];
const figures = workloads.map((workload) => {
  const mine = samples.get(workload.name);
  const median = Object.fromEntries(
    [...KEYS, 'workersUs', 'jobsPerSecond', 'mainWakesPer100', 'workerWakesPer100'].map((key) => [
      key,
      summarize(mine.map((f) => f[key])),
    ]),
  );
  const limits = budget.workloads[workload.name] ?? null;
  for (const key of KEYS) {
    const limit = limits?.[key];
    if (limit === undefined) continue;
    if (median[key].median > limit * (1 + budget.margin)) {
      over.push(`${workload.name} ${key}: ${median[key].median.toFixed(1)} µs/job > ${limit} × ${1 + budget.margin}`);
    }
  }
  return { workload: workload.name, median, budget: limits };
});

printTable(
  `CPU per job (µs on a core; median (min–max) of ${runs}; budget × ${1 + budget.margin} allowed)`,
  ['workload', 'main', 'rest', 'outside the handler', 'budget main / rest / outside', 'jobs/s'],
  figures.map((f) => [
    f.workload,
    formatSummary(f.median.mainUs, 1),
    formatSummary(f.median.restUs, 1),
    formatSummary(f.median.outsideUs, 1),
    f.budget === null ? 'none' : `${f.budget.mainUs} / ${f.budget.restUs} / ${f.budget.outsideUs}`,
    f.median.jobsPerSecond.median.toFixed(0),
  ]),
);
writeResult(NAME, { name: NAME, runs, threads: THREADS, figures });

if (values.update) {
  for (const f of figures) {
    budget.workloads[f.workload] = Object.fromEntries(KEYS.map((key) => [key, Math.ceil(f.median[key].median)]));
  }
  writeFileSync(BUDGET_FILE, `${JSON.stringify(budget, null, 2)}\n`);
  console.log(`${NAME}: budgets written to ${BUDGET_FILE}`);
}
if (values.check && over.length > 0) {
  console.error(`${NAME}: over budget:\n  ${over.join('\n  ')}`);
  process.exit(1);
}
