/**
 * Runs the fault runs one after the other, each in a process of its own, and prints how
 * each went and its one JSON line. They report, they do not judge: a run exits non-zero
 * only when it could not be made (a server did not start, PostgreSQL or root missing),
 * and so does this runner then.
 *
 *   node bench/faults/run.mjs [--size tiny|full] [--kind kill-sqlite,hostile,…]
 *
 * Kinds, in this order: kill-sqlite, kill-postgres, pg-outage, disk-full, handlers,
 * hostile, soak. At the full size the soak alone lasts 30 minutes.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { BENCH_DIR } from '../lib/processes.mjs';

const KINDS = ['kill-sqlite', 'kill-postgres', 'pg-outage', 'disk-full', 'handlers', 'hostile', 'soak'];
const { values } = parseArgs({
  options: { size: { type: 'string', default: 'full' }, kind: { type: 'string' } },
  strict: true,
});
if (values.size !== 'tiny' && values.size !== 'full') {
  console.error(`--size must be tiny or full, got ${JSON.stringify(values.size)}`);
  process.exit(2);
}
const selected = values.kind === undefined ? KINDS : values.kind.split(',').map((k) => k.trim());
const unknown = selected.filter((k) => !KINDS.includes(k));
if (unknown.length > 0) {
  console.error(`unknown kind(s): ${unknown.join(', ')}; known: ${KINDS.join(', ')}`);
  process.exit(2);
}

let current = null;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    current?.kill('SIGTERM');
    process.exit(130);
  });
}

function runKind(kind) {
  return new Promise((resolve) => {
    current = spawn(process.execPath, [join(BENCH_DIR, 'faults', `${kind}.mjs`), '--size', values.size], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let line = null;
    let buffer = '';
    current.stdout.setEncoding('utf8').on('data', (chunk) => {
      process.stdout.write(chunk);
      buffer += chunk;
      const lines = buffer.split('\n');
      buffer = lines.pop();
      for (const l of lines) if (l.startsWith('{"kind"')) line = l;
    });
    current.once('close', (code, signal) => {
      current = null;
      resolve({ code: code ?? (signal === null ? 1 : 128), line });
    });
  });
}

const started = Date.now();
const outcomes = [];
for (const kind of selected) {
  console.log(`\n=== ${kind} (${values.size}) ===`);
  const t0 = Date.now();
  const { code, line } = await runKind(kind);
  outcomes.push({ kind, code, seconds: (Date.now() - t0) / 1000, line });
}
console.log(`\n=== fault runs (${values.size}): ${((Date.now() - started) / 1000).toFixed(1)} s ===`);
for (const o of outcomes) console.log(`${o.code === 0 ? 'ran   ' : 'FAILED'} ${o.kind} (${o.seconds.toFixed(1)} s)`);
process.exitCode = outcomes.every((o) => o.code === 0) ? 0 : 1;
