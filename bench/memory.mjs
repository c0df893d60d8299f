/**
 * Memory, besides the tracked figures: RSS and V8 heap of the Kiln server (from its own
 * /metrics: process_resident_memory_bytes, nodejs_heap_size_used_bytes) with 0, 100,000
 * and 1,000,000 pending noop jobs, dispatch paused, durable SQLite store; bytes per
 * pending job = (RSS at N − RSS at 0) ÷ N. Jobs go in through POST /v1/jobs/batch, 1000
 * a request, 4 in flight. Each level is read 2 s after its last insert (0.3 s at the
 * tiny size), as the median of 3 scrapes 0.5 s apart. The full size defaults to 1 run
 * (1M inserts take a while); pass --runs 3 for a median.
 *
 *   node bench/memory.mjs [--size tiny|full] [--runs N] [--cpu-prof]
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { getQueue, pauseQueue, scrapeMetrics } from './lib/kiln-client.mjs';
import { BENCH_DIR, runNodeJson, startKiln } from './lib/processes.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, sleep, summarize, writeResult } from './lib/report.mjs';

const NAME = 'memory';
const TARGET_RSS_BYTES = 2 ** 30;
const MiB = 2 ** 20;

async function readMemory(server) {
  const samples = [];
  for (let i = 0; i < 3; i++) {
    if (i > 0) await sleep(500);
    const m = await scrapeMetrics(server.url);
    samples.push({ rss: m.get('process_resident_memory_bytes'), heap: m.get('nodejs_heap_size_used_bytes') });
  }
  const fileBytes = ['kiln.db', 'kiln.db-wal'].reduce((sum, file) => {
    try {
      return sum + statSync(join(server.dir, file)).size;
    } catch {
      return sum;
    }
  }, 0);
  return {
    rssBytes: summarize(samples.map((s) => s.rss)).median,
    heapUsedBytes: summarize(samples.map((s) => s.heap)).median,
    sqliteFileBytes: fileBytes,
  };
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 1, tiny: 1 });
  const levels = options.tiny ? [0, 10_000] : [0, 100_000, 1_000_000];
  const top = levels.at(-1);
  const parameters = {
    levels,
    store: 'sqlite (KILN_SQLITE_SYNC=full)',
    submission: 'POST /v1/jobs/batch, 1000 noop jobs per request, 4 requests in flight, dispatch paused',
    runs: options.runs,
  };
  console.log(`${NAME}: RSS and heap at ${levels.join(', ')} pending noop jobs, ${options.runs} run(s)`);

  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    const server = await startKiln({
      store: 'sqlite',
      cpuProf: options.cpuProf,
      env: { KILN_MAX_QUEUED: String(top + 1000) },
    });
    const record = { run, levels: [] };
    try {
      await pauseQueue(server.url);
      let pending = 0;
      for (const level of levels) {
        if (level > pending) {
          await runNodeJson(
            join(BENCH_DIR, 'load', 'submit-jobs.mjs'),
            {
              url: server.url,
              total: level - pending,
              job: { type: 'noop' },
              mode: 'batch',
              batchSize: 1000,
              concurrency: 4,
              wait: false,
            },
            { timeoutMs: 900_000 },
          );
          pending = level;
        }
        await sleep(options.tiny ? 300 : level === 0 ? 1000 : 2000);
        const queue = await getQueue(server.url);
        if (queue.pending !== level) throw new Error(`expected ${level} pending jobs, the queue says ${queue.pending}`);
        const memory = await readMemory(server);
        record.levels.push({ pending: level, ...memory });
        console.log(
          `  run ${run}, ${level} pending: RSS ${(memory.rssBytes / MiB).toFixed(1)} MiB, heap used ${(memory.heapUsedBytes / MiB).toFixed(1)} MiB, SQLite file ${(memory.sqliteFileBytes / MiB).toFixed(1)} MiB`,
        );
      }
    } finally {
      await server.stop();
    }
    const [base] = record.levels;
    for (const level of record.levels.slice(1)) {
      level.rssBytesPerJob = (level.rssBytes - base.rssBytes) / level.pending;
      level.heapBytesPerJob = (level.heapUsedBytes - base.heapUsedBytes) / level.pending;
    }
    runs.push(record);
  }

  const figures = levels.map((pending, index) => {
    const of = (pick) => summarize(runs.map((r) => pick(r.levels[index])));
    return {
      pending,
      rssBytes: of((l) => l.rssBytes),
      heapUsedBytes: of((l) => l.heapUsedBytes),
      sqliteFileBytes: of((l) => l.sqliteFileBytes),
      rssBytesPerJob: of((l) => l.rssBytesPerJob),
      heapBytesPerJob: of((l) => l.heapBytesPerJob),
    };
  });
  const mib = (s) => ({ ...s, median: s.median / MiB, min: s.min / MiB, max: s.max / MiB });
  printTable(
    `Memory (pending noop jobs, dispatch paused, SQLite; median (min–max) of ${options.runs} run(s))`,
    ['pending', 'RSS MiB', 'heap used MiB', 'SQLite file MiB', 'RSS B/job', 'heap B/job'],
    figures.map((f) => [
      f.pending.toLocaleString('en-US'),
      formatSummary(mib(f.rssBytes), 1),
      formatSummary(mib(f.heapUsedBytes), 1),
      formatSummary(mib(f.sqliteFileBytes), 1),
      f.pending === 0 ? '—' : formatSummary(f.rssBytesPerJob),
      f.pending === 0 ? '—' : formatSummary(f.heapBytesPerJob),
    ]),
  );
  const last = figures.at(-1);
  const met = options.tiny ? null : last.rssBytes.median <= TARGET_RSS_BYTES;
  console.log(
    options.tiny
      ? 'target: 1M pending <= 1 GiB RSS: not judged at the tiny size'
      : `target: 1M pending <= 1 GiB RSS: ${met ? 'met' : 'MISSED'} (${(last.rssBytes.median / MiB).toFixed(0)} MiB)`,
  );
  const path = writeResult(NAME, {
    size: options.size,
    parameters,
    target: { rssBytesAt1M: TARGET_RSS_BYTES, met },
    figures,
    runs,
  });
  console.log(`wrote ${path}`);
});
