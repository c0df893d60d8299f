/**
 * Runs every benchmark in sequence, each in its own process: first with KILN_THREADS =
 * cores (the pg-* ones need PostgreSQL: BENCH_PG_URL, else the local server), then the
 * ones where the thread count matters (cpu-efficiency, throughput, priority-latency,
 * main-thread-cost) again with `--threads 1`. Then rewrites the results tables:
 * bench/results/summary.md (summary.tiny.md for the tiny size), and after a full run (a
 * tiny run's figures mean nothing) the sections of bench/README.md between the `results`
 * markers and between the `pg-results` markers, each only when bench/results holds result
 * files for it. Exits non-zero if any benchmark broke.
 *
 *   node bench/run-all.mjs [--size tiny|full] [--runs N] [--only a,b] [--threads all|cores|1] [--table-only]
 *
 * `--runs` is passed on to every benchmark; without it each uses its own default (3 at
 * the full size, 5 for ready-index-structures, 1 for memory and pg-bloat; 1 at the tiny size). `--threads cores` or `--threads 1`
 * runs only that pass (default: all, both). `--table-only` runs nothing and only
 * rewrites the tables from the result files already there.
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { BENCH_DIR } from './lib/processes.mjs';
import { RESULTS_DIR } from './lib/report.mjs';
import { postgresResultsTable, resultsTable } from './lib/results-table.mjs';

const BENCHMARKS = [
  'cpu-efficiency',
  'throughput',
  'ingest',
  'priority-latency',
  'mixed-durations',
  'status-poll',
  'memory',
  'main-thread-cost',
  'dispatch-ceiling',
  'pg-throughput',
  'pg-cluster',
  'pg-claim-latency',
  'pg-bloat',
  'pg-finished-table',
  'limited-backlog',
  'group-backlog',
  'held-group-backlog',
  'pg-dependents',
  'ready-index-structures',
];
// The benchmarks whose figures depend on KILN_THREADS, run a second time with --threads 1.
const BY_THREADS = ['cpu-efficiency', 'throughput', 'priority-latency', 'main-thread-cost'];
// The sections of bench/README.md that a full run rewrites, each from its own result files.
const SECTIONS = [
  { name: 'results', table: resultsTable },
  { name: 'pg-results', table: postgresResultsTable },
];

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: 'full' },
    runs: { type: 'string' },
    only: { type: 'string' },
    threads: { type: 'string', default: 'all' },
    'table-only': { type: 'boolean', default: false },
  },
  strict: true,
});
if (values.size !== 'full' && values.size !== 'tiny') {
  console.error(`--size must be tiny or full, got ${JSON.stringify(values.size)}`);
  process.exit(2);
}
if (!['all', 'cores', '1'].includes(values.threads)) {
  console.error(`--threads must be all, cores or 1, got ${JSON.stringify(values.threads)}`);
  process.exit(2);
}
const selected = values.only === undefined ? BENCHMARKS : values.only.split(',').map((s) => s.trim());
const unknown = selected.filter((name) => !BENCHMARKS.includes(name));
if (unknown.length > 0) {
  console.error(`unknown benchmark(s): ${unknown.join(', ')}; known: ${BENCHMARKS.join(', ')}`);
  process.exit(2);
}

let current = null;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    current?.kill('SIGTERM');
    process.exit(130);
  });
}

function runOne(name, threads) {
  const args = [join(BENCH_DIR, `${name}.mjs`), '--size', values.size];
  if (values.runs !== undefined) args.push('--runs', values.runs);
  if (threads !== null) args.push('--threads', String(threads));
  return new Promise((resolve) => {
    current = spawn(process.execPath, args, { stdio: 'inherit' });
    current.once('exit', (code, signal) => {
      current = null;
      resolve(code ?? (signal === null ? 1 : 128));
    });
  });
}

const passes = [];
if (values.threads !== '1') passes.push(...selected.map((name) => ({ name, threads: null })));
if (values.threads !== 'cores') {
  if (availableParallelism() === 1 && values.threads === 'all') {
    console.log('one core: the KILN_THREADS=1 pass would repeat the first; skipped');
  } else {
    passes.push(...selected.filter((name) => BY_THREADS.includes(name)).map((name) => ({ name, threads: 1 })));
  }
}

const started = Date.now();
const outcomes = [];
for (const { name, threads } of values['table-only'] ? [] : passes) {
  const label = threads === null ? name : `${name} --threads ${threads}`;
  console.log(`\n=== ${label} (${values.size}) ===`);
  const t0 = Date.now();
  const code = await runOne(name, threads);
  outcomes.push({ name: label, code, seconds: (Date.now() - t0) / 1000 });
}

const tables = SECTIONS.map((section) => ({ ...section, text: section.table(values.size) }));
const table = tables.flatMap(({ text }) => (text === null ? [] : [text])).join('\n');
writeFileSync(join(RESULTS_DIR, values.size === 'tiny' ? 'summary.tiny.md' : 'summary.md'), table);
if (values.size === 'full') {
  const readmePath = join(BENCH_DIR, 'README.md');
  let readme = readFileSync(readmePath, 'utf8');
  for (const { name, text } of tables) {
    // A section without any result file here is left as it is.
    if (text === null) continue;
    const start = `<!-- ${name}:start -->`;
    const from = readme.indexOf(start);
    const to = readme.indexOf(`<!-- ${name}:end -->`);
    if (from < 0 || to <= from) continue;
    readme = `${readme.slice(0, from + start.length)}\n${text}${readme.slice(to)}`;
    console.log(`\nrewrote the ${name} section of bench/README.md`);
  }
  writeFileSync(readmePath, readme);
}

console.log(`\n=== summary (${((Date.now() - started) / 1000).toFixed(1)} s) ===`);
for (const o of outcomes) console.log(`${o.code === 0 ? 'ok    ' : 'FAILED'} ${o.name} (${o.seconds.toFixed(1)} s)`);
console.log(`\n${table}`);
process.exitCode = outcomes.every((o) => o.code === 0) ? 0 : 1;
