/**
 * What every benchmark shares around its measurement: command-line options, the
 * machine description, run statistics, the printed table and the JSON result file.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { arch, availableParallelism, cpus, loadavg, platform, release, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { BENCH_DIR, hasTaskset, killAllChildren, ROOT_DIR } from './processes.mjs';

export const RESULTS_DIR = join(BENCH_DIR, 'results');

let measuredVersion = null;

/**
 * `--size tiny|full` (default full), `--runs N` (default: `defaultRuns[size]`),
 * `--cpu-prof` (write a CPU profile of each Kiln server to bench/results/profiles/), and,
 * where `threads` is true, `--threads N` (KILN_THREADS and the baselines' thread count;
 * default: the cores). A run with `--threads` writes a result file of its own (see
 * resultPath), so the default run and e.g. `--threads 1` are kept side by side.
 * `own`: parseArgs options of the one benchmark, answered as `own`.
 */
export function benchOptions(defaultRuns = { full: 3, tiny: 1 }, { threads: acceptsThreads = false, own = {} } = {}) {
  const { values } = parseArgs({
    options: {
      size: { type: 'string', default: 'full' },
      runs: { type: 'string' },
      'cpu-prof': { type: 'boolean', default: false },
      ...(acceptsThreads ? { threads: { type: 'string' } } : {}),
      ...own,
    },
    strict: true,
  });
  if (values.size !== 'full' && values.size !== 'tiny') {
    throw new Error(`--size must be tiny or full, got ${JSON.stringify(values.size)}`);
  }
  const runs = values.runs === undefined ? defaultRuns[values.size] : Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1 || runs > 50) {
    throw new Error(`--runs must be an integer from 1 to 50, got ${JSON.stringify(values.runs)}`);
  }
  const threads = values.threads === undefined ? availableParallelism() : Number(values.threads);
  if (!/^\d+$/.test(values.threads ?? '1') || !Number.isInteger(threads) || threads < 1 || threads > 256) {
    throw new Error(`--threads must be an integer from 1 to 256, got ${JSON.stringify(values.threads)}`);
  }
  // The source as the benchmark starts: others may commit while it runs.
  measuredVersion ??= kilnVersion();
  const cpuProf = values['cpu-prof'] ? join(RESULTS_DIR, 'profiles') : null;
  if (cpuProf !== null) mkdirSync(cpuProf, { recursive: true });
  return {
    size: values.size,
    tiny: values.size === 'tiny',
    runs,
    cpuProf,
    threads,
    variant: values.threads === undefined ? null : `threads-${threads}`,
    own: Object.fromEntries(Object.keys(own).map((name) => [name, values[name]])),
  };
}

/**
 * The Kiln source measured: the checkout's commit, the last commit that changed src/, and
 * whether src/ had uncommitted edits (others may work in this tree).
 */
export function kilnVersion() {
  const git = (...args) => spawnSync('git', args, { cwd: ROOT_DIR, encoding: 'utf8' });
  const commit = git('rev-parse', '--short', 'HEAD');
  const srcCommit = git('log', '-1', '--format=%h', '--', 'src');
  const status = git('status', '--porcelain', '--', 'src');
  return {
    commit: commit.status === 0 ? commit.stdout.trim() : 'unknown',
    srcCommit: srcCommit.status === 0 && srcCommit.stdout.trim() !== '' ? srcCommit.stdout.trim() : 'unknown',
    srcDirty: status.status === 0 ? status.stdout.trim() !== '' : null,
  };
}

export function machine() {
  const [first] = cpus();
  return {
    cores: availableParallelism(),
    cpuModel: first?.model ?? 'unknown',
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    os: `${platform()} ${release()} ${arch()}`,
    taskset: hasTaskset(),
    // Other work on a shared machine shows here: 1-minute load average when the result is written.
    loadAverage1m: Math.round(loadavg()[0] * 100) / 100,
  };
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

/** Median, min and max of the runs' values of one figure. */
export function summarize(values) {
  const finite = values.filter((v) => Number.isFinite(v));
  const sorted = [...finite].sort((a, b) => a - b);
  if (sorted.length === 0) return { median: null, min: null, max: null, n: 0 };
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  return { median, min: sorted[0], max: sorted.at(-1), n: sorted.length };
}

/** `1234 (1200–1300)`, or just the value for a single run. */
export function formatSummary(summary, digits = 0, unit = '') {
  if (summary.median === null) return 'n/a';
  const f = (v) =>
    `${v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })}${unit}`;
  if (summary.n < 2) return f(summary.median);
  return `${f(summary.median)} (${f(summary.min)}–${f(summary.max)})`;
}

/** Prints rows (arrays of strings) under a header, columns padded. */
export function printTable(title, header, rows) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => String(row[i] ?? '').length)));
  const line = (cells) => cells.map((c, i) => String(c ?? '').padEnd(widths[i])).join('  ');
  console.log(`\n${title}`);
  console.log(line(header));
  console.log(line(widths.map((w) => '-'.repeat(w))));
  for (const row of rows) console.log(line(row));
}

/**
 * The result file of a benchmark: bench/results/<name>.json, <name>.threads-1.json for a
 * run with `--threads 1` (the variant), and `.tiny` before `.json` for the tiny size.
 */
export function resultPath(name, size, variant = null) {
  const base = variant === null ? name : `${name}.${variant}`;
  return join(RESULTS_DIR, size === 'tiny' ? `${base}.tiny.json` : `${base}.json`);
}

/** Writes the result file (see resultPath; `data.variant` from benchOptions) and answers its path. */
export function writeResult(name, data) {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const path = resultPath(name, data.size, data.variant ?? null);
  writeFileSync(
    path,
    `${JSON.stringify({ benchmark: name, date: new Date().toISOString(), machine: machine(), kiln: measuredVersion ?? kilnVersion(), ...data }, null, 2)}\n`,
  );
  return path;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs a benchmark's body; on any error prints it, kills every child and exits 1, so a
 * broken benchmark fails CI even though no speed is asserted.
 */
export async function runBenchmark(name, body) {
  const started = Date.now();
  try {
    await body();
    console.log(`\n${name}: done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  } catch (error) {
    console.error(`\n${name}: FAILED: ${error?.stack ?? error}`);
    process.exitCode = 1;
  } finally {
    killAllChildren();
  }
}
