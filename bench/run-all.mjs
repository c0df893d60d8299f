/**
 * Runs every benchmark in sequence, each in its own process, then rewrites the results
 * table: bench/results/summary.md (summary.tiny.md for the tiny size), and the table in bench/README.md after a full
 * run (a tiny run's figures mean nothing). Exits non-zero if any benchmark broke.
 *
 *   node bench/run-all.mjs [--size tiny|full] [--runs N] [--only a,b] [--table-only]
 *
 * `--runs` is passed on to every benchmark; without it each uses its own default (3 at
 * the full size, 1 for memory; 1 at the tiny size). `--table-only` runs nothing and only
 * rewrites the table from the result files already there.
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { BENCH_DIR } from './lib/processes.mjs';
import { RESULTS_DIR } from './lib/report.mjs';
import { resultsTable } from './lib/results-table.mjs';

const BENCHMARKS = ['cpu-efficiency', 'throughput', 'ingest', 'priority-latency', 'memory'];
const START = '<!-- results:start -->';
const END = '<!-- results:end -->';

const { values } = parseArgs({
  options: {
    size: { type: 'string', default: 'full' },
    runs: { type: 'string' },
    only: { type: 'string' },
    'table-only': { type: 'boolean', default: false },
  },
  strict: true,
});
if (values.size !== 'full' && values.size !== 'tiny') {
  console.error(`--size must be tiny or full, got ${JSON.stringify(values.size)}`);
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

function runOne(name) {
  const args = [join(BENCH_DIR, `${name}.mjs`), '--size', values.size];
  if (values.runs !== undefined) args.push('--runs', values.runs);
  return new Promise((resolve) => {
    current = spawn(process.execPath, args, { stdio: 'inherit' });
    current.once('exit', (code, signal) => {
      current = null;
      resolve(code ?? (signal === null ? 1 : 128));
    });
  });
}

const started = Date.now();
const outcomes = [];
for (const name of values['table-only'] ? [] : selected) {
  console.log(`\n=== ${name} (${values.size}) ===`);
  const t0 = Date.now();
  const code = await runOne(name);
  outcomes.push({ name, code, seconds: (Date.now() - t0) / 1000 });
}

const table = resultsTable(values.size);
writeFileSync(join(RESULTS_DIR, values.size === 'tiny' ? 'summary.tiny.md' : 'summary.md'), table);
if (values.size === 'full') {
  const readmePath = join(BENCH_DIR, 'README.md');
  const readme = readFileSync(readmePath, 'utf8');
  const from = readme.indexOf(START);
  const to = readme.indexOf(END);
  if (from >= 0 && to > from) {
    writeFileSync(readmePath, `${readme.slice(0, from + START.length)}\n${table}${readme.slice(to)}`);
    console.log('\nrewrote the results table in bench/README.md');
  }
}

console.log(`\n=== summary (${((Date.now() - started) / 1000).toFixed(1)} s) ===`);
for (const o of outcomes) console.log(`${o.code === 0 ? 'ok    ' : 'FAILED'} ${o.name} (${o.seconds.toFixed(1)} s)`);
console.log(`\n${table}`);
process.exitCode = outcomes.every((o) => o.code === 0) ? 0 : 1;
