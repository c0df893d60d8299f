/** The results table of bench/README.md, built from the JSON files in bench/results/. */
import { existsSync, readFileSync } from 'node:fs';
import { resultPath } from './report.mjs';

const MiB = 2 ** 20;

function read(name, size) {
  const path = resultPath(name, size);
  return existsSync(path) ? JSON.parse(readFileSync(path, 'utf8')) : null;
}

function fmt(summary, digits = 0, scale = 1, unit = '') {
  if (summary === undefined || summary === null || summary.median === null) return 'n/a';
  const f = (v) =>
    `${(v / scale).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })}${unit}`;
  return summary.n < 2 ? f(summary.median) : `${f(summary.median)} (${f(summary.min)}–${f(summary.max)})`;
}

const verdict = (met) => (met === null || met === undefined ? 'not judged' : met ? 'met' : '**missed**');

function when(result) {
  const m = result.machine;
  const kiln =
    result.kiln === undefined
      ? ''
      : `, Kiln ${result.kiln.commit}${result.kiln.srcDirty ? ' with uncommitted src/ edits' : ''}`;
  const load = m.loadAverage1m === undefined ? '' : `, load average ${m.loadAverage1m} at the end`;
  return `${result.date.slice(0, 16).replace('T', ' ')} UTC, ${m.cores} cores (${m.cpuModel}), Node ${m.node}${kiln}${load}, ${result.size} size, ${result.parameters.runs} run(s)`;
}

function cpuEfficiency(r) {
  const rows = r.figures.map(
    (f) =>
      `| ${f.spinMs} ms jobs | ${fmt(f.kilnPercentOfIdeal, 1, 1, ' %')} of ideal (${fmt(f.kilnPerSecond)} jobs/s) | raw piscina ${fmt(f.piscinaPercentOfIdeal, 1, 1, ' %')} (${fmt(f.piscinaPerSecond)}/s); ideal ${fmt(f.idealPerSecond)}/s | ${fmt(f.kilnToPiscina, 2)} × piscina | ${f.spinMs === 5 ? `≥ 95 %: ${verdict(r.target.percentMet)}; ≥ 0.98 × piscina: ${verdict(r.target.ratioMet)}` : '—'} |`,
  );
  const lag = r.figures.map((f) => `${f.spinMs} ms jobs ${fmt(f.eventLoopLagP99Ms, 1, 1, ' ms')}`).join(', ');
  return { rows, lag: `cpu-efficiency: ${lag}`, when: `cpu-efficiency: ${when(r)}` };
}

function throughput(r) {
  const f = r.figures;
  const rows = [
    `| noop, batch of 100 | ${fmt(f.kilnBatchPerSecond)} jobs/s | raw piscina ${fmt(f.piscinaPerSecond)}/s; BullMQ ${fmt(f.bullmqPerSecond)}/s | ${fmt(f.batchToPiscina, 2)} × piscina, ${fmt(f.batchToBullmq, 2)} × BullMQ | ≥ 2.5× BullMQ: ${verdict(r.target.bullmqMet)}; ≥ 1.2× piscina: ${verdict(r.target.piscinaMet)} |`,
    `| noop, single POSTs, 100 conn. | ${fmt(f.kilnSinglePerSecond)} jobs/s | (same run) | ${fmt(f.singleToPiscina, 2)} × piscina, ${fmt(f.singleToBullmq, 2)} × BullMQ | — |`,
  ];
  return {
    rows,
    lag: `throughput: batch ${fmt(f.batchLagP99Ms, 1, 1, ' ms')}, single POSTs ${fmt(f.singleLagP99Ms, 1, 1, ' ms')}`,
    when: `throughput: ${when(r)}`,
  };
}

function ingest(r) {
  const f = r.figures;
  const rows = [
    `| ingest, sqlite (sync=full) | ${fmt(f.kilnSqlite.requestsPerSecond)} req/s, p99 ${fmt(f.kilnSqlite.latencyP99Ms, 0, 1, ' ms')} | raw fastify+zod ${fmt(f.raw.requestsPerSecond)} req/s, p99 ${fmt(f.raw.latencyP99Ms, 0, 1, ' ms')} | ${fmt(f.sqliteToRaw, 2)} × raw, p99 ${fmt(f.sqliteP99ToRaw, 2)} × raw's | ≥ 0.70: ${verdict(r.target.ratioMet)}; p99 ≤ 2×: ${verdict(r.target.p99Met)} |`,
    `| ingest, memory store | ${fmt(f.kilnMemory.requestsPerSecond)} req/s, p99 ${fmt(f.kilnMemory.latencyP99Ms, 0, 1, ' ms')} | (same run) | ${fmt(f.memoryToRaw, 2)} × raw | — |`,
  ];
  return { rows, when: `ingest: ${when(r)}` };
}

function priorityLatency(r) {
  const f = r.figures;
  const rows = [
    `| priority 9 behind ${r.parameters.backlog.toLocaleString('en-US')} | createdAt→startedAt p50 ${fmt(f.serverP50Ms, 0, 1, ' ms')}, p99 ${fmt(f.serverP99Ms, 0, 1, ' ms')} | client send→startedAt p50 ${fmt(f.clientP50Ms, 0, 1, ' ms')}, p99 ${fmt(f.clientP99Ms, 0, 1, ' ms')} | p99 ÷ target ${(f.serverP99Ms.median / r.target.p99Ms).toFixed(2)} | ≤ ${r.target.p99Ms} ms: ${verdict(r.target.met)} |`,
  ];
  return { rows, when: `priority-latency: ${when(r)}` };
}

function memory(r) {
  const rows = r.figures
    .filter((f) => f.pending > 0)
    .map(
      (f) =>
        `| ${f.pending.toLocaleString('en-US')} pending | RSS ${fmt(f.rssBytes, 0, MiB, ' MiB')}, heap ${fmt(f.heapUsedBytes, 0, MiB, ' MiB')} | at 0 pending: RSS ${fmt(r.figures[0].rssBytes, 0, MiB, ' MiB')} | ${fmt(f.rssBytesPerJob)} B RSS/job, ${fmt(f.heapBytesPerJob)} B heap/job | ${f === r.figures.at(-1) ? `≤ 1 GiB: ${verdict(r.target.met)}` : '—'} |`,
    );
  return { rows, when: `memory: ${when(r)}` };
}

/** Rows given as `| a | b |` lines, padded the way Prettier and Biome format a Markdown table. */
function markdownTable(header, rows) {
  const cells = [header, ...rows.map((row) => row.slice(2, -2).split(' | '))];
  const widths = header.map((_, i) => Math.max(3, ...cells.map((row) => (row[i] ?? '').length)));
  const line = (row) => `| ${widths.map((w, i) => (row[i] ?? '').padEnd(w)).join(' | ')} |`;
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...cells.slice(1).map(line)];
}

/** Markdown: one table of every figure of the given size found in bench/results/, with dates, machine and lag. */
export function resultsTable(size = 'full') {
  const parts = [
    ['cpu-efficiency', cpuEfficiency],
    ['throughput', throughput],
    ['ingest', ingest],
    ['priority-latency', priorityLatency],
    ['memory', memory],
  ]
    .map(([name, render]) => {
      const result = read(name, size);
      return result === null ? null : render(result);
    })
    .filter((part) => part !== null);
  const lines = [
    ...markdownTable(
      ['figure', 'Kiln', 'baseline (same run)', 'ratio', 'target'],
      parts.flatMap((p) => p.rows),
    ),
    '',
    'Main-thread event-loop lag p99 during the runs (figure 6): ' +
      (parts
        .map((p) => p.lag)
        .filter(Boolean)
        .join('; ') || 'n/a'),
    '',
    'Measured:',
    '',
    ...parts.map((p) => `- ${p.when}`),
  ];
  return `${lines.join('\n')}\n`;
}
