/**
 * Compares two V8 heap snapshots (e.g. the soak's, taken at 40 % and 95 % of the run):
 * the objects of each kind (node type and constructor or name), their count and self
 * size in each, and the kinds that grew most by self size, as a table and one JSON line.
 *
 *   node bench/faults/heap-diff.mjs A.heapsnapshot B.heapsnapshot [--top N]
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { printTable } from '../lib/report.mjs';

const { values, positionals } = parseArgs({
  options: { top: { type: 'string', default: '25' } },
  allowPositionals: true,
  strict: true,
});
if (positionals.length !== 2) {
  console.error('usage: node bench/faults/heap-diff.mjs A.heapsnapshot B.heapsnapshot [--top N]');
  process.exit(2);
}

/** Count and self size of each `type:name` of a snapshot. */
function kinds(path) {
  const { snapshot, nodes, strings } = JSON.parse(readFileSync(path, 'utf8'));
  const fields = snapshot.meta.node_fields;
  const types = snapshot.meta.node_types[0];
  const width = fields.length;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const sizeAt = fields.indexOf('self_size');
  const byKind = new Map();
  let total = 0;
  for (let i = 0; i < nodes.length; i += width) {
    const type = types[nodes[i + typeAt]];
    // Strings and code are grouped by type only: their names are their contents.
    const name = ['object', 'closure', 'native', 'hidden'].includes(type) ? strings[nodes[i + nameAt]] : '';
    const key = `${type}:${name.slice(0, 80)}`;
    const entry = byKind.get(key) ?? { count: 0, bytes: 0 };
    entry.count++;
    entry.bytes += nodes[i + sizeAt];
    total += nodes[i + sizeAt];
    byKind.set(key, entry);
  }
  return { byKind, total };
}

const [a, b] = positionals.map(kinds);
const keys = new Set([...a.byKind.keys(), ...b.byKind.keys()]);
const zero = { count: 0, bytes: 0 };
const rows = [...keys]
  .map((key) => {
    const before = a.byKind.get(key) ?? zero;
    const after = b.byKind.get(key) ?? zero;
    return { key, before, after, grewBytes: after.bytes - before.bytes, grewCount: after.count - before.count };
  })
  .sort((x, y) => y.grewBytes - x.grewBytes);
const top = rows.slice(0, Number(values.top));
const kib = (n) => (n / 1024).toFixed(1);
printTable(
  `Heap: ${kib(a.total)} KiB → ${kib(b.total)} KiB self size; the kinds that grew most`,
  ['kind', 'count A', 'count B', 'KiB A', 'KiB B', 'grew KiB'],
  top.map((r) => [r.key, r.before.count, r.after.count, kib(r.before.bytes), kib(r.after.bytes), kib(r.grewBytes)]),
);
console.log(
  JSON.stringify({
    totalBytes: [a.total, b.total],
    grew: top.map((r) => ({
      kind: r.key,
      count: [r.before.count, r.after.count],
      bytes: [r.before.bytes, r.after.bytes],
    })),
  }),
);
