/**
 * Before and after on the same machine: runs benchmarks in two checkouts of Kiln, one
 * run at a time, alternating (before, after, before, after, …), so that a noisy machine
 * disturbs both sides alike, and prints each figure's median for both sides with the
 * ratio after ÷ before and the spread of each side (min–max over its runs).
 *
 *   node bench/compare.mjs --before ../kiln-old --after . --only throughput,ingest [--rounds 3] [--size full|tiny] [--threads N]
 *
 * Each checkout must be built (`npm run build`) and have bench/node_modules. Each run is
 * that checkout's own bench/<name>.mjs with `--runs 1`, so each side is measured by its
 * own harness against its own dist/; the figures are the `figures.*.median` of the result
 * file the run writes. The table is also written to bench/results/compare.md.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { RESULTS_DIR } from './lib/report.mjs';

const { values } = parseArgs({
  options: {
    before: { type: 'string' },
    after: { type: 'string', default: '.' },
    only: { type: 'string' },
    rounds: { type: 'string', default: '3' },
    size: { type: 'string', default: 'full' },
    threads: { type: 'string' },
  },
  strict: true,
});
if (values.before === undefined || values.only === undefined) {
  console.error('usage: node bench/compare.mjs --before DIR [--after DIR] --only a,b [--rounds N] [--size full|tiny]');
  process.exit(2);
}
const rounds = Number(values.rounds);
if (!Number.isInteger(rounds) || rounds < 1 || rounds > 20) {
  console.error(`--rounds must be an integer from 1 to 20, got ${JSON.stringify(values.rounds)}`);
  process.exit(2);
}
const sides = { before: resolve(values.before), after: resolve(values.after) };
const names = values.only.split(',').map((name) => name.trim());

function run(checkout, name) {
  const args = [join(checkout, 'bench', `${name}.mjs`), '--size', values.size, '--runs', '1'];
  if (values.threads !== undefined) args.push('--threads', values.threads);
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, args, { cwd: checkout, stdio: ['ignore', 'ignore', 'inherit'] });
    child.once('error', fail);
    child.once('exit', (code) => (code === 0 ? done() : fail(new Error(`${name} in ${checkout} exited with ${code}`))));
  });
}

function resultFile(checkout, name) {
  const variant = values.threads === undefined ? '' : `.threads-${values.threads}`;
  const size = values.size === 'tiny' ? '.tiny' : '';
  return join(checkout, 'bench', 'results', `${name}${variant}${size}.json`);
}

/** The numeric figures of one result file, flattened: `a.b` for figures.a.b.median. */
function figuresOf(result) {
  const out = {};
  const walk = (node, path) => {
    if (node === null || typeof node !== 'object') return;
    if (typeof node.median === 'number') {
      out[path] = node.median;
      return;
    }
    for (const [key, child] of Object.entries(node)) walk(child, path === '' ? key : `${path}.${key}`);
  };
  walk(result.figures ?? {}, '');
  return out;
}

const median = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const fmt = (x) => (Math.abs(x) >= 100 ? Math.round(x).toLocaleString('en-US') : x.toPrecision(3));

const samples = {};
for (const name of names) {
  samples[name] = { before: [], after: [] };
  for (let round = 1; round <= rounds; round++) {
    for (const side of round % 2 === 1 ? ['before', 'after'] : ['after', 'before']) {
      process.stderr.write(`${name}: round ${round} of ${rounds}, ${side}\n`);
      await run(sides[side], name);
      samples[name][side].push(figuresOf(JSON.parse(readFileSync(resultFile(sides[side], name), 'utf8'))));
    }
  }
}

const lines = [
  `Before: ${sides.before}; after: ${sides.after}; ${rounds} alternating run(s) of each, size ${values.size}` +
    `${values.threads === undefined ? '' : `, --threads ${values.threads}`}; median (min–max).`,
  '',
  '| benchmark | figure | before | after | after ÷ before |',
  '|---|---|---|---|---|',
];
for (const name of names) {
  const keys = Object.keys(samples[name].after[0] ?? {}).filter((key) => key in (samples[name].before[0] ?? {}));
  for (const key of keys) {
    const side = (which) => samples[name][which].map((figures) => figures[key]).filter(Number.isFinite);
    const [b, a] = [side('before'), side('after')];
    if (b.length === 0 || a.length === 0) continue;
    const cell = (xs) => `${fmt(median(xs))} (${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))})`;
    const ratio = median(b) === 0 ? '—' : (median(a) / median(b)).toFixed(2);
    lines.push(`| ${name} | ${key} | ${cell(b)} | ${cell(a)} | ${ratio} |`);
  }
}
const table = `${lines.join('\n')}\n`;
mkdirSync(RESULTS_DIR, { recursive: true });
writeFileSync(join(RESULTS_DIR, 'compare.md'), table);
console.log(table);
