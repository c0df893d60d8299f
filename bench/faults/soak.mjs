/**
 * Soak: a Kiln server (durable SQLite, the default retention) under steady load for a
 * long time, to see whether its memory is flat. The load (load/steady.mjs, a process of
 * its own) submits single jobs at a fraction of the capacity measured first (a burst of
 * batch submissions of the same job, first request → idle), or at `--rate`, and watches
 * every 5th job with a long poll and every 50th with an event stream.
 *
 * Every `--sample-s` seconds it records the server's RSS split into anonymous and
 * file-backed pages (/proc/<pid>/smaps_rollup), its threads, process.memoryUsage() of
 * its main thread (heap used and total, external, array buffers; written by
 * lib/memory-probe.mjs, preloaded with --import), the heaps of its worker threads (the
 * pool's and the SQLite store's), the SQLite file and its WAL, and the
 * jobs in the store. At the end it prints the samples once a minute and the slope of each
 * figure per minute over the second half (least squares), and one JSON line; the result
 * goes to bench/results/faults/soak.json (soak.tiny.json at the tiny size).
 *
 * `--heap-snapshots` writes V8 heap snapshots of the server's main thread at 40 % and at
 * 95 % of the run (--heapsnapshot-signal) to bench/results/faults/heap/; compare them with
 * `node bench/faults/heap-diff.mjs A B`. `--env K=V,K=V` sets server variables, e.g.
 * MALLOC_ARENA_MAX=2 or KILN_RETAIN_COMPLETED_MS=60000 for a comparison.
 *
 *   node bench/faults/soak.mjs [--size tiny|full] [--minutes M] [--fraction F | --rate R]
 *     [--spin-ms N] [--sample-s S] [--heap-snapshots] [--env K=V,…]
 */
import { mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { getQueue, requestJson, waitUntilIdle } from '../lib/kiln-client.mjs';
import { BENCH_DIR, runNodeJson, startKiln } from '../lib/processes.mjs';
import { printTable, sleep } from '../lib/report.mjs';
import { finish, FAULTS_RESULTS, linearSlope, MiB } from './lib/fault-report.mjs';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: 'full' },
    minutes: { type: 'string' },
    fraction: { type: 'string', default: '0.8' },
    rate: { type: 'string' },
    'spin-ms': { type: 'string', default: '2' },
    'sample-s': { type: 'string' },
    'heap-snapshots': { type: 'boolean', default: false },
    env: { type: 'string', default: '' },
  },
  strict: true,
});
const tiny = values.size === 'tiny';
const minutes = Number(values.minutes ?? (tiny ? 0.25 : 30));
const sampleMs = Number(values['sample-s'] ?? (tiny ? 1 : 10)) * 1000;
const spinMs = Number(values['spin-ms']);
const fraction = Number(values.fraction);
if (!(minutes > 0 && minutes <= 240)) throw new Error(`--minutes must be from 0 to 240, got ${values.minutes}`);
if (!(fraction > 0 && fraction <= 1)) throw new Error(`--fraction must be from 0 to 1, got ${values.fraction}`);
if (!(sampleMs >= 200)) throw new Error(`--sample-s must be at least 0.2, got ${values['sample-s']}`);
const extraEnv = Object.fromEntries(
  values.env
    .split(',')
    .filter((pair) => pair !== '')
    .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
);
const job = { type: 'cpu.spin', payload: { ms: spinMs } };

function fileBytes(path) {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Rss and Anonymous of /proc/<pid>/smaps_rollup in bytes, and the thread count. */
function procMemory(pid) {
  const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kib = (field) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(rollup)?.[1] ?? Number.NaN) * 1024;
  const threads = Number(/^Threads:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  const rss = kib('Rss');
  const anon = kib('Anonymous');
  return { rss, anon, fileBacked: rss - anon, threads };
}

/** Jobs a second the server completes: `count` jobs in batches of 100, 4 in flight, first request → idle. */
async function measureCapacity(url, count) {
  const started = Date.now();
  let next = 0;
  let lastJobId = null;
  const lane = async () => {
    while (next < count) {
      const size = Math.min(100, count - next);
      next += size;
      const answer = await requestJson(`${url}/v1/jobs/batch`, {
        method: 'POST',
        body: { jobs: Array.from({ length: size }, () => job) },
      });
      lastJobId = answer.jobs.at(-1).id;
    }
  };
  await Promise.all([lane(), lane(), lane(), lane()]);
  const { done } = await waitUntilIdle(url, { lastJobId, timeoutMs: 300_000 });
  return count / ((done - started) / 1000);
}

await finish('soak', async () => {
  mkdirSync(FAULTS_RESULTS, { recursive: true });
  const heapDir = join(FAULTS_RESULTS, 'heap');
  if (values['heap-snapshots']) mkdirSync(heapDir, { recursive: true });
  const memoryLog = join(FAULTS_RESULTS, `soak-memory-${process.pid}.jsonl`);
  const server = await startKiln({
    store: 'sqlite',
    nodeArgs: [
      '--import',
      join(BENCH_DIR, 'faults', 'lib', 'memory-probe.mjs'),
      ...(values['heap-snapshots'] ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${heapDir}`] : []),
    ],
    env: { KILN_BENCH_MEMORY_LOG: memoryLog, KILN_BENCH_MEMORY_MS: String(sampleMs), ...extraEnv },
  });
  try {
    const capacity = values.rate === undefined ? await measureCapacity(server.url, tiny ? 400 : 4000) : null;
    const rate = values.rate === undefined ? Math.round(capacity * fraction) : Number(values.rate);
    if (!(rate > 0 && rate <= 100_000)) throw new Error(`the rate must be from 1 to 100,000 jobs/s, got ${rate}`);
    const durationMs = Math.round(minutes * 60_000);
    console.log(
      `soak: ${minutes} min of cpu.spin ${spinMs} ms at ${rate} jobs/s${capacity === null ? '' : ` (${fraction} × measured capacity ${capacity.toFixed(0)} jobs/s)`}, sampling every ${sampleMs / 1000} s${Object.keys(extraEnv).length > 0 ? `, server env ${values.env}` : ''}`,
    );
    const load = runNodeJson(
      join(BENCH_DIR, 'faults', 'load', 'steady.mjs'),
      { url: server.url, rate, durationMs, job, pollEvery: 5, streamEvery: 50 },
      { timeoutMs: durationMs + 120_000 },
    );
    const samples = [];
    const snapshots = values['heap-snapshots'] ? [0.4, 0.95] : [];
    const started = Date.now();
    let settled = false;
    load.then(
      () => (settled = true),
      () => (settled = true),
    );
    while (!settled && Date.now() - started < durationMs + 120_000) {
      const at = Date.now();
      const queue = await getQueue(server.url);
      samples.push({
        minute: (at - started) / 60_000,
        ...procMemory(server.pid),
        dbBytes: fileBytes(join(server.dir, 'kiln.db')) + fileBytes(join(server.dir, 'kiln.db-wal')),
        jobs: Object.values(queue.byStatus).reduce((a, b) => a + b, 0),
        pending: queue.pending,
      });
      if (snapshots.length > 0 && at - started >= snapshots[0] * durationMs) {
        snapshots.shift();
        process.kill(server.pid, 'SIGUSR2');
      }
      await sleep(Math.max(0, sampleMs - (Date.now() - at)));
    }
    const loadResult = await load;
    // The probe's lines, matched to the samples by time: the main thread's nearest line,
    // and the sum of every worker thread's last line before the sample.
    const probe = readFileSync(memoryLog, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    const main = probe.filter((p) => p.thread === 0);
    const workers = probe.filter((p) => p.thread !== 0);
    for (const sample of samples) {
      const at = started + sample.minute * 60_000;
      const near = main.reduce((best, p) => (Math.abs(p.at - at) < Math.abs(best.at - at) ? p : best), main[0]);
      const lastOfThread = new Map();
      for (const line of workers) if (line.at <= at) lastOfThread.set(line.thread, line);
      Object.assign(sample, {
        heapUsed: near.heapUsed,
        heapTotal: near.heapTotal,
        external: near.external,
        arrayBuffers: near.arrayBuffers,
        workerHeaps: [...lastOfThread.values()].reduce((sum, line) => sum + line.heapTotal, 0),
        workerThreads: lastOfThread.size,
      });
    }
    const steady = samples.filter((s) => s.minute <= minutes);
    const secondHalf = steady.filter((s) => s.minute >= minutes / 2);
    const FIGURES = [
      'rss',
      'anon',
      'fileBacked',
      'heapUsed',
      'heapTotal',
      'external',
      'arrayBuffers',
      'workerHeaps',
      'dbBytes',
    ];
    const slopes = Object.fromEntries(
      FIGURES.map((name) => [name, linearSlope(secondHalf.map((s) => [s.minute, s[name] / MiB]))]),
    );
    const everyMinute = steady.filter((s, i) => i === 0 || Math.floor(s.minute) > Math.floor(steady[i - 1].minute));
    const rows = [...everyMinute, steady.at(-1)].filter((s, i, all) => all.indexOf(s) === i);
    const mib = (v) => (v / MiB).toFixed(1);
    printTable(
      'Soak samples (MiB)',
      [
        'min',
        'RSS',
        'anon',
        'file',
        'heap used',
        'heap total',
        'external',
        'arrayBuf',
        'worker heaps',
        'threads',
        'SQLite',
        'jobs',
        'pending',
      ],
      rows.map((s) => [
        s.minute.toFixed(1),
        mib(s.rss),
        mib(s.anon),
        mib(s.fileBacked),
        mib(s.heapUsed),
        mib(s.heapTotal),
        mib(s.external),
        mib(s.arrayBuffers),
        `${mib(s.workerHeaps)} (${s.workerThreads})`,
        String(s.threads),
        mib(s.dbBytes),
        s.jobs.toLocaleString('en-US'),
        s.pending.toLocaleString('en-US'),
      ]),
    );
    printTable(`Slope over the second half (${secondHalf.length} samples), MiB/min`, FIGURES, [
      FIGURES.map((name) => slopes[name].toFixed(2)),
    ]);
    const errors = Object.values(loadResult.errors).reduce((a, b) => a + b, 0);
    console.log(
      `load: ${loadResult.accepted} jobs accepted of ${loadResult.submitted} sent (${loadResult.skipped} skipped), ${loadResult.longPolls} long polls (${loadResult.longPollsTerminal} saw the end), ${loadResult.streams} event streams (${loadResult.streamsEnded} ended), ${errors} errors ${JSON.stringify(loadResult.errors)}`,
    );
    const last = await getQueue(server.url);
    rmSync(memoryLog, { force: true });
    return {
      size: values.size,
      parameters: { minutes, rate, capacity, fraction, spinMs, sampleMs, env: extraEnv, retention: 'default' },
      load: loadResult,
      errors,
      slopesMiBPerMinute: slopes,
      queueAtEnd: last.byStatus,
      samples,
    };
  } finally {
    await server.stop();
  }
});
