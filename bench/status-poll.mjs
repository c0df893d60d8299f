/**
 * Figure 15, status polls: GET /v1/jobs/{id} of 200 finished noop jobs, 100 connections,
 * each going through the 200 ids in turn, 10 s after a 1 s warm-up (autocannon in its own
 * process): req/s and p99 latency of Kiln (durable SQLite) next to a raw fastify server
 * answering the same 200 documents, as Kiln rendered them, from a Map in memory, and each
 * server's time on a core per answer (all its threads, and its main thread), a figure the
 * machine's neighbours move less than they move req/s. With
 * taskset, the load generator runs on core 0 and the servers on the other cores. Which
 * system goes first alternates from run to run.
 *
 *   node bench/status-poll.mjs [--size tiny|full] [--runs N] [--cpu-prof]
 */
import { join } from 'node:path';
import { requestJson, waitUntilIdle } from './lib/kiln-client.mjs';
import { BENCH_DIR, pinning, runNodeJson, startKiln, startServerScript } from './lib/processes.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, summarize, writeResult } from './lib/report.mjs';

const NAME = 'status-poll';
const TARGET_RATIO = 0.7;
const JOBS = 200;

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 });
  const durationSeconds = options.tiny ? 1 : 10;
  const warmupSeconds = options.tiny ? 0 : 1;
  const pins = pinning();
  const parameters = {
    jobs: JOBS,
    connections: 100,
    durationSeconds,
    warmupSeconds,
    pinning:
      pins === null
        ? 'none (taskset unavailable or < 2 cores)'
        : `load generator on CPU ${pins.load}, servers on CPU ${pins.server}`,
    runs: options.runs,
  };
  console.log(
    `${NAME}: GET /v1/jobs/{id} of ${JOBS} finished jobs, 100 connections, ${durationSeconds} s; ${parameters.pinning}`,
  );
  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    const kiln = await startKiln({ store: 'sqlite', cpus: pins?.server ?? null, cpuProf: options.cpuProf });
    const record = { run };
    try {
      const ids = [];
      for (let i = 0; i < JOBS; i += 100) {
        const jobs = Array.from({ length: Math.min(100, JOBS - i) }, () => ({ type: 'noop', payload: {} }));
        const answer = await requestJson(`${kiln.url}/v1/jobs/batch`, { method: 'POST', body: { jobs } });
        ids.push(...answer.jobs.map((job) => job.id));
      }
      await waitUntilIdle(kiln.url);
      const documents = await Promise.all(ids.map((id) => requestJson(`${kiln.url}/v1/jobs/${id}`)));
      if (documents.some((job) => job.status !== 'completed')) throw new Error('a job did not complete');
      const paths = ids.map((id) => `/v1/jobs/${id}`);
      const raw = await startServerScript(
        join(BENCH_DIR, 'baseline', 'raw-status.mjs'),
        { documents },
        { cpus: pins?.server ?? null },
      );
      try {
        const measure = (server) =>
          runNodeJson(
            join(BENCH_DIR, 'load', 'autocannon.mjs'),
            {
              url: server.url,
              method: 'GET',
              paths,
              connections: 100,
              durationSeconds,
              warmupSeconds,
              serverPid: server.pid,
            },
            { cpus: pins?.load ?? null, timeoutMs: (durationSeconds + warmupSeconds) * 1000 + 60_000 },
          );
        const order = run % 2 === 1 ? ['raw', 'kiln'] : ['kiln', 'raw'];
        for (const system of order) {
          const result = await measure(system === 'raw' ? raw : kiln);
          if (result.ok === 0 || result.non2xx > 0 || result.errors > 0) {
            throw new Error(`${system}: ${result.ok} answers 2xx, ${result.non2xx} non-2xx, ${result.errors} errors`);
          }
          record[system] = result;
        }
      } finally {
        await raw.stop();
      }
    } finally {
      await kiln.stop();
    }
    record.ratio = record.kiln.requestsPerSecond / record.raw.requestsPerSecond;
    record.p99Ratio = record.kiln.latencyP99Ms / Math.max(1, record.raw.latencyP99Ms);
    record.cpuRatio = record.raw.serverCpuUsPerAnswer / record.kiln.serverCpuUsPerAnswer;
    runs.push(record);
    console.log(
      `  run ${run}: kiln ${record.kiln.requestsPerSecond.toFixed(0)} req/s p99 ${record.kiln.latencyP99Ms} ms; ` +
        `raw fastify ${record.raw.requestsPerSecond.toFixed(0)} req/s p99 ${record.raw.latencyP99Ms} ms; ×${record.ratio.toFixed(2)}; ` +
        `on a core per answer ${record.kiln.serverCpuUsPerAnswer.toFixed(1)} against ${record.raw.serverCpuUsPerAnswer.toFixed(1)} µs`,
    );
  }
  const of = (pick) => summarize(runs.map(pick));
  const side = (name) => ({
    requestsPerSecond: of((r) => r[name].requestsPerSecond),
    latencyP99Ms: of((r) => r[name].latencyP99Ms),
    cpuUsPerAnswer: of((r) => r[name].serverCpuUsPerAnswer),
    mainCpuUsPerAnswer: of((r) => r[name].serverMainCpuUsPerAnswer),
  });
  const figures = {
    kiln: side('kiln'),
    raw: side('raw'),
    ratio: of((r) => r.ratio),
    p99Ratio: of((r) => r.p99Ratio),
    // Answers per second of a core, Kiln's ÷ raw fastify's: the req/s ratio if both were bound by their core.
    cpuRatio: of((r) => r.cpuRatio),
  };
  const row = (label, f) => [
    label,
    formatSummary(f.requestsPerSecond),
    formatSummary(f.latencyP99Ms),
    formatSummary(f.cpuUsPerAnswer, 1),
    formatSummary(f.mainCpuUsPerAnswer, 1),
  ];
  printTable(
    `${NAME}`,
    ['system', 'req/s', 'p99 ms', 'µs on a core per answer', 'of which main thread'],
    [
      row('kiln, sqlite', figures.kiln),
      row('raw fastify from a Map', figures.raw),
      [
        `kiln ÷ raw (target ≥ ${TARGET_RATIO})`,
        formatSummary(figures.ratio, 2),
        formatSummary(figures.p99Ratio, 2),
        `answers per core-second ×${formatSummary(figures.cpuRatio, 2)}`,
        '',
      ],
    ],
  );
  writeResult(NAME, {
    size: options.size,
    options,
    parameters,
    runs,
    figures,
    target: TARGET_RATIO,
    met: figures.ratio.median >= TARGET_RATIO,
  });
});
