/**
 * PostgreSQL store, scaling across processes: CPU-bound `cpu.spin` jobs of 20 ms on one
 * Kiln server with KILN_THREADS=1, and on two Kiln servers sharing one database and schema
 * with KILN_THREADS=1 each (a fresh schema per measurement). Jobs go in as
 * POST /v1/jobs/batch requests of 100, 8 in flight, from one load generator that sends
 * batch i to server i mod n. Two modes:
 *   - live: the servers run while the jobs are submitted; first request → last
 *     completion, as the other throughput figures are measured;
 *   - backlog: dispatch paused (cluster-wide) while every job is submitted, then resumed
 *     200 ms later; resume → last completion. No insert is announced while the servers
 *     claim, which the live mode cannot avoid.
 * Jobs/s, the ratio of two servers to one, and each as a percentage of ideal = servers ×
 * 1 thread × 1000 ÷ 20 ms; and how many jobs ran more than once (attempts > 1: an
 * attempt that was lost and rescued when its lease ran out, KILN_LEASE_MS = 30 s, 2 s at
 * the tiny size so that a lost attempt cannot stall CI for long) or failed, with their
 * errors: a failed job is counted and printed loudly, not fatal, since the figure (the
 * time to finish every job) still stands. The order of the four measurements rotates
 * from run to run. With 2 cores, two spinning threads take both
 * cores: the servers' main threads and PostgreSQL then compete with them, so this measures
 * what the database and the lease bookkeeping cost when the cores are full, not scaling
 * beyond one machine.
 *
 *   node bench/pg-cluster.mjs [--size tiny|full] [--runs N] [--cpu-prof]
 */
import { join } from 'node:path';
import { getQueue, pauseQueue, resumeQueue, waitUntilIdle } from './lib/kiln-client.mjs';
import { warmKiln } from './lib/measure.mjs';
import {
  dropSchema,
  dropStaleSchemas,
  freshSchemaName,
  KILN_SCHEMA_PREFIX,
  PG_URL,
  requirePostgres,
  serverSettings,
  withPg,
} from './lib/postgres.mjs';
import { BENCH_DIR, runNodeJson, startKiln } from './lib/processes.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, sleep, summarize, writeResult } from './lib/report.mjs';

const NAME = 'pg-cluster';
const SPIN_MS = 20;
const MODES = ['live', 'backlog'];

/**
 * Submits `load` while the servers run and waits until idle; first request → idle. A job
 * that failed is counted, not fatal: the caller reports which and why.
 */
async function liveRun(servers, load, finishedBefore) {
  const result = await runNodeJson(
    join(BENCH_DIR, 'load', 'submit-jobs.mjs'),
    { url: servers[0].url, ...load },
    { timeoutMs: 600_000 },
  );
  if (result.submitted !== load.total) throw new Error(`submitted ${result.submitted} of ${load.total} jobs`);
  if (result.completed + result.failed !== finishedBefore + load.total) {
    throw new Error(
      `expected ${finishedBefore + load.total} finished jobs, the queue says ${result.completed + result.failed}`,
    );
  }
  const elapsedMs = result.doneAt - result.startedAt;
  return { elapsedMs, jobsPerSecond: (load.total / elapsedMs) * 1000 };
}

/** Submits `load` to the paused cluster, resumes it and waits until idle; resume → idle. */
async function backlogRun(servers, load, completedBefore) {
  const [first] = servers;
  await pauseQueue(first.url);
  const submitted = await runNodeJson(
    join(BENCH_DIR, 'load', 'submit-jobs.mjs'),
    { url: first.url, ...load, wait: false },
    { timeoutMs: 600_000 },
  );
  if (submitted.submitted !== load.total) throw new Error(`submitted ${submitted.submitted} of ${load.total} jobs`);
  await sleep(200);
  const queue = await getQueue(first.url);
  if (queue.byStatus.queued !== load.total) throw new Error(`${queue.byStatus.queued} of ${load.total} jobs queued`);
  const resumedAt = Date.now();
  await resumeQueue(first.url);
  const done = await waitUntilIdle(first.url, { timeoutMs: 600_000 });
  if (done.completed + done.failed !== completedBefore + load.total) {
    throw new Error(
      `expected ${completedBefore + load.total} finished jobs, the queue says ${done.completed + done.failed}`,
    );
  }
  const elapsedMs = done.done - resumedAt;
  return { elapsedMs, jobsPerSecond: (load.total / elapsedMs) * 1000 };
}

/** `servers` Kiln servers with one thread each on one fresh schema; the jobs spread over them. */
async function clusterRun(servers, mode, total, options) {
  const schema = freshSchemaName(KILN_SCHEMA_PREFIX);
  const started = [];
  try {
    // One after the other: the first creates the schema, the next finds it migrated.
    for (let i = 0; i < servers; i++) {
      const cpuProf = options.cpuProf === null ? null : join(options.cpuProf, `${NAME}.${mode}.${servers}-servers`);
      const env = { KILN_LEASE_MS: String(options.leaseMs) };
      started.push(await startKiln({ store: 'postgres', pg: { url: PG_URL, schema }, threads: 1, env, cpuProf }));
    }
    let warm = 0;
    for (const server of started) warm += await warmKiln(server, { type: 'cpu.spin', payload: { ms: 1 } }, 2);
    const job = { type: 'cpu.spin', payload: { ms: SPIN_MS } };
    const load = { total, job, mode: 'batch', batchSize: 100, concurrency: 8, urls: started.map((s) => s.url) };
    const measured = mode === 'live' ? await liveRun(started, load, warm) : await backlogRun(started, load, warm);
    // Jobs that did not simply run once: run again after a lost attempt, or failed (and why).
    const odd = await withPg(
      async (client) =>
        (
          await client.query(
            `SELECT id::text AS id, status, attempts, error FROM (
               SELECT * FROM "${schema}".jobs UNION ALL SELECT * FROM "${schema}".jobs_done) j
             WHERE status <> 'completed' OR attempts > 1 ORDER BY id`,
          )
        ).rows,
    );
    const idealPerSecond = (servers * 1000) / SPIN_MS;
    return {
      servers,
      mode,
      elapsedMs: measured.elapsedMs,
      jobsPerSecond: measured.jobsPerSecond,
      idealPerSecond,
      percentOfIdeal: (measured.jobsPerSecond / idealPerSecond) * 100,
      jobsRunMoreThanOnce: odd.filter((row) => row.attempts > 1).length,
      jobsFailed: odd.filter((row) => row.status !== 'completed').length,
      oddJobs: odd,
    };
  } finally {
    await Promise.all(started.map((server) => server.stop()));
    await dropSchema(schema);
  }
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 });
  const total = options.tiny ? 40 : 400;
  const leaseMs = options.tiny ? 2000 : 30_000;
  const version = await requirePostgres();
  await dropStaleSchemas([KILN_SCHEMA_PREFIX]);
  const parameters = {
    total,
    spinMs: SPIN_MS,
    threadsPerServer: 1,
    servers: [1, 2],
    leaseMs,
    store: 'postgres (KILN_PG_POOL_SIZE 10 per server, a fresh schema per measurement)',
    postgres: await serverSettings(),
    submission: 'POST /v1/jobs/batch, 100 jobs per request, 8 requests in flight, batch i to server i mod n',
    modes: {
      live: 'submitted while the servers run; first request → last completion',
      backlog: 'submitted while dispatch is paused, resumed 200 ms later; resume → last completion',
    },
    ideal: 'servers × 1 thread × 1000 ÷ 20 ms',
    pinning: 'none',
    runs: options.runs,
  };
  console.log(
    `${NAME}: ${total} cpu.spin ${SPIN_MS} ms jobs on 1 and on 2 servers (KILN_THREADS=1 each), live and from a backlog, PostgreSQL ${version}, ${options.runs} run(s)`,
  );

  const measurements = MODES.flatMap((mode) => [1, 2].map((servers) => ({ mode, servers })));
  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    // The order rotates, so a neighbour's load on this shared machine does not always fall on one.
    const order = measurements.map((_, i) => measurements[(i + run - 1) % measurements.length]);
    const record = { run, order: order.map(({ mode, servers }) => `${mode}-${servers}`) };
    for (const { mode, servers } of order) {
      record[mode] ??= {};
      record[mode][servers === 1 ? 'one' : 'two'] = await clusterRun(servers, mode, total, { ...options, leaseMs });
    }
    for (const mode of MODES) record[mode].twoToOne = record[mode].two.jobsPerSecond / record[mode].one.jobsPerSecond;
    runs.push(record);
    const line = (mode) => {
      const { one, two } = record[mode];
      return `${mode}: one server ${one.jobsPerSecond.toFixed(1)}/s (${one.percentOfIdeal.toFixed(1)} %), two ${two.jobsPerSecond.toFixed(1)}/s (${two.percentOfIdeal.toFixed(1)} %, ${two.jobsRunMoreThanOnce} job(s) run twice, ${two.jobsFailed} failed)`;
    };
    console.log(`  run ${run}: ${line('live')}; ${line('backlog')}`);
    for (const mode of MODES) {
      for (const measured of [record[mode].one, record[mode].two]) {
        for (const job of measured.oddJobs.filter((row) => row.status !== 'completed')) {
          console.log(
            `  !!! ${mode}, ${measured.servers} server(s): job ${job.id} ${job.status} after ${job.attempts} attempt(s): ${job.error} !!!`,
          );
        }
      }
    }
  }

  const of = (pick) => summarize(runs.map(pick));
  const figures = {};
  for (const mode of MODES) {
    figures[mode] = {
      onePerSecond: of((r) => r[mode].one.jobsPerSecond),
      twoPerSecond: of((r) => r[mode].two.jobsPerSecond),
      onePercentOfIdeal: of((r) => r[mode].one.percentOfIdeal),
      twoPercentOfIdeal: of((r) => r[mode].two.percentOfIdeal),
      twoToOne: of((r) => r[mode].twoToOne),
      jobsRunMoreThanOnce: runs.reduce(
        (sum, r) => sum + r[mode].one.jobsRunMoreThanOnce + r[mode].two.jobsRunMoreThanOnce,
        0,
      ),
      jobsFailed: runs.reduce((sum, r) => sum + r[mode].one.jobsFailed + r[mode].two.jobsFailed, 0),
      runsWithJobsRunTwice: runs.filter((r) => r[mode].one.jobsRunMoreThanOnce + r[mode].two.jobsRunMoreThanOnce > 0)
        .length,
    };
  }
  printTable(
    `PostgreSQL cluster (${total} × ${SPIN_MS} ms cpu.spin, KILN_THREADS=1 per server; median (min–max) of ${options.runs} run(s))`,
    ['mode', 'servers', 'jobs/s', '% of ideal', 'ideal jobs/s', '÷ one server', 'run twice, failed (all runs)'],
    MODES.flatMap((mode) => {
      const f = figures[mode];
      return [
        [mode, '1', formatSummary(f.onePerSecond, 1), formatSummary(f.onePercentOfIdeal, 1), '50', '1', ''],
        [
          mode,
          '2',
          formatSummary(f.twoPerSecond, 1),
          formatSummary(f.twoPercentOfIdeal, 1),
          '100',
          formatSummary(f.twoToOne, 2),
          `${f.jobsRunMoreThanOnce}, ${f.jobsFailed}`,
        ],
      ];
    }),
  );
  const path = writeResult(NAME, { size: options.size, parameters, figures, runs });
  console.log(`wrote ${path}`);
});
