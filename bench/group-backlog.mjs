/**
 * Fair share, claim cost with many groups: each store (SQLite in memory, and PostgreSQL:
 * BENCH_PG_URL, else the local server) opened in this process from dist/, a backlog of
 * 100,000 queued jobs at one priority, each of its own group (100,000 groups taking
 * turns), then claims of 2 jobs until 10,000 are taken, each claim timed alone.
 * Baseline, in the same run: the same jobs without a group (one line, plain FIFO).
 * Figures: µs per claim p50/p99, and the ratio of grouped to ungrouped.
 *
 *   node bench/group-backlog.mjs [--size tiny|full] [--runs N]
 */
import { backlogJob, claimStores, fillBacklog, measureStores, timedClaims } from './lib/claim-stores.mjs';
import { requirePostgres } from './lib/postgres.mjs';
import { benchOptions, formatSummary, percentile, printTable, runBenchmark, writeResult } from './lib/report.mjs';

const NAME = 'group-backlog';
const options = benchOptions({ full: 3, tiny: 1 });
const SIZES = { full: { backlog: 100_000, taken: 10_000 }, tiny: { backlog: 2_000, taken: 200 } };
const { backlog: BACKLOG, taken: TAKEN } = SIZES[options.size];

/** `grouped`: every job a group of its own; else none has a group. */
function fill(store, grouped, n) {
  return fillBacklog(store, n, (i) => backlogJob('bench.group', 5, grouped ? `tenant-${i}` : null));
}

/** Claims 2 at a time until TAKEN jobs are taken; answers µs per claim. */
function claimSome(store) {
  return timedClaims(store, TAKEN);
}

async function measure(open, close) {
  const run = async (grouped) => {
    const store = await open();
    try {
      await fill(store, grouped, BACKLOG);
      return await claimSome(store);
    } finally {
      await close(store);
    }
  };
  const grouped = await run(true);
  const plain = await run(false);
  return {
    groupedP50: percentile(grouped.times, 50),
    groupedP99: percentile(grouped.times, 99),
    plainP50: percentile(plain.times, 50),
    plainP99: percentile(plain.times, 99),
  };
}

await runBenchmark(NAME, async () => {
  await requirePostgres();
  const stores = await claimStores('kiln_bench_groups');
  const { figures, runs } = await measureStores(stores, options.runs, measure, (r) => r.groupedP50 / r.plainP50);
  printTable(
    `claim of 2, µs: ${BACKLOG.toLocaleString('en-US')} queued jobs in as many groups, against the same jobs without groups (median (min–max) of ${options.runs} run(s))`,
    ['store', 'grouped p50', 'grouped p99', 'ungrouped p50', 'ungrouped p99', 'p50 ratio'],
    Object.entries(figures).map(([name, f]) => [
      name,
      formatSummary(f.groupedP50),
      formatSummary(f.groupedP99),
      formatSummary(f.plainP50),
      formatSummary(f.plainP99),
      formatSummary(f.ratioP50, 2),
    ]),
  );
  const path = writeResult(NAME, { size: options.size, parameters: { backlog: BACKLOG, taken: TAKEN }, figures, runs });
  console.log(`wrote ${path}`);
});
