/**
 * Figure 14, mixed durations: 2 % of 1 s cpu.spin jobs among 98 % of 5 ms ones, submitted
 * one by one (single POST /v1/jobs) at 80 % of the threads' capacity, at seeded random
 * (exponential) intervals, for a minute (5 s at the tiny size); durable SQLite,
 * KILN_THREADS = cores (or `--threads N`). From every job's own times on the server's
 * clock (createdAt, startedAt, finishedAt):
 *   - the short jobs' wait (startedAt − createdAt), p50/p99/max, against an ideal global
 *     FIFO over the same threads, simulated from the same arrival times and the same run
 *     times (each job's finishedAt − startedAt): the ratio of the p99s is the figure;
 *   - how busy the threads were while work waited: over every moment at least one job had
 *     arrived and not started, the share of the threads running a job.
 * Both clocks are the server's, in whole milliseconds (±1 ms a sample).
 *
 *   node bench/mixed-durations.mjs [--size tiny|full] [--runs N] [--threads N]
 */
import { seededRandom } from './faults/lib/mixed-load.mjs';
import { requestJson, waitUntilIdle } from './lib/kiln-client.mjs';
import { startKiln } from './lib/processes.mjs';
import {
  benchOptions,
  formatSummary,
  percentile,
  printTable,
  runBenchmark,
  sleep,
  summarize,
  writeResult,
} from './lib/report.mjs';

const NAME = 'mixed-durations';
const LONG_MS = 1000;
const SHORT_MS = 5;
const LONG_SHARE = 0.02;
const LOAD = 0.8;
const TARGET_RATIO = 1.5;
const TARGET_BUSY = 0.95;

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 }, { threads: true });
  const { threads } = options;
  const seconds = options.tiny ? 5 : 60;
  const meanMs = LONG_SHARE * LONG_MS + (1 - LONG_SHARE) * SHORT_MS;
  const ratePerSecond = (LOAD * threads * 1000) / meanMs;
  const parameters = { threads, seconds, longMs: LONG_MS, shortMs: SHORT_MS, longShare: LONG_SHARE, load: LOAD };
  console.log(
    `${NAME}: ${threads} threads, ${LONG_SHARE * 100} % ${LONG_MS} ms and ${SHORT_MS} ms jobs at ${ratePerSecond.toFixed(1)}/s for ${seconds} s, ${options.runs} run(s)`,
  );
  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    const server = await startKiln({ store: 'sqlite', threads });
    try {
      const jobs = await submitAtRate(server.url, ratePerSecond, seconds, 0x9e3779b9 + run);
      await waitUntilIdle(server.url);
      const read = await readJobs(server.url, jobs);
      const record = { run, ...measure(read, threads) };
      console.log(
        `  run ${run}: ${read.length} jobs; short wait p99 ${record.kiln.p99} ms against ideal FIFO ${record.ideal.p99} ms ` +
          `(×${record.ratioP99.toFixed(2)}); threads busy ${(record.busyWhileWaiting * 100).toFixed(1)} % while work waited`,
      );
      runs.push(record);
    } finally {
      await server.stop();
    }
  }
  const ratio = summarize(runs.map((r) => r.ratioP99));
  const busy = summarize(runs.map((r) => r.busyWhileWaiting * 100));
  printTable(
    `${NAME} (${threads} threads)`,
    ['figure', 'median (min–max)', 'target'],
    [
      ['short jobs’ wait p99, ms', formatSummary(summarize(runs.map((r) => r.kiln.p99)), 0), '—'],
      ['ideal global FIFO p99, ms', formatSummary(summarize(runs.map((r) => r.ideal.p99)), 0), '—'],
      ['ratio of the p99s', formatSummary(ratio, 2), `≤ ${TARGET_RATIO}`],
      ['threads busy while work waits, %', formatSummary(busy, 1), `≥ ${TARGET_BUSY * 100}`],
    ],
  );
  writeResult(NAME, {
    size: options.size,
    options,
    parameters,
    runs,
    summary: { ratioP99: ratio, busyWhileWaitingPercent: busy },
    targets: { ratioP99: TARGET_RATIO, busyWhileWaiting: TARGET_BUSY },
    met: ratio.median <= TARGET_RATIO && busy.median >= TARGET_BUSY * 100,
  });
});

/** Submits single jobs at exponential intervals averaging `rate` per second; answers their ids and kinds. */
async function submitAtRate(base, rate, seconds, seed) {
  const random = seededRandom(seed);
  const plan = [];
  for (let at = 0; at < seconds * 1000; at += (-Math.log(1 - random()) * 1000) / rate) {
    plan.push({ at, long: random() < LONG_SHARE });
  }
  const started = performance.now();
  const answers = [];
  for (const { at, long } of plan) {
    const wait = started + at - performance.now();
    if (wait > 1) await sleep(wait);
    const body = { type: 'cpu.spin', payload: { ms: long ? LONG_MS : SHORT_MS } };
    answers.push(
      requestJson(`${base}/v1/jobs`, { method: 'POST', body }).then((job) => {
        if (typeof job?.id !== 'string') throw new Error(`a submission was refused: ${JSON.stringify(job)}`);
        return { id: job.id, long };
      }),
    );
  }
  return Promise.all(answers);
}

async function readJobs(base, jobs) {
  const read = [];
  for (let i = 0; i < jobs.length; i += 32) {
    const slice = jobs.slice(i, i + 32);
    const answers = await Promise.all(slice.map(({ id }) => requestJson(`${base}/v1/jobs/${id}`)));
    for (const [k, job] of answers.entries()) {
      if (job.status !== 'completed') throw new Error(`job ${job.id} ended ${job.status}`);
      read.push({
        long: slice[k].long,
        created: Date.parse(job.createdAt),
        started: Date.parse(job.startedAt),
        finished: Date.parse(job.finishedAt),
      });
    }
  }
  return read;
}

/** The figures of one run, from the jobs' own times, and the ideal FIFO simulated from the same arrivals and run times. */
function measure(jobs, threads) {
  const byArrival = [...jobs].sort((a, b) => a.created - b.created);
  // Ideal: one global FIFO over `threads`, each job starting on the first thread free.
  const free = new Array(threads).fill(Number.NEGATIVE_INFINITY);
  const idealWaits = [];
  for (const job of byArrival) {
    let first = 0;
    for (let t = 1; t < threads; t++) if (free[t] < free[first]) first = t;
    const start = Math.max(job.created, free[first]);
    free[first] = start + (job.finished - job.started);
    if (!job.long) idealWaits.push(start - job.created);
  }
  const kilnWaits = byArrival.filter((job) => !job.long).map((job) => job.started - job.created);
  const kiln = waits(kilnWaits);
  const ideal = waits(idealWaits);
  return {
    jobs: jobs.length,
    kiln,
    ideal,
    // Whole milliseconds on both sides: a p99 of 0 ms reads as 1.
    ratioP99: Math.max(1, kiln.p99) / Math.max(1, ideal.p99),
    busyWhileWaiting: busyWhileWaiting(jobs, threads),
  };
}

function waits(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1) ?? 0 };
}

/** Over the moments at least one job waited (arrived, not started): running jobs ÷ threads, time-weighted. */
function busyWhileWaiting(jobs, threads) {
  const events = [];
  for (const job of jobs) {
    events.push([job.created, 0, 1], [job.started, 0, -1], [job.started, 1, 1], [job.finished, 1, -1]);
  }
  events.sort((a, b) => a[0] - b[0]);
  let waiting = 0;
  let running = 0;
  let last = events[0]?.[0] ?? 0;
  let span = 0;
  let busy = 0;
  for (const [at, kind, delta] of events) {
    if (waiting > 0 && at > last) {
      span += at - last;
      busy += (at - last) * Math.min(1, running / threads);
    }
    last = at;
    if (kind === 0) waiting += delta;
    else running += delta;
  }
  return span === 0 ? 1 : busy / span;
}
