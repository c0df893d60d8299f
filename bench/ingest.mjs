/**
 * Figure 3, ingest: single-job POST /v1/jobs ({"type":"noop","payload":{}}) with dispatch
 * paused, 100 connections, 10 s after a 1 s warm-up (autocannon in its own process):
 * req/s and p99 latency of Kiln with the durable SQLite store and with the memory store,
 * next to a raw fastify server that validates the same body with the same zod schemas
 * and answers 201. With taskset, the load generator runs on core 0 and every server on
 * the other cores, so the servers do not share a core with autocannon. The order of the
 * three systems rotates from run to run. Each server's time on a core per answer (all
 * its threads, and its main thread) is reported too: the machine's neighbours move it
 * less than they move req/s.
 *
 *   node bench/ingest.mjs [--size tiny|full] [--runs N] [--cpu-prof]
 */
import { join } from 'node:path';
import { pauseQueue } from './lib/kiln-client.mjs';
import { BENCH_DIR, pinning, runNodeJson, startKiln, startServerScript } from './lib/processes.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, summarize, writeResult } from './lib/report.mjs';

const NAME = 'ingest';
const TARGET_RATIO = 0.7;
const TARGET_P99_RATIO = 2;
const BODY = { type: 'noop', payload: {} };

async function startSystem(system, cpus, options) {
  if (system === 'raw') return startServerScript(join(BENCH_DIR, 'baseline', 'raw-fastify.mjs'), {}, { cpus });
  const server = await startKiln({
    store: system === 'kilnMemory' ? 'memory' : 'sqlite',
    cpus,
    cpuProf: options.cpuProf,
    // Far more than 10 s of submissions can add, so no request is refused with 429.
    env: { KILN_MAX_QUEUED: '50000000' },
  });
  await pauseQueue(server.url);
  return server;
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 });
  const durationSeconds = options.tiny ? 1 : 10;
  const warmupSeconds = options.tiny ? 0 : 1;
  const pins = pinning();
  const systems = ['raw', 'kilnSqlite', 'kilnMemory'];
  const labels = { raw: 'raw fastify + zod', kilnSqlite: 'kiln, sqlite (sync=full)', kilnMemory: 'kiln, memory store' };
  const parameters = {
    body: BODY,
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
    `${NAME}: POST /v1/jobs, 100 connections, ${durationSeconds} s, ${options.runs} run(s); ${parameters.pinning}`,
  );

  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    const record = { run };
    // The order rotates from run to run, so that a neighbour's load on this shared machine does not
    // always fall on the same system.
    const order = systems.map((_, i) => systems[(i + run - 1) % systems.length]);
    for (const system of order) {
      const server = await startSystem(system, pins?.server ?? null, options);
      try {
        const result = await runNodeJson(
          join(BENCH_DIR, 'load', 'autocannon.mjs'),
          {
            url: `${server.url}/v1/jobs`,
            method: 'POST',
            body: BODY,
            connections: 100,
            durationSeconds,
            warmupSeconds,
            serverPid: server.pid,
          },
          { cpus: pins?.load ?? null, timeoutMs: (durationSeconds + warmupSeconds) * 1000 + 60_000 },
        );
        if (result.ok === 0 || result.non2xx > 0 || result.errors > 0) {
          throw new Error(
            `${labels[system]}: ${result.ok} answers 2xx, ${result.non2xx} non-2xx, ${result.errors} errors`,
          );
        }
        record[system] = result;
      } finally {
        await server.stop();
      }
    }
    record.sqliteToRaw = record.kilnSqlite.requestsPerSecond / record.raw.requestsPerSecond;
    record.memoryToRaw = record.kilnMemory.requestsPerSecond / record.raw.requestsPerSecond;
    record.sqliteP99ToRaw = record.kilnSqlite.latencyP99Ms / record.raw.latencyP99Ms;
    runs.push(record);
    console.log(
      `  run ${run}: ${systems.map((s) => `${labels[s]} ${record[s].requestsPerSecond.toFixed(0)} req/s p99 ${record[s].latencyP99Ms} ms`).join('; ')}`,
    );
  }

  const of = (pick) => summarize(runs.map(pick));
  const figures = Object.fromEntries(
    systems.map((s) => [
      s,
      {
        requestsPerSecond: of((r) => r[s].requestsPerSecond),
        latencyP50Ms: of((r) => r[s].latencyP50Ms),
        latencyP99Ms: of((r) => r[s].latencyP99Ms),
        cpuUsPerAnswer: of((r) => r[s].serverCpuUsPerAnswer),
        mainCpuUsPerAnswer: of((r) => r[s].serverMainCpuUsPerAnswer),
      },
    ]),
  );
  figures.sqliteToRaw = of((r) => r.sqliteToRaw);
  figures.memoryToRaw = of((r) => r.memoryToRaw);
  figures.sqliteP99ToRaw = of((r) => r.sqliteP99ToRaw);
  printTable(
    `Ingest (POST /v1/jobs, dispatch paused, 100 connections, ${durationSeconds} s; median (min–max) of ${options.runs} run(s))`,
    [
      'server',
      'req/s',
      'p50 ms',
      'p99 ms',
      'req/s ÷ raw',
      'p99 ÷ raw',
      'µs on a core per answer',
      'of which main thread',
    ],
    systems.map((s) => [
      labels[s],
      formatSummary(figures[s].requestsPerSecond),
      formatSummary(figures[s].latencyP50Ms),
      formatSummary(figures[s].latencyP99Ms),
      s === 'raw' ? '1' : formatSummary(s === 'kilnSqlite' ? figures.sqliteToRaw : figures.memoryToRaw, 2),
      s === 'raw' ? '1' : s === 'kilnSqlite' ? formatSummary(figures.sqliteP99ToRaw, 2) : '—',
      formatSummary(figures[s].cpuUsPerAnswer, 1),
      formatSummary(figures[s].mainCpuUsPerAnswer, 1),
    ]),
  );
  const target = {
    ratioToRaw: TARGET_RATIO,
    p99RatioToRaw: TARGET_P99_RATIO,
    ratioMet: figures.sqliteToRaw.median >= TARGET_RATIO,
    p99Met: figures.sqliteP99ToRaw.median <= TARGET_P99_RATIO,
  };
  target.met = target.ratioMet && target.p99Met;
  console.log(
    `target: sqlite >= ${TARGET_RATIO}x raw req/s: ${target.ratioMet ? 'met' : 'MISSED'} (${figures.sqliteToRaw.median.toFixed(2)}x); p99 <= ${TARGET_P99_RATIO}x raw's: ${target.p99Met ? 'met' : 'MISSED'} (${figures.sqliteP99ToRaw.median.toFixed(2)}x)`,
  );
  const path = writeResult(NAME, {
    size: options.size,
    parameters,
    target,
    figures,
    runs,
  });
  console.log(`wrote ${path}`);
});
