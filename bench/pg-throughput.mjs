/**
 * PostgreSQL store, small-job throughput end to end: one Kiln server on PostgreSQL
 * (KILN_STORE=postgres://…, a fresh schema per measurement, KILN_THREADS = cores or
 * `--threads N`, the default pool of 10 connections), 50,000 noop jobs as
 * POST /v1/jobs/batch requests of 100, 8 in flight, first request → last completion.
 * Kiln is measured twice: on the schema as the server created it, whose jobs table has
 * never been analyzed (the first minute of a new schema, until autovacuum's first
 * ANALYZE), and with `ANALYZE` of the jobs table after the warm-up jobs (a running
 * deployment's state). Baseline in the same run:
 * graphile-worker on the same database (its own schema): addJobs of 100, 8 in flight,
 * from a producer process, and a worker process (concurrency 24, local queue of 500,
 * batched completions: graphile-worker's own performance-test settings) with an
 * in-process no-op task; first add → last completion committed. The order of the three
 * rotates from run to run. For each, what the database server spent per job over the
 * measured span (lib/pg-cost.mjs: WAL bytes, its processes' CPU, rows and index entries
 * written, commits), and Kiln's ratios to graphile-worker's. Nothing is pinned: the server, PostgreSQL and the load
 * generator share the cores, as graphile-worker's two processes and PostgreSQL do.
 *
 *   node bench/pg-throughput.mjs [--size tiny|full] [--runs N] [--threads N] [--cpu-prof]
 */
import { GRAPHILE_SCHEMA_PREFIX, measureGraphileRun } from './lib/graphile.mjs';
import { measureKilnRun, warmKiln } from './lib/measure.mjs';
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
import { pgCostMark, pgCostSince } from './lib/pg-cost.mjs';
import { startKiln } from './lib/processes.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, summarize, writeResult } from './lib/report.mjs';

const NAME = 'pg-throughput';
const NOOP = { type: 'noop' };
const GRAPHILE_CONCURRENCY = 24;

async function kilnRun(total, threads, options, { analyze }) {
  const schema = freshSchemaName(KILN_SCHEMA_PREFIX);
  try {
    const server = await startKiln({
      store: 'postgres',
      pg: { url: PG_URL, schema },
      threads,
      cpuProf: options.cpuProf,
    });
    try {
      const warm = await warmKiln(server, NOOP, threads * 4);
      if (analyze) await withPg((client) => client.query(`ANALYZE "${schema}".jobs`));
      const load = { total, job: NOOP, mode: 'batch', batchSize: 100, concurrency: 8 };
      const mark = await pgCostMark();
      const run = await measureKilnRun(server, load, { completedBefore: warm });
      return { ...run, database: await pgCostSince(mark, total) };
    } finally {
      await server.stop();
    }
  } finally {
    await dropSchema(schema);
  }
}

/** What the database spent per job, by system (lib/pg-cost.mjs), and Kiln's ratios to graphile-worker. */
const DATABASE_MEASURES = {
  walBytesPerJob: 'WAL bytes',
  cpuUsPerJob: 'PostgreSQL CPU µs',
  commitsPerJob: 'commits',
  heapInsertsPerJob: 'rows inserted',
  heapUpdatesPerJob: 'rows updated (not HOT)',
  heapHotUpdatesPerJob: 'rows updated (HOT)',
  heapDeletesPerJob: 'rows deleted',
  heapLocksPerJob: 'rows locked',
  indexInsertsPerJob: 'index entries inserted',
};
const SYSTEMS = { kilnFresh: 'kiln, fresh schema', kilnAnalyzed: 'kiln, analyzed', graphile: 'graphile-worker' };

function databaseFigures(runs, of) {
  const figures = {};
  for (const system of Object.keys(SYSTEMS)) {
    for (const measure of Object.keys(DATABASE_MEASURES)) {
      if (runs.some((r) => r[system].database[measure] === null)) continue;
      figures[`${system}Db_${measure}`] = of((r) => r[system].database[measure]);
      if (system !== 'graphile' && (measure === 'walBytesPerJob' || measure === 'cpuUsPerJob')) {
        figures[`${system}DbToGraphile_${measure}`] = of(
          (r) => r[system].database[measure] / r.graphile.database[measure],
        );
      }
    }
  }
  return figures;
}

function printDatabaseTable(figures, runs) {
  const rows = Object.entries(DATABASE_MEASURES)
    .filter(([measure]) => figures[`graphileDb_${measure}`] !== undefined)
    .map(([measure, label]) => [
      label,
      ...Object.keys(SYSTEMS).map((system) => formatSummary(figures[`${system}Db_${measure}`], 2)),
      ...['kilnFresh', 'kilnAnalyzed'].map((system) => {
        const ratio = figures[`${system}DbToGraphile_${measure}`];
        return ratio === undefined ? '' : formatSummary(ratio, 2);
      }),
    ]);
  printTable(
    `What the database spent per job (the whole server, first request → last completion; median (min–max) of ${runs} run(s))`,
    ['per job', ...Object.values(SYSTEMS), 'fresh ÷ gw', 'analyzed ÷ gw'],
    rows,
  );
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 }, { threads: true });
  const { threads } = options;
  const total = options.tiny ? 500 : 50_000;
  const version = await requirePostgres();
  await dropStaleSchemas([KILN_SCHEMA_PREFIX, GRAPHILE_SCHEMA_PREFIX]);
  const parameters = {
    total,
    threads,
    store: 'postgres (one server, KILN_PG_POOL_SIZE 10, a fresh schema per measurement)',
    kilnVariants: {
      fresh: 'the jobs table as the server created it: never analyzed',
      analyzed: `ANALYZE of the jobs table after the ${threads * 4} warm-up jobs, before the measurement`,
    },
    postgres: await serverSettings(),
    batch: 'POST /v1/jobs/batch, 100 jobs per request, 8 requests in flight',
    graphileWorker: `graphile-worker ${(await import('graphile-worker/package.json', { with: { type: 'json' } })).default.version}: addJobs of 100, 8 in flight; run() with concurrency ${GRAPHILE_CONCURRENCY}, localQueue 500 (refetch delay 10 ms), completeJobBatchDelay 0, in-process no-op; its own schema`,
    pinning: 'none',
    runs: options.runs,
  };
  console.log(`${NAME}: ${total} noop jobs, ${threads} threads, PostgreSQL ${version}, ${options.runs} run(s)`);

  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    // The order rotates, so a neighbour's load on this shared machine does not always fall on one.
    const measurements = {
      fresh: () => kilnRun(total, threads, options, { analyze: false }),
      analyzed: () => kilnRun(total, threads, options, { analyze: true }),
      graphile: () => measureGraphileRun({ total, workerConcurrency: GRAPHILE_CONCURRENCY, meter: true }),
    };
    const names = Object.keys(measurements);
    const order = names.map((_, i) => names[(i + run - 1) % names.length]);
    const measured = {};
    for (const name of order) measured[name] = await measurements[name]();
    const { fresh, analyzed, graphile } = measured;
    runs.push({
      run,
      order,
      kilnFresh: fresh,
      kilnAnalyzed: analyzed,
      graphile,
      freshToGraphile: fresh.jobsPerSecond / graphile.jobsPerSecond,
      analyzedToGraphile: analyzed.jobsPerSecond / graphile.jobsPerSecond,
    });
    console.log(
      `  run ${run}: kiln ${fresh.jobsPerSecond.toFixed(0)}/s on a fresh schema, ${analyzed.jobsPerSecond.toFixed(0)}/s analyzed (lag p99 ${fresh.eventLoopLag.p99Ms.toFixed(1)}, ${analyzed.eventLoopLag.p99Ms.toFixed(1)} ms), graphile-worker ${graphile.jobsPerSecond.toFixed(0)}/s`,
    );
  }

  const of = (pick) => summarize(runs.map(pick));
  const figures = {
    kilnFreshPerSecond: of((r) => r.kilnFresh.jobsPerSecond),
    kilnAnalyzedPerSecond: of((r) => r.kilnAnalyzed.jobsPerSecond),
    graphilePerSecond: of((r) => r.graphile.jobsPerSecond),
    freshToGraphile: of((r) => r.freshToGraphile),
    analyzedToGraphile: of((r) => r.analyzedToGraphile),
    kilnFreshSubmitMs: of((r) => r.kilnFresh.submitMs),
    kilnAnalyzedSubmitMs: of((r) => r.kilnAnalyzed.submitMs),
    graphileSubmitMs: of((r) => r.graphile.submitMs),
    kilnFreshLagP99Ms: of((r) => r.kilnFresh.eventLoopLag.p99Ms),
    ...databaseFigures(runs, of),
    kilnAnalyzedLagP99Ms: of((r) => r.kilnAnalyzed.eventLoopLag.p99Ms),
  };
  printTable(
    `PostgreSQL throughput (${total} noop jobs, first request → last completion; median (min–max) of ${options.runs} run(s))`,
    ['system', 'jobs/s', '÷ graphile-worker', 'all submitted after ms', 'lag p99 ms'],
    [
      [
        `kiln, ${threads} thread(s), fresh schema`,
        formatSummary(figures.kilnFreshPerSecond),
        formatSummary(figures.freshToGraphile, 2),
        formatSummary(figures.kilnFreshSubmitMs),
        formatSummary(figures.kilnFreshLagP99Ms, 1),
      ],
      [
        `kiln, ${threads} thread(s), jobs analyzed`,
        formatSummary(figures.kilnAnalyzedPerSecond),
        formatSummary(figures.analyzedToGraphile, 2),
        formatSummary(figures.kilnAnalyzedSubmitMs),
        formatSummary(figures.kilnAnalyzedLagP99Ms, 1),
      ],
      ['graphile-worker', formatSummary(figures.graphilePerSecond), '1', formatSummary(figures.graphileSubmitMs), '—'],
    ],
  );
  printDatabaseTable(figures, options.runs);
  const path = writeResult(NAME, { size: options.size, variant: options.variant, parameters, figures, runs });
  console.log(`wrote ${path}`);
});
