/**
 * The CPU budget per job, kept by CI: CPU time, not wall time, that a Kiln server spends
 * per job on fixed workloads, measured in the same run for this checkout and for the
 * budget's baseline commit (bench/cpu-budget.json), and judged as the ratio of the two.
 *
 * The workloads (lib/cpu-workloads.mjs) are fixed in what the server sees at a time, not
 * only in size, since how many jobs share an event-loop turn and a commit decides what
 * each costs: batches of 100 with 8 in flight; single POSTs in waves of 16 pipelined on
 * one connection, with dispatch paused while they are submitted (each wave is one turn and
 * one commit, whatever the machine's load), then run; 5 ms jobs in batches. Each is read
 * per kind of thread:
 *   - main:    the main thread (HTTP, scheduling, events, metrics);
 *   - rest:    every other thread but the workers: the SQLite store thread, V8's GC and
 *              compiler helpers, libuv's pool;
 *   - workers: the worker threads;
 *   - outside: the cost of a job outside its handler: main + rest + workers for noop jobs
 *              (whose handler does nothing, so the workers' time is the pool's own
 *              messaging); main + rest for jobs whose handler works (a 5 ms cpu.spin).
 *
 * Why a baseline and not absolute figures: µs on a core differ by tens of percent from one
 * machine to another, and on one shared machine from one minute to the next, far more than
 * the regressions the budget is for. Both builds are measured in pairs, one right after
 * the other, the order alternating, so that both see the same machine; a figure is judged
 * by the median over the pairs of checkout ÷ baseline. It is over when that median is
 * above the figure's allowance (1 unless raised in the file) by more than the margin (see
 * bench/README.md for how the margin was chosen). A workload over in a first set of pairs
 * is measured again, and is over only when over again.
 *
 *   node bench/cpu-budget.mjs [--check] [--runs N] [--only a,b] [--baseline REV]
 *   node bench/cpu-budget.mjs --update [--allow-dirty] [--runs N]
 *
 * --check exits 1 when a figure is over (or PostgreSQL is missing under CI=true, or the
 * baseline cannot be built), 3 when a workload's runs were invalid (its waves not
 * committed as the workload fixes them, twice). --baseline measures against another
 * commit than the file's (a before/after of a change: --baseline HEAD with the change
 * uncommitted). --update makes HEAD the baseline, clears the allowances, and writes what
 * this checkout read as reference figures (for reading only; nothing is judged on them);
 * it refuses uncommitted src/ or bench/ changes unless --allow-dirty. A change that must
 * cost more raises its figure's allowance in `allowed` in the same commit, and says why.
 * An unknown name in --only exits 2.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { buildCommit, resolveCommit } from './lib/baseline-checkout.mjs';
import { COMMIT_TOLERANCE, measureOnce, THREADS, WORKLOADS } from './lib/cpu-workloads.mjs';
import { requirePostgres } from './lib/postgres.mjs';
import { BENCH_DIR, KILN_MAIN, ROOT_DIR } from './lib/processes.mjs';
import { formatSummary, machine, printTable, summarize, writeResult } from './lib/report.mjs';

const NAME = 'cpu-budget';
const BUDGET_FILE = join(BENCH_DIR, 'cpu-budget.json');
const KEYS = ['mainUs', 'restUs', 'outsideUs'];
const LABELS = { mainUs: 'main', restUs: 'rest', outsideUs: 'outside' };

/**
 * The checkout measured: HEAD, the last commits that changed src/ and bench/, and whether
 * either has uncommitted changes (bench/cpu-budget.json itself aside, which --update writes).
 */
function checkout() {
  const git = (...args) => spawnSync('git', args, { cwd: ROOT_DIR, encoding: 'utf8' });
  const last = (dir) => {
    const log = git('log', '-1', '--format=%h', '--', dir);
    return log.status === 0 && log.stdout.trim() !== '' ? log.stdout.trim() : 'unknown';
  };
  const dirty = (...paths) => {
    const status = git('status', '--porcelain', '--', ...paths);
    return status.status === 0 ? status.stdout.trim() !== '' : null;
  };
  const head = git('rev-parse', 'HEAD');
  return {
    commit: head.status === 0 ? head.stdout.trim() : 'unknown',
    srcCommit: last('src'),
    srcDirty: dirty('src'),
    benchCommit: last('bench'),
    benchDirty: dirty('bench', ':(exclude)bench/cpu-budget.json'),
  };
}

const { values } = parseArgs({
  options: {
    check: { type: 'boolean', default: false },
    update: { type: 'boolean', default: false },
    'allow-dirty': { type: 'boolean', default: false },
    runs: { type: 'string', default: '5' },
    only: { type: 'string' },
    baseline: { type: 'string' },
  },
  strict: true,
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a positive integer, got ${values.runs}`);
const only = values.only?.split(',') ?? null;
const unknown = only?.filter((name) => !WORKLOADS.some((w) => w.name === name)) ?? [];
if (unknown.length > 0) {
  console.error(
    `${NAME}: unknown workload ${unknown.join(', ') || '(none named)'} in --only; the workloads are: ${WORKLOADS.map((w) => w.name).join(', ')}`,
  );
  process.exit(2);
}
const version = checkout();
if (values.update && !values['allow-dirty'] && (version.srcDirty !== false || version.benchDirty !== false)) {
  console.error(
    `${NAME}: src/ or bench/ has uncommitted changes (or git could not tell), so HEAD would not be what was measured; commit them first, or pass --allow-dirty (recorded in the file)`,
  );
  process.exit(2);
}
if (process.platform !== 'linux') {
  console.log(`${NAME}: needs Linux's per-thread accounting (/proc/<pid>/task); nothing measured`);
  process.exit(values.check && process.env.CI === 'true' ? 1 : 0);
}
let workloads = WORKLOADS.filter((w) => only === null || only.includes(w.name));
if (workloads.some((w) => w.store === 'postgres')) {
  const missing = await requirePostgres().then(
    () => null,
    (error) => error,
  );
  if (missing !== null) {
    if (process.env.CI === 'true') throw missing;
    console.log(`${NAME}: PostgreSQL is not reachable (${missing.message}); its workloads are left out`);
    workloads = workloads.filter((w) => w.store !== 'postgres');
  }
}

const budget = JSON.parse(readFileSync(BUDGET_FILE, 'utf8'));
// Before this script's own servers add to it.
const loadBefore = Math.round(loadavg()[0] * 100) / 100;
// --update measures this checkout alone; every other mode measures it beside the baseline.
let baseline = null;
if (!values.update) {
  const rev = values.baseline ?? budget.baseline;
  try {
    console.log(`${NAME}: building the baseline ${rev} beside this checkout`);
    baseline = buildCommit(rev);
  } catch (error) {
    console.error(`${NAME}: the baseline ${rev} could not be built: ${error.message}`);
    process.exit(1);
  }
}
console.log(
  `${NAME}: ${workloads.length} workloads, ${runs} run(s) each${baseline === null ? '' : `, each beside the baseline ${baseline.commit.slice(0, 12)}`}, ${THREADS} worker threads; 1-minute load average ${loadBefore}`,
);

const within = (value, expected) => value >= expected.min && value <= expected.max;
/** Why a run is invalid (its waves not committed as its workload fixes them), or null. */
function invalidRun(workload, figures) {
  if (workload.waveJobsPerCommit === undefined) return null;
  const fixed = {
    min: workload.waveJobsPerCommit * (1 - COMMIT_TOLERANCE),
    max: workload.waveJobsPerCommit * (1 + COMMIT_TOLERANCE),
  };
  if (within(figures.waveJobsPerCommit, fixed)) return null;
  return `${figures.waveJobsPerCommit.toFixed(1)} jobs per commit while the waves were submitted, not ${workload.waveJobsPerCommit} ± ${COMMIT_TOLERANCE * 100} %`;
}

const print = (run, side, workload, f) =>
  console.log(
    `  run ${run}, ${workload.name}, ${side}: main ${f.mainUs.toFixed(1)} µs/job, rest ${f.restUs.toFixed(1)}, workers ${f.workersUs.toFixed(1)}, outside the handler ${f.outsideUs.toFixed(1)} (${f.jobsPerSecond.toFixed(0)} jobs/s, ${f.jobsPerCommit.toFixed(1)} jobs per commit${f.waveJobsPerCommit === undefined ? '' : `, ${f.waveJobsPerCommit.toFixed(1)} while the waves were submitted`}); wake-ups per 100 jobs: main ${f.mainWakesPer100.toFixed(1)}, workers ${f.workerWakesPer100.toFixed(1)}`,
  );

/**
 * One run of a workload: this checkout, and the baseline right before or after it (the
 * order alternating with `run`), or this checkout alone without a baseline. Answers
 * `{ checkout, baseline }` or `{ invalid }`.
 */
async function measurePair(run, label, workload) {
  const sides = [['checkout', KILN_MAIN]];
  if (baseline !== null) sides[run % 2 === 0 ? 'unshift' : 'push'](['baseline', baseline.main]);
  const pair = {};
  for (const [side, main] of sides) {
    const figures = await measureOnce(workload, main);
    print(`${label}${run}`, side, workload, figures);
    const reason = invalidRun(workload, figures);
    if (reason !== null) return { invalid: `${side}: ${reason}` };
    pair[side] = figures;
  }
  return pair;
}

/**
 * `runs` pairs of each workload in `list`, taking turns. A workload gets one pair again per
 * set when a run is invalid; a second invalid run makes the workload invalid (not judged),
 * and its remaining runs are skipped.
 */
async function measureSet(list, label = '') {
  const samples = new Map(list.map((w) => [w.name, []]));
  const retried = new Set();
  const invalid = new Map();
  for (let run = 1; run <= runs; run++) {
    for (const workload of list) {
      if (invalid.has(workload.name)) continue;
      let pair = await measurePair(run, label, workload);
      if (pair.invalid !== undefined && !retried.has(workload.name)) {
        retried.add(workload.name);
        console.log(`  run ${label}${run}, ${workload.name}: INVALID (${pair.invalid}); measured again`);
        pair = await measurePair(run, label, workload);
      }
      if (pair.invalid !== undefined) {
        invalid.set(workload.name, pair.invalid);
        console.log(`  run ${label}${run}, ${workload.name}: INVALID (${pair.invalid}); not judged`);
        continue;
      }
      samples.get(workload.name).push(pair);
    }
  }
  return { samples, invalid };
}

const FIGURES = [...KEYS, 'workersUs', 'jobsPerSecond', 'jobsPerCommit', 'mainWakesPer100', 'workerWakesPer100'];
// A workload may have a margin of its own (`margins`), chosen from its own spread.
const marginFor = (name) => budget.margins?.[name] ?? budget.margin;
const allowedFor = (name, key) => budget.allowed?.[name]?.[key] ?? 1;
const limitFor = (name, key) => allowedFor(name, key) * (1 + marginFor(name));

/**
 * Each workload's medians over a set (this checkout's, the baseline's, and the ratios of
 * the pairs), and what in them is over (by workload).
 */
function judge(list, { samples, invalid }) {
  const over = new Map();
  const figures = list.map((workload) => {
    const pairs = samples.get(workload.name);
    const medians = (side) =>
      Object.fromEntries(FIGURES.map((key) => [key, summarize(pairs.map((p) => p[side][key]))]));
    const checkoutMedians = medians('checkout');
    const judged = workload.judged ?? KEYS;
    const valid = !invalid.has(workload.name);
    const result = { workload: workload.name, judged, checkout: checkoutMedians };
    if (!valid) result.invalid = invalid.get(workload.name);
    if (baseline === null) return result;
    result.baseline = medians('baseline');
    result.ratio = Object.fromEntries(
      KEYS.map((key) => [key, summarize(pairs.map((p) => p.checkout[key] / p.baseline[key]))]),
    );
    const mine = [];
    for (const key of valid ? judged : []) {
      const ratio = result.ratio[key].median;
      const limit = limitFor(workload.name, key);
      if (ratio > limit) {
        mine.push(
          `${workload.name} ${LABELS[key]}: ${ratio.toFixed(3)}× the baseline (${result.checkout[key].median.toFixed(1)} against ${result.baseline[key].median.toFixed(1)} µs/job), over ${allowedFor(workload.name, key)} × ${1 + marginFor(workload.name)} = ${limit.toFixed(3)}`,
        );
      }
    }
    if (mine.length > 0) over.set(workload.name, mine);
    return result;
  });
  return { figures, over };
}

/**
 * `checkout / baseline µs = ratio (min–max)` for a judged figure, with ` OVER` past its
 * limit; `not judged` after a figure the workload is not judged on.
 */
const cell = (f, key) => {
  const checkoutUs = formatSummary({ ...f.checkout[key], n: 1 }, 1);
  if (f.ratio === undefined) return formatSummary(f.checkout[key], 1);
  const ratio = formatSummary(f.ratio[key], 3);
  const text = `${checkoutUs} / ${formatSummary({ ...f.baseline[key], n: 1 }, 1)} = ${ratio}`;
  if (f.invalid !== undefined) return `${text}, invalid`;
  if (!f.judged.includes(key)) return `${text}, not judged`;
  return `${text}${f.ratio[key].median > limitFor(f.workload, key) ? ' OVER' : ''}`;
};
const table = (figures, title) =>
  printTable(
    baseline === null
      ? `${title}CPU per job, µs on a core: median (min–max) of the runs of this checkout`
      : `${title}CPU per job, µs on a core: this checkout's median / the baseline's = the median ratio of the pairs (min–max); over when above the figure's allowance × (1 + ${budget.margin}, or its workload's own margin)`,
    ['workload', 'main', 'rest', 'outside the handler', 'jobs/s', 'jobs per commit', 'wake-ups /100 (main)'],
    figures.map((f) => {
      const both = (key, digits) =>
        f.baseline === undefined
          ? formatSummary(f.checkout[key], digits)
          : `${formatSummary({ ...f.checkout[key], n: 1 }, digits)} / ${formatSummary({ ...f.baseline[key], n: 1 }, digits)}`;
      return [
        f.workload,
        cell(f, 'mainUs'),
        cell(f, 'restUs'),
        cell(f, 'outsideUs'),
        both('jobsPerSecond', 0),
        both('jobsPerCommit', 1),
        both('mainWakesPer100', 1),
      ];
    }),
  );

const first = await measureSet(workloads);
const { figures, over } = judge(workloads, first);
table(figures, '');
const invalid = first.invalid;
let again = null;
// A workload over its budget is measured again, as many pairs, before it is called over: a
// change that costs more does so in both sets, while a machine that slows for a few
// minutes seldom slows one build of a pair and not the other in both.
if (values.check && over.size > 0) {
  const suspect = workloads.filter((w) => over.has(w.name));
  console.log(
    `\n${NAME}: over in the first set: ${suspect.map((w) => w.name).join(', ')}; measured again (${runs} run(s) each), and over only if over again`,
  );
  const second = await measureSet(suspect, 'again ');
  for (const [name, reason] of second.invalid) invalid.set(name, reason);
  again = judge(suspect, second);
  table(again.figures, 'Measured again. ');
  for (const w of suspect) {
    if (again.over.has(w.name))
      over.set(w.name, [...over.get(w.name), ...again.over.get(w.name).map((r) => `again, ${r}`)]);
    else over.delete(w.name);
  }
}
writeResult(NAME, {
  name: NAME,
  runs,
  threads: THREADS,
  baseline: baseline?.commit ?? null,
  figures,
  ...(again === null ? {} : { again: again.figures }),
});

if (values.update) {
  // The reference figures are what this machine read, kept for reading beside the baseline.
  const measured = {
    date: new Date().toISOString(),
    ...version,
    runs,
    loadAverage1mBefore: loadBefore,
    loadAverage1mAfter: machine().loadAverage1m,
    cpu: machine().cpuModel,
  };
  const reference = Object.fromEntries(
    figures.map((f) => [
      f.workload,
      Object.fromEntries([...KEYS, 'jobsPerCommit'].map((key) => [key, Math.round(f.checkout[key].median * 10) / 10])),
    ]),
  );
  const updated = {
    baseline: resolveCommit('HEAD'),
    margin: budget.margin,
    ...(budget.margins === undefined ? {} : { margins: budget.margins }),
    allowed: {},
    reference: { measured, figures: only === null ? reference : { ...budget.reference?.figures, ...reference } },
  };
  writeFileSync(BUDGET_FILE, `${JSON.stringify(updated, null, 2)}\n`);
  console.log(`${NAME}: the baseline is now HEAD (${updated.baseline.slice(0, 12)}), written to ${BUDGET_FILE}`);
  if (loadBefore > availableParallelism()) {
    console.warn(
      `${NAME}: the machine was loaded (1-minute load average ${loadBefore} before the first run, on ${availableParallelism()} cores); the reference figures read high`,
    );
  }
}
if (values.check) {
  if (over.size > 0) console.error(`\n${NAME}: FAILED, over budget:\n  ${[...over.values()].flat().join('\n  ')}`);
  if (invalid.size > 0) {
    console.error(
      `\n${NAME}: not judged, invalid runs:\n  ${[...invalid].map(([name, reason]) => `${name}: ${reason}`).join('\n  ')}`,
    );
  }
  if (over.size > 0) process.exit(1);
  if (invalid.size > 0) process.exit(3);
  console.log(`\n${NAME}: every judged figure within its allowance × (1 + its margin) of the baseline`);
}
