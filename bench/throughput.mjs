/**
 * Figure 2, small-job throughput end to end: 50,000 noop jobs, first request to last
 * completion, durable SQLite, KILN_THREADS = cores (or `--threads N`), a fresh server for
 * each mode:
 *   - batch:  POST /v1/jobs/batch, 100 jobs a request, 8 requests in flight;
 *   - single: POST /v1/jobs, 100 connections (autocannon).
 * Baselines in the same run: raw piscina (one task per job, the same noop handler, all
 * submitted at once, on as many threads as Kiln has) and BullMQ on the local Redis
 * (addBulk of 100, 8 in flight, Worker with concurrency 50 and an in-process no-op
 * processor; first add → last completion; one worker process whatever the thread count).
 * Also the server's event-loop lag during the Kiln runs (figure 5). Nothing is pinned:
 * Kiln's main thread and its pool share the cores with the load generator, and so do
 * BullMQ's producer, worker and Redis. The order of the four measurements rotates from
 * run to run.
 *
 *   node bench/throughput.mjs [--size tiny|full] [--runs N] [--threads N] [--cpu-prof]
 */
import { measureBullmqRun, REDIS_URL, redisUnavailable } from './lib/bullmq.mjs';
import { measureKilnRun, measurePiscinaRun, WARM_JOBS, warmKiln } from './lib/measure.mjs';
import { startKiln } from './lib/processes.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, summarize, writeResult } from './lib/report.mjs';

const NAME = 'throughput';
const NOOP = { type: 'noop' };
const TARGET_TO_BULLMQ = 2.5;
const TARGET_TO_PISCINA = 1.2;

async function kilnRun(mode, total, threads, options) {
  const server = await startKiln({ store: 'sqlite', threads, cpuProf: options.cpuProf });
  try {
    const warm = await warmKiln(server, NOOP);
    const load =
      mode === 'batch'
        ? { total, job: NOOP, mode: 'batch', batchSize: 100, concurrency: 8 }
        : { total, job: NOOP, mode: 'single', connections: 100 };
    return await measureKilnRun(server, load, { completedBefore: warm });
  } finally {
    await server.stop();
  }
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 }, { threads: true });
  const { threads } = options;
  const total = options.tiny ? 500 : 50_000;
  const redisDown = await redisUnavailable();
  if (redisDown !== null) {
    console.log(`\n!!! SKIPPING THE BULLMQ BASELINE: Redis at ${REDIS_URL} is unreachable (${redisDown}) !!!\n`);
  }
  const parameters = {
    total,
    threads,
    store: 'sqlite (KILN_SQLITE_SYNC=full)',
    batch: 'POST /v1/jobs/batch, 100 jobs per request, 8 requests in flight',
    single: 'POST /v1/jobs, 100 connections (autocannon)',
    piscina: 'one task per job, all submitted at once, same noop handler',
    bullmq:
      redisDown === null
        ? 'addBulk of 100, 8 in flight; Worker concurrency 50, in-process no-op'
        : `skipped: ${redisDown}`,
    pinning: 'none',
    runs: options.runs,
  };
  console.log(`${NAME}: ${total} noop jobs, ${threads} threads, ${options.runs} run(s)`);

  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    // The order rotates from run to run, so that a neighbour's load on this shared machine does not
    // always fall on the same system.
    const measurements = {
      piscina: () => measurePiscinaRun({ task: 'noop', payload: {}, count: total, threads, warm: WARM_JOBS }),
      batch: () => kilnRun('batch', total, threads, options),
      single: () => kilnRun('single', total, threads, options),
      bullmq: () => (redisDown === null ? measureBullmqRun({ total }) : null),
    };
    const names = Object.keys(measurements);
    const measured = {};
    for (let i = 0; i < names.length; i++) {
      const name = names[(i + run - 1) % names.length];
      measured[name] = await measurements[name]();
    }
    const { piscina, batch, single, bullmq } = measured;
    const record = {
      run,
      piscina,
      kilnBatch: batch,
      kilnSingle: single,
      bullmq,
      batchToPiscina: batch.jobsPerSecond / piscina.jobsPerSecond,
      singleToPiscina: single.jobsPerSecond / piscina.jobsPerSecond,
      batchToBullmq: bullmq === null ? null : batch.jobsPerSecond / bullmq.jobsPerSecond,
      singleToBullmq: bullmq === null ? null : single.jobsPerSecond / bullmq.jobsPerSecond,
    };
    runs.push(record);
    console.log(
      `  run ${run}: kiln batch ${batch.jobsPerSecond.toFixed(0)}/s (lag p99 ${batch.eventLoopLag.p99Ms.toFixed(1)} ms), single ${single.jobsPerSecond.toFixed(0)}/s (lag p99 ${single.eventLoopLag.p99Ms.toFixed(1)} ms), piscina ${piscina.jobsPerSecond.toFixed(0)}/s, bullmq ${bullmq === null ? 'skipped' : `${bullmq.jobsPerSecond.toFixed(0)}/s`}`,
    );
  }

  const of = (pick) => summarize(runs.map(pick).filter((v) => v !== null && v !== undefined));
  const figures = {
    piscinaPerSecond: of((r) => r.piscina.jobsPerSecond),
    bullmqPerSecond: of((r) => r.bullmq?.jobsPerSecond),
    kilnBatchPerSecond: of((r) => r.kilnBatch.jobsPerSecond),
    kilnSinglePerSecond: of((r) => r.kilnSingle.jobsPerSecond),
    batchToPiscina: of((r) => r.batchToPiscina),
    singleToPiscina: of((r) => r.singleToPiscina),
    batchToBullmq: of((r) => r.batchToBullmq),
    singleToBullmq: of((r) => r.singleToBullmq),
    batchLagP99Ms: of((r) => r.kilnBatch.eventLoopLag.p99Ms),
    batchLagMaxMs: of((r) => r.kilnBatch.eventLoopLag.maxMs),
    batchIntervalP99Ms: of((r) => r.kilnBatch.eventLoopLag.intervalP99Ms),
    singleLagP99Ms: of((r) => r.kilnSingle.eventLoopLag.p99Ms),
    singleLagMaxMs: of((r) => r.kilnSingle.eventLoopLag.maxMs),
  };
  const na = '—';
  printTable(
    `Throughput (${total} noop jobs, ${threads} threads, first request → last completion; median (min–max) of ${options.runs} run(s))`,
    ['system', 'jobs/s', '÷ raw piscina', '÷ BullMQ', 'lag p99 ms', 'lag max ms'],
    [
      [
        'kiln, batch of 100',
        formatSummary(figures.kilnBatchPerSecond),
        formatSummary(figures.batchToPiscina, 2),
        formatSummary(figures.batchToBullmq, 2),
        formatSummary(figures.batchLagP99Ms, 1),
        formatSummary(figures.batchLagMaxMs, 1),
      ],
      [
        'kiln, single POSTs',
        formatSummary(figures.kilnSinglePerSecond),
        formatSummary(figures.singleToPiscina, 2),
        formatSummary(figures.singleToBullmq, 2),
        formatSummary(figures.singleLagP99Ms, 1),
        formatSummary(figures.singleLagMaxMs, 1),
      ],
      ['raw piscina', formatSummary(figures.piscinaPerSecond), '1', na, na, na],
      ['BullMQ', redisDown === null ? formatSummary(figures.bullmqPerSecond) : 'SKIPPED', na, '1', na, na],
    ],
  );
  const target = {
    ratioToBullmq: TARGET_TO_BULLMQ,
    ratioToPiscina: TARGET_TO_PISCINA,
    bullmqMet: figures.batchToBullmq.median === null ? null : figures.batchToBullmq.median >= TARGET_TO_BULLMQ,
    piscinaMet: figures.batchToPiscina.median >= TARGET_TO_PISCINA,
  };
  const said = (met) => (met === null ? 'not measured (no Redis)' : met ? 'met' : 'MISSED');
  console.log(
    `target: batch >= ${TARGET_TO_BULLMQ}x BullMQ: ${said(target.bullmqMet)}; batch >= ${TARGET_TO_PISCINA}x raw piscina: ${said(target.piscinaMet)}`,
  );
  const path = writeResult(NAME, { size: options.size, variant: options.variant, parameters, target, figures, runs });
  console.log(`wrote ${path}`);
});
