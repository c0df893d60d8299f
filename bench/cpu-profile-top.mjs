/**
 * Summarizes a `node --cpu-prof` profile (e.g. one a benchmark wrote with --cpu-prof to
 * bench/results/profiles/): the functions with the most self time, and the share of
 * time the main thread was idle (waiting on I/O or timers).
 *
 *   node bench/cpu-profile-top.mjs <file.cpuprofile> [--top N]
 */
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { parseArgs } from 'node:util';
import { ROOT_DIR } from './lib/processes.mjs';

const { values, positionals } = parseArgs({
  options: { top: { type: 'string', default: '25' } },
  allowPositionals: true,
  strict: true,
});
if (positionals.length !== 1) {
  console.error('usage: node bench/cpu-profile-top.mjs <file.cpuprofile> [--top N]');
  process.exit(2);
}
const profile = JSON.parse(readFileSync(positionals[0], 'utf8'));
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const selfMicros = new Map();
const { samples, timeDeltas } = profile;
for (let i = 0; i < samples.length; i++) {
  const delta = timeDeltas[i + 1] ?? 0;
  selfMicros.set(samples[i], (selfMicros.get(samples[i]) ?? 0) + Math.max(0, delta));
}

const where = (frame) => {
  const url = frame.url.replace(/^file:\/\//, '');
  const file = url === '' ? '' : url.startsWith(ROOT_DIR) ? relative(ROOT_DIR, url) : url.replace(/^node:/, 'node:');
  return file === '' ? '' : `${file}:${frame.lineNumber + 1}`;
};
const totals = new Map();
let total = 0;
for (const [id, micros] of selfMicros) {
  const frame = byId.get(id).callFrame;
  const key = `${frame.functionName || '(anonymous)'}\t${where(frame)}`;
  totals.set(key, (totals.get(key) ?? 0) + micros);
  total += micros;
}
const idle = totals.get('(idle)\t') ?? 0;
const busy = total - idle;
console.log(
  `profile: ${(total / 1e6).toFixed(2)} s sampled, main thread busy ${(busy / 1e6).toFixed(2)} s (${((busy / total) * 100).toFixed(1)} %), idle ${((idle / total) * 100).toFixed(1)} %`,
);
console.log('self ms   % busy  function  (file:line)');
const rows = [...totals].filter(([key]) => !key.startsWith('(idle)')).sort((a, b) => b[1] - a[1]);
for (const [key, micros] of rows.slice(0, Number(values.top))) {
  const [name, file] = key.split('\t');
  console.log(
    `${(micros / 1000).toFixed(1).padStart(8)}  ${((micros / busy) * 100).toFixed(1).padStart(5)} %  ${name}${file === '' ? '' : `  (${file})`}`,
  );
}
