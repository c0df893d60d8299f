/**
 * The CPU budget per job, kept by CI: CPU time, not wall time, that a Kiln server spends
 * per job on fixed workloads, compared with the budgets in bench/cpu-budget.json.
 *
 * The workloads are fixed in what the server sees at a time, not only in size, since how
 * many jobs share an event-loop turn and a commit decides what each costs: batches of 100
 * with 8 in flight; single POSTs in waves of 16 pipelined on one connection, with
 * dispatch paused while they are submitted (each wave is one turn and one commit,
 * whatever the machine's load), then run; 5 ms jobs in batches.
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
 * Time a thread waited for a core is not counted; but code runs slower on a core that
 * other work shares caches with, so a heavily loaded machine still reads higher (see
 * bench/README.md). The jobs per commit are shown beside the figures: a workload whose
 * jobs per commit move has changed what it measures, so a run is compared with its budget
 * only when they are in the range the budget was measured at (`jobsPerCommit` in the
 * budget file, the range seen at --update ± 20 %) and, for the waves, when the waves were
 * committed as the workload says (16 jobs per commit on SQLite, 1 on PostgreSQL, ± 20 %).
 * A run outside is not comparable: it is measured once more, and a second one makes the
 * workload invalid, which is not judged against its budget.
 *
 *   node bench/cpu-budget.mjs [--check] [--update [--allow-dirty]] [--runs N] [--only a,b]
 *
 * --check exits 1 when a workload's median over the runs is above its budget by more than
 * the file's margin (see bench/README.md for how the margin was chosen), else 3 when a
 * workload was invalid; --update writes the medians of this run as the new budgets (a
 * change that must cost more raises its budget in the same commit, and says why), and
 * refuses to when src/ or bench/ has uncommitted changes unless --allow-dirty. An unknown
 * name in --only exits 2. The PostgreSQL workloads need the server at BENCH_PG_URL (else
 * the local one); under CI=true a missing server fails the check.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pauseQueue, requestJson, resumeQueue, scrapeMetrics, waitUntilIdle } from './lib/kiln-client.mjs';
import { measureKilnRun } from './lib/measure.mjs';
import { dropSchema, freshSchemaName, KILN_SCHEMA_PREFIX, PG_URL, requirePostgres } from './lib/postgres.mjs';
import { BENCH_DIR, ROOT_DIR, runNodeJson, startKiln } from './lib/processes.mjs';
import { formatSummary, machine, printTable, summarize, writeResult } from './lib/report.mjs';

const NAME = 'cpu-budget';
const COMMITS = 'kiln_store_commit_seconds_count';
const BUDGET_FILE = join(BENCH_DIR, 'cpu-budget.json');
const THREADS = 2;
const WORKER_NICE = 10;

const WAVE = 16;
/** How far a run's jobs per commit may be from what the budget was measured at (see the top). */
const COMMIT_TOLERANCE = 0.2;
/**
 * `waveJobsPerCommit`: the jobs per commit while the waves are submitted (dispatch paused),
 * fixed by the workload: a wave per commit on SQLite, each insert by itself on PostgreSQL.
 * `judged`: the figures compared with the budget (all three unless said): the 5 ms jobs'
 * main thread follows their jobs per commit (outcomes wait up to 10 ms to share a commit,
 * which depends on the load), so that workload is judged outside the handler only.
 */
const WORKLOADS = [
  { name: 'sqlite.noop.batch', store: 'sqlite', job: { type: 'noop' }, total: 20_000, mode: 'batch' },
  {
    name: 'sqlite.noop.single',
    store: 'sqlite',
    job: { type: 'noop' },
    total: 2_000,
    mode: 'waves',
    waveJobsPerCommit: WAVE,
  },
  {
    name: 'sqlite.spin5.batch',
    store: 'sqlite',
    job: { type: 'cpu.spin', payload: { ms: 5 } },
    total: 1_200,
    mode: 'batch',
    handlerWorks: true,
    judged: ['outsideUs'],
  },
  { name: 'postgres.noop.batch', store: 'postgres', job: { type: 'noop' }, total: 10_000, mode: 'batch' },
  {
    name: 'postgres.noop.single',
    store: 'postgres',
    job: { type: 'noop' },
    total: 1_000,
    mode: 'waves',
    waveJobsPerCommit: 1,
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

/**
 * CPU µs per job by kind of thread between two readings (threads that ended meanwhile are
 * lost to both), less the time between the readings of each pair in `excluded`.
 */
function perJob(pid, before, after, jobs, excluded = []) {
  const sums = { main: 0, workers: 0, rest: 0 };
  const wakes = { main: 0, workers: 0 };
  const add = (from, to, sign) => {
    for (const [tid, now] of to) {
      const was = from.get(tid);
      const kind = tid === pid ? 'main' : now.nice >= WORKER_NICE ? 'workers' : 'rest';
      sums[kind] += sign * (now.onCpuNs - (was?.onCpuNs ?? 0));
      if (kind !== 'rest') wakes[kind] += sign * (now.sleeps - (was?.sleeps ?? 0));
    }
  };
  add(before, after, 1);
  for (const [from, to] of excluded) add(from, to, -1);
  const us = (ns) => ns / 1000 / jobs;
  return {
    mainUs: us(sums.main),
    workersUs: us(sums.workers),
    restUs: us(sums.rest),
    mainWakesPer100: (wakes.main * 100) / jobs,
    workerWakesPer100: (wakes.workers * 100) / jobs,
  };
}

/**
 * Single POSTs in waves (see load/submit-jobs.mjs) with dispatch paused, then dispatch
 * resumed until every job has finished. Paused, each wave is one store message and one
 * commit; running, jobs would finish between the waves, and how many outcomes share a
 * commit with a wave would depend on how the machine's load times the two. The commits of
 * the waves are read from /metrics while dispatch is still paused; that scrape's own CPU
 * is left out of the measure (`excluded`).
 */
async function submitWavesThenRun(server, workload, completedBefore, commitsBefore) {
  await pauseQueue(server.url);
  const started = Date.now();
  const load = await runNodeJson(
    join(BENCH_DIR, 'load', 'submit-jobs.mjs'),
    { url: server.url, total: workload.total, job: workload.job, mode: 'waves', wave: WAVE, wait: false },
    { timeoutMs: 600_000 },
  );
  if (load.submitted !== workload.total) throw new Error(`submitted ${load.submitted} of ${workload.total} jobs`);
  const scrapeBefore = threadTimes(server.pid);
  const waveCommits = (await scrapeMetrics(server.url)).get(COMMITS) - commitsBefore;
  const scrapeAfter = threadTimes(server.pid);
  await resumeQueue(server.url);
  const done = await waitUntilIdle(server.url, { lastJobId: load.lastJobId, timeoutMs: 600_000 });
  if (done.completed !== completedBefore + workload.total || done.failed !== 0) {
    throw new Error(
      `expected ${completedBefore + workload.total} completed jobs, the queue says ${done.completed} completed, ${done.failed} failed`,
    );
  }
  return {
    jobsPerSecond: (workload.total / (done.done - started)) * 1000,
    waveJobsPerCommit: workload.total / waveCommits,
    excluded: [[scrapeBefore, scrapeAfter]],
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
    let warmed = warmJobs.length;
    if (workload.mode === 'waves') {
      // The single-job route too, so that its first compilation falls outside the measure.
      const singles = { url: server.url, total: 10 * WAVE, job: workload.job, mode: 'waves', wave: WAVE };
      await runNodeJson(join(BENCH_DIR, 'load', 'submit-jobs.mjs'), singles, { timeoutMs: 60_000 });
      warmed += singles.total;
    }
    const commitsBefore = (await scrapeMetrics(server.url)).get(COMMITS);
    const before = threadTimes(server.pid);
    const run =
      workload.mode === 'waves'
        ? await submitWavesThenRun(server, workload, warmed, commitsBefore)
        : await measureKilnRun(
            server,
            { total: workload.total, job: workload.job, mode: workload.mode, batchSize: 100, concurrency: 8 },
            { completedBefore: warmed },
          );
    const after = threadTimes(server.pid);
    const commits = (await scrapeMetrics(server.url)).get(COMMITS) - commitsBefore;
    const figures = perJob(server.pid, before, after, workload.total, run.excluded);
    const outsideUs = figures.mainUs + figures.restUs + (workload.handlerWorks === true ? 0 : figures.workersUs);
    return {
      ...figures,
      outsideUs,
      jobsPerSecond: run.jobsPerSecond,
      jobsPerCommit: workload.total / commits,
      ...(run.waveJobsPerCommit === undefined ? {} : { waveJobsPerCommit: run.waveJobsPerCommit }),
    };
  } finally {
    await server.stop();
    if (schema !== null) await dropSchema(schema);
  }
}

/**
 * The checkout measured: HEAD, the last commits that changed src/ and bench/, and whether
 * either has uncommitted changes (bench/cpu-budget.json itself aside, which --update writes).
 */
function checkout() {
  const git = (...args) => spawnSync('git', args, { cwd: ROOT_DIR, encoding: 'utf8' });
  const last = (dir) => {
    const log = git('log', '-1', '--format=%h', '--', dir);
    return log.status === 0 && log.stdout.trim() !== '' ? log.stdout.trim() : 'unknown';
  };
  const dirty = (...paths) => {
    const status = git('status', '--porcelain', '--', ...paths);
    return status.status === 0 ? status.stdout.trim() !== '' : null;
  };
  const head = git('rev-parse', '--short', 'HEAD');
  return {
    commit: head.status === 0 ? head.stdout.trim() : 'unknown',
    srcCommit: last('src'),
    srcDirty: dirty('src'),
    benchCommit: last('bench'),
    benchDirty: dirty('bench', ':(exclude)bench/cpu-budget.json'),
  };
}

const { values } = parseArgs({
  options: {
    check: { type: 'boolean', default: false },
    update: { type: 'boolean', default: false },
    'allow-dirty': { type: 'boolean', default: false },
    runs: { type: 'string', default: '5' },
    only: { type: 'string' },
  },
  strict: true,
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${values.runs}`);
const only = values.only?.split(',') ?? null;
const unknown = only?.filter((name) => !WORKLOADS.some((w) => w.name === name)) ?? [];
if (unknown.length > 0) {
  console.error(
    `${NAME}: unknown workload ${unknown.join(', ') || '(none named)'} in --only; the workloads are: ${WORKLOADS.map((w) => w.name).join(', ')}`,
  );
  process.exit(2);
}
const version = checkout();
if (values.update && !values['allow-dirty'] && (version.srcDirty !== false || version.benchDirty !== false)) {
  console.error(
    `${NAME}: src/ or bench/ has uncommitted changes (or git could not tell), so the budgets would not belong to a commit; commit them first, or pass --allow-dirty (recorded in the file)`,
  );
  process.exit(2);
}
if (process.platform !== 'linux') {
  console.log(`${NAME}: needs Linux's per-thread accounting (/proc/<pid>/task); nothing measured`);
  process.exit(values.check && process.env.CI === 'true' ? 1 : 0);
}
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

// Before this script's own servers add to it.
const loadBefore = Math.round(loadavg()[0] * 100) / 100;
const budget = JSON.parse(readFileSync(BUDGET_FILE, 'utf8'));
console.log(
  `${NAME}: ${workloads.length} workloads, ${runs} run(s) each, ${THREADS} worker threads; 1-minute load average ${loadBefore}`,
);

const within = (value, expected) => value >= expected.min && value <= expected.max;
const range = (expected) => `${expected.min}–${expected.max}`;
/**
 * Why a run cannot be compared with its workload's budget, or null when it can: its jobs
 * per commit are outside the budget's range, or its waves were not committed as fixed.
 */
function notComparable(workload, figures) {
  const expected = budget.workloads[workload.name]?.jobsPerCommit;
  if (expected === undefined) return `no jobs-per-commit range in ${BUDGET_FILE} (node bench/cpu-budget.mjs --update)`;
  const reasons = [];
  if (!within(figures.jobsPerCommit, expected)) {
    reasons.push(`${figures.jobsPerCommit.toFixed(1)} jobs per commit, the budget's range is ${range(expected)}`);
  }
  if (workload.waveJobsPerCommit !== undefined) {
    const fixed = {
      min: workload.waveJobsPerCommit * (1 - COMMIT_TOLERANCE),
      max: workload.waveJobsPerCommit * (1 + COMMIT_TOLERANCE),
    };
    if (!within(figures.waveJobsPerCommit, fixed)) {
      reasons.push(
        `${figures.waveJobsPerCommit.toFixed(1)} jobs per commit while the waves were submitted, not ${workload.waveJobsPerCommit} ± ${COMMIT_TOLERANCE * 100} %`,
      );
    }
  }
  return reasons.length === 0 ? null : reasons.join('; ');
}

const print = (run, workload, f) =>
  console.log(
    `  run ${run}, ${workload.name}: main ${f.mainUs.toFixed(1)} µs/job, rest ${f.restUs.toFixed(1)}, workers ${f.workersUs.toFixed(1)}, outside the handler ${f.outsideUs.toFixed(1)} (${f.jobsPerSecond.toFixed(0)} jobs/s, ${f.jobsPerCommit.toFixed(1)} jobs per commit${f.waveJobsPerCommit === undefined ? '' : `, ${f.waveJobsPerCommit.toFixed(1)} while the waves were submitted`}); wake-ups per 100 jobs: main ${f.mainWakesPer100.toFixed(1)}, workers ${f.workerWakesPer100.toFixed(1)}`,
  );

// --update derives the ranges from this run, so only the other modes hold a run to them.
// A workload gets one run again over the whole invocation; a second run out of range
// makes it invalid, and its remaining runs are skipped.
const samples = new Map(workloads.map((w) => [w.name, []]));
const retried = new Set();
const invalid = new Map();
for (let run = 1; run <= runs; run++) {
  for (const workload of workloads) {
    if (invalid.has(workload.name)) continue;
    let figures = await measureOnce(workload);
    print(run, workload, figures);
    let reason = values.update ? null : notComparable(workload, figures);
    // Without a range in the file, a second run could not be comparable either.
    const ranged = budget.workloads[workload.name]?.jobsPerCommit !== undefined;
    if (reason !== null && ranged && !retried.has(workload.name)) {
      retried.add(workload.name);
      console.log(`  run ${run}, ${workload.name}: NOT COMPARABLE with its budget (${reason}); measured again`);
      figures = await measureOnce(workload);
      print(run, workload, figures);
      reason = notComparable(workload, figures);
    }
    if (reason !== null) {
      invalid.set(workload.name, reason);
      console.log(`  run ${run}, ${workload.name}: NOT COMPARABLE with its budget (${reason}); not judged`);
      continue;
    }
    samples.get(workload.name).push(figures);
  }
}

const KEYS = ['mainUs', 'restUs', 'outsideUs'];
const LABELS = { mainUs: 'main', restUs: 'rest', outsideUs: 'outside' };
// A workload may have a margin of its own (`margins`), chosen from its own spread.
const allowedFor = (name) => 1 + (budget.margins?.[name] ?? budget.margin);
const over = [];
const figures = workloads.map((workload) => {
  const mine = samples.get(workload.name);
  const median = Object.fromEntries(
    [
      ...KEYS,
      'workersUs',
      'jobsPerSecond',
      'jobsPerCommit',
      'waveJobsPerCommit',
      'mainWakesPer100',
      'workerWakesPer100',
    ].map((key) => [key, summarize(mine.map((f) => f[key]))]),
  );
  const judged = workload.judged ?? KEYS;
  const limits = budget.workloads[workload.name] ?? null;
  const allowed = allowedFor(workload.name);
  const valid = !invalid.has(workload.name);
  if (limits === null) over.push(`${workload.name}: no budget in ${BUDGET_FILE} (node bench/cpu-budget.mjs --update)`);
  for (const key of valid ? judged : []) {
    const limit = limits?.[key];
    if (limit === undefined) continue;
    if (median[key].median > limit * allowed) {
      over.push(
        `${workload.name} ${LABELS[key]}: ${median[key].median.toFixed(1)} µs/job, over ${limit} × ${allowed} = ${(limit * allowed).toFixed(1)}`,
      );
    }
  }
  return {
    workload: workload.name,
    median,
    budget: limits,
    judged,
    ...(valid ? {} : { notComparable: invalid.get(workload.name) }),
  };
});

/**
 * `median (min–max) / budget +x %`: the figure and how far its median is from its budget
 * (`not judged` after a figure the workload is not judged on; no budget for an invalid
 * workload).
 */
const cell = (f, key) => {
  const figure = formatSummary(f.median[key], 1);
  if (f.notComparable !== undefined) return `${figure} / not comparable`;
  const limit = f.budget?.[key];
  if (limit === undefined) return `${figure} / none`;
  const change = (f.median[key].median / limit - 1) * 100;
  const distance = `${figure} / ${limit} ${change >= 0 ? '+' : ''}${change.toFixed(0)} %`;
  if (!f.judged.includes(key)) return `${distance}, not judged`;
  return `${distance}${f.median[key].median > limit * allowedFor(f.workload) ? ' OVER' : ''}`;
};
const commitCell = (f) => {
  const expected = f.budget?.jobsPerCommit;
  const figure = formatSummary(f.median.jobsPerCommit, 1);
  return expected === undefined ? figure : `${figure} / ${range(expected)}`;
};
printTable(
  `CPU per job, µs on a core: median (min–max) of the comparable runs / budget, and the median's distance from it (over when above +${(budget.margin * 100).toFixed(0)} %, or a workload's own margin in \`margins\`)`,
  ['workload', 'main', 'rest', 'outside the handler', 'workers', 'jobs/s', 'jobs per commit / range'],
  figures.map((f) => [
    f.workload,
    cell(f, 'mainUs'),
    cell(f, 'restUs'),
    cell(f, 'outsideUs'),
    formatSummary(f.median.workersUs, 1),
    f.median.jobsPerSecond.median?.toFixed(0) ?? 'n/a',
    commitCell(f),
  ]),
);
writeResult(NAME, { name: NAME, runs, threads: THREADS, figures });

if (values.update) {
  // Each workload keeps where its own budget was measured, since --only updates some of them.
  const measured = {
    date: new Date().toISOString(),
    ...version,
    runs,
    loadAverage1mBefore: loadBefore,
    loadAverage1mAfter: machine().loadAverage1m,
  };
  for (const f of figures) {
    const limits = Object.fromEntries(KEYS.map((key) => [key, Math.ceil(f.median[key].median)]));
    const commits = f.median.jobsPerCommit;
    const jobsPerCommit = {
      min: Math.floor(commits.min * (1 - COMMIT_TOLERANCE) * 100) / 100,
      max: Math.ceil(commits.max * (1 + COMMIT_TOLERANCE) * 100) / 100,
    };
    budget.workloads[f.workload] = { ...limits, jobsPerCommit, measured };
  }
  writeFileSync(BUDGET_FILE, `${JSON.stringify(budget, null, 2)}\n`);
  console.log(`${NAME}: budgets written to ${BUDGET_FILE}`);
  if (loadBefore > availableParallelism()) {
    console.warn(
      `${NAME}: the machine was loaded (1-minute load average ${loadBefore} before the first run, on ${availableParallelism()} cores); CI measures on an idle one, where these figures read lower`,
    );
  }
}
if (values.check) {
  if (over.length > 0) console.error(`\n${NAME}: FAILED, over budget:\n  ${over.join('\n  ')}`);
  if (invalid.size > 0) {
    console.error(
      `\n${NAME}: FAILED, not comparable with the budgets, so not judged:\n  ${[...invalid].map(([name, reason]) => `${name}: ${reason}`).join('\n  ')}`,
    );
  }
  if (over.length > 0) process.exit(1);
  if (invalid.size > 0) process.exit(3);
  console.log(
    `\n${NAME}: every judged figure within its budget + ${(budget.margin * 100).toFixed(0)} % (or its workload's own margin)`,
  );
}
