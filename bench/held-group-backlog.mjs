/**
 * Group limits, claim cost with a held group's backlog: each store (SQLite in memory, and
 * PostgreSQL: BENCH_PG_URL, else the local server) opened in this process from dist/,
 * 100,000 queued jobs of a group held back by its limit (its allowance 0, as the
 * dispatcher asks while the group is at its limit) and 10,000 of another group, then
 * claims of 2 until the other group's jobs are all taken, each claim timed alone: the
 * claim must pass over the held backlog without reading it. Two layouts:
 *
 * - ahead: the held backlog at priority 9, first in line; the other group's at 5;
 * - beside: both at priority 5, the other group's jobs taking turns with the held ones
 *   (fair share), so each job taken leaves one more held job before the next.
 *
 * Baseline, in the same run: the same jobs inserted in the same order, no limits, the
 * 100,000 at priority 0 (behind the others instead of held among or ahead of them).
 * Figures: µs per claim p50/p99, and the ratio of held to baseline.
 *
 *   node bench/held-group-backlog.mjs [--size tiny|full] [--runs N]
 */
import { backlogJob, claimStores, fillBacklog, measureStores, timedClaims } from './lib/claim-stores.mjs';
import { requirePostgres } from './lib/postgres.mjs';
import { benchOptions, formatSummary, percentile, printTable, runBenchmark, writeResult } from './lib/report.mjs';

const NAME = 'held-group-backlog';
const options = benchOptions({ full: 3, tiny: 1 });
const SIZES = { full: { held: 100_000, other: 10_000 }, tiny: { held: 2_000, other: 200 } };
const { held: HELD, other: OTHER } = SIZES[options.size];
const TYPE = 'bench.group';
const LIMITS = new Map([['tenant-held', { concurrency: 1, rateLimit: null }]]);

const job = (group, priority) => backlogJob(TYPE, priority, group);

/** Claims until the other group's jobs are all taken: none of the held group's may be. */
function claimAll(store, limited) {
  const extra = limited ? { groupAllowance: new Map([['tenant-held', 0]]), groupLimits: LIMITS, types: [TYPE] } : {};
  return timedClaims(store, OTHER, extra, (jobs) => {
    if (jobs.some((j) => j.group !== 'tenant-free')) throw new Error('a held job was claimed before the others');
  });
}

/** One layout: held jobs at `heldPriority`, the other group's at 5; and, if asked, the baseline. */
async function layout(open, close, heldPriority, baseline) {
  const heldStore = await open();
  let held;
  try {
    await fillBacklog(heldStore, HELD, () => job('tenant-held', heldPriority));
    await fillBacklog(heldStore, OTHER, () => job('tenant-free', 5));
    held = await claimAll(heldStore, true);
  } finally {
    await close(heldStore);
  }
  if (!baseline) return { held, plain: null };
  const plainStore = await open();
  let plain;
  try {
    await fillBacklog(plainStore, HELD, () => job('tenant-held', 0));
    await fillBacklog(plainStore, OTHER, () => job('tenant-free', 5));
    plain = await claimAll(plainStore, false);
  } finally {
    await close(plainStore);
  }
  return { held, plain };
}

async function measure(open, close) {
  const ahead = await layout(open, close, 9, true);
  const beside = await layout(open, close, 5, false);
  return {
    aheadP50: percentile(ahead.held.times, 50),
    aheadP99: percentile(ahead.held.times, 99),
    besideP50: percentile(beside.held.times, 50),
    besideP99: percentile(beside.held.times, 99),
    plainP50: percentile(ahead.plain.times, 50),
    plainP99: percentile(ahead.plain.times, 99),
  };
}

await runBenchmark(NAME, async () => {
  await requirePostgres();
  const stores = await claimStores('kiln_bench_groups');
  const { figures, runs } = await measureStores(
    stores,
    options.runs,
    measure,
    (r) => Math.max(r.aheadP50, r.besideP50) / r.plainP50,
  );
  printTable(
    `claim of 2, µs: ${HELD.toLocaleString('en-US')} jobs of a held group ahead of (priority 9) or beside (5) ${OTHER.toLocaleString('en-US')} of another, against the backlog behind them unlimited (median (min–max) of ${options.runs} run(s))`,
    [
      'store',
      'ahead p50',
      'ahead p99',
      'beside p50',
      'beside p99',
      'unlimited p50',
      'unlimited p99',
      'worse p50 ratio',
    ],
    Object.entries(figures).map(([name, f]) => [
      name,
      formatSummary(f.aheadP50),
      formatSummary(f.aheadP99),
      formatSummary(f.besideP50),
      formatSummary(f.besideP99),
      formatSummary(f.plainP50),
      formatSummary(f.plainP99),
      formatSummary(f.ratioP50, 2),
    ]),
  );
  const path = writeResult(NAME, { size: options.size, parameters: { held: HELD, other: OTHER }, figures, runs });
  console.log(`wrote ${path}`);
});
