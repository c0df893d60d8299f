/**
 * Task limits, claim cost with a limited backlog: each store (SQLite in memory, and
 * PostgreSQL: BENCH_PG_URL, else the local server) opened in this process from dist/, a backlog of 100,000
 * queued jobs of a type held back by its limit (priority 9, first in line) and 10,000 of
 * another type behind them (priority 5). Then claims of 2 jobs with the held type's
 * allowance at 0 (as the dispatcher asks while the type is at its limit) until the other
 * type's jobs are all taken, each claim timed alone: the claim must pass over the held
 * backlog without reading it. Baseline, in the same run: the same jobs inserted in the
 * same order, no limits, the 100,000 at priority 0 (behind the others instead of held
 * ahead of them), so both runs claim the same jobs from a table of the same size (on
 * SQLite: with the same ready-index copies, which the first 90,000 or so jobs use up).
 * Figures: µs per claim p50/p99, and the ratio of limited to baseline.
 *
 *   node bench/limited-backlog.mjs [--size tiny|full] [--runs N]
 */
import { backlogJob, claimStores, fillBacklog, measureStores, timedClaims } from './lib/claim-stores.mjs';
import { requirePostgres } from './lib/postgres.mjs';
import { benchOptions, formatSummary, percentile, printTable, runBenchmark, writeResult } from './lib/report.mjs';

const NAME = 'limited-backlog';
const options = benchOptions({ full: 3, tiny: 1 });
const SIZES = { full: { held: 100_000, other: 10_000 }, tiny: { held: 2_000, other: 200 } };
const { held: HELD, other: OTHER } = SIZES[options.size];
const LIMITS = new Map([['bench.held', { concurrency: 1, rateLimit: null }]]);
const TYPES = ['bench.held', 'bench.other'];

const job = (type, priority) => backlogJob(type, priority);

function fill(store, type, priority, n) {
  return fillBacklog(store, n, () => job(type, priority));
}

/** Claims until the other type's jobs are all taken: none of the held type's may be. */
function claimAll(store, limited) {
  const extra = limited ? { allowance: new Map([['bench.held', 0]]), limits: LIMITS, types: TYPES } : {};
  return timedClaims(store, OTHER, extra, (jobs) => {
    if (jobs.some((j) => j.type !== 'bench.other')) throw new Error('a backlog job was claimed before the others');
  });
}

async function measure(open, close) {
  const limitedStore = await open();
  let limited;
  try {
    await fill(limitedStore, 'bench.held', 9, HELD);
    await fill(limitedStore, 'bench.other', 5, OTHER);
    limited = await claimAll(limitedStore, true);
  } finally {
    await close(limitedStore);
  }
  const plainStore = await open();
  let plain;
  try {
    // The same jobs in the same order, the backlog at priority 0 behind the others
    // instead of held ahead of them: what the claims cost without a limit to pass over.
    await fill(plainStore, 'bench.held', 0, HELD);
    await fill(plainStore, 'bench.other', 5, OTHER);
    plain = await claimAll(plainStore, false);
  } finally {
    await close(plainStore);
  }
  if (limited.taken !== OTHER || plain.taken !== OTHER) {
    throw new Error(`claimed ${limited.taken} and ${plain.taken} of ${OTHER}`);
  }
  return {
    limitedP50: percentile(limited.times, 50),
    limitedP99: percentile(limited.times, 99),
    plainP50: percentile(plain.times, 50),
    plainP99: percentile(plain.times, 99),
  };
}

await runBenchmark(NAME, async () => {
  await requirePostgres();
  const stores = await claimStores('kiln_bench_limits');
  const { figures, runs } = await measureStores(stores, options.runs, measure, (r) => r.limitedP50 / r.plainP50);
  printTable(
    `claim of 2, µs: ${HELD.toLocaleString('en-US')} held jobs ahead of ${OTHER.toLocaleString('en-US')} others, against the backlog behind them unlimited (median (min–max) of ${options.runs} run(s))`,
    ['store', 'limited p50', 'limited p99', 'unlimited p50', 'unlimited p99', 'p50 ratio'],
    Object.entries(figures).map(([name, f]) => [
      name,
      formatSummary(f.limitedP50),
      formatSummary(f.limitedP99),
      formatSummary(f.plainP50),
      formatSummary(f.plainP99),
      formatSummary(f.ratioP50, 2),
    ]),
  );
  const path = writeResult(NAME, { size: options.size, parameters: { held: HELD, other: OTHER }, figures, runs });
  console.log(`wrote ${path}`);
});
