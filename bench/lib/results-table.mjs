/**
 * The results of bench/README.md, built from the JSON files in bench/results/: the table
 * of the tracked figures (one row each: Kiln, its same-run baseline, the target, the
 * ratio and the verdict), the same with KILN_THREADS=1, main-thread CPU per job, the
 * other figures of the same runs, and when and where each was measured; and, apart, the
 * PostgreSQL store's figures (pg-*).
 */
import { existsSync, readFileSync } from 'node:fs';
import { resultPath } from './report.mjs';

const MiB = 2 ** 20;
const LAG_TARGET_MS = 10;

function read(name, size, variant = null) {
  const path = resultPath(name, size, variant);
  return existsSync(path) ? JSON.parse(readFileSync(path, 'utf8')) : null;
}

/** `median (min–max)` of a summary, or the median alone for one run. */
function fmt(summary, digits = 0, scale = 1, unit = '') {
  if (summary === undefined || summary === null || summary.median === null) return 'n/a';
  const f = (v) =>
    `${(v / scale).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })}${unit}`;
  return summary.n < 2 ? f(summary.median) : `${f(summary.median)} (${f(summary.min)}–${f(summary.max)})`;
}

const count = (n) => n.toLocaleString('en-US');

/** One median over another, formatted; n/a when either is missing. */
const ratio = (a, b, digits) =>
  fmt({ median: a.median === null || b.median === null ? null : a.median / b.median, n: 1 }, digits);

/** A verdict on medians; a tiny run's figures judge nothing. */
function verdict(result, met) {
  if (result.size === 'tiny') return 'not judged (tiny size)';
  return met === null || met === undefined ? 'not judged' : met ? 'met' : '**missed**';
}

function when(name, result) {
  const m = result.machine;
  const src = result.kiln?.srcCommit === undefined ? '' : ` (src/ as of ${result.kiln.srcCommit})`;
  const kiln =
    result.kiln === undefined
      ? ''
      : `, Kiln ${result.kiln.commit}${src}${result.kiln.srcDirty ? ' with uncommitted src/ edits' : ''}`;
  const load = m.loadAverage1m === undefined ? '' : `, load average ${m.loadAverage1m} at the end`;
  const threads = result.parameters.threads === undefined ? '' : `, ${result.parameters.threads} thread(s)`;
  return `${name}: ${result.date.slice(0, 16).replace('T', ' ')} UTC, ${m.cores} cores (${m.cpuModel}), Node ${m.node}${kiln}${load}, ${result.size} size${threads}, ${result.parameters.runs} run(s)`;
}

/** Figure 1: the 5 ms row of cpu-efficiency. */
function cpuEfficiencyRow(r, ideal) {
  const f = r.figures.find((x) => x.spinMs === 5);
  return [
    `${count(r.parameters.count)} × 5 ms \`cpu.spin\` over HTTP, jobs/s as % of ideal (${ideal} ÷ task time)`,
    `${fmt(f.kilnPercentOfIdeal, 1, 1, ' %')} of ideal (${fmt(f.kilnPerSecond)} jobs/s)`,
    `raw piscina (same handler, same threads): ${fmt(f.piscinaPercentOfIdeal, 1, 1, ' %')} (${fmt(f.piscinaPerSecond)}/s); ideal ${fmt(f.idealPerSecond)}/s`,
    `≥ ${r.target.percentOfIdeal} %, and ≥ ${r.target.ratioToPiscina}× raw piscina's figure in the same run`,
    `${fmt(f.kilnToPiscina, 2)} × raw piscina`,
    `≥ ${r.target.percentOfIdeal} %: ${verdict(r, r.target.percentMet)}; ≥ ${r.target.ratioToPiscina}×: ${verdict(r, r.target.ratioMet)}`,
  ];
}

/** Figure 2: the batch row of throughput. */
function throughputRow(r) {
  const f = r.figures;
  const bullmq =
    f.bullmqPerSecond.median === null
      ? 'BullMQ + Redis: skipped (no Redis)'
      : `BullMQ + Redis ${fmt(f.bullmqPerSecond)}/s`;
  return [
    `${count(r.parameters.total)} \`noop\` via \`POST /v1/jobs/batch\` (100 per request), first request → last completion`,
    `${fmt(f.kilnBatchPerSecond)} jobs/s`,
    `${bullmq}; raw piscina one task per job ${fmt(f.piscinaPerSecond)}/s`,
    `≥ ${r.target.ratioToBullmq}× BullMQ and ≥ ${r.target.ratioToPiscina}× raw piscina`,
    `${fmt(f.batchToBullmq, 2)} × BullMQ, ${fmt(f.batchToPiscina, 2)} × raw piscina`,
    `≥ ${r.target.ratioToBullmq}× BullMQ: ${verdict(r, r.target.bullmqMet)}; ≥ ${r.target.ratioToPiscina}× piscina: ${verdict(r, r.target.piscinaMet)}`,
  ];
}

/** Figure 3: the SQLite row of ingest. */
function ingestRow(r) {
  const f = r.figures;
  const p = r.parameters;
  return [
    `single-job \`POST /v1/jobs\`, dispatch paused, ${p.connections} connections, ${p.durationSeconds} s`,
    `${fmt(f.kilnSqlite.requestsPerSecond)} req/s, p99 ${fmt(f.kilnSqlite.latencyP99Ms, 0, 1, ' ms')}`,
    `raw fastify validating the same body: ${fmt(f.raw.requestsPerSecond)} req/s, p99 ${fmt(f.raw.latencyP99Ms, 0, 1, ' ms')}`,
    `≥ ${r.target.ratioToRaw.toFixed(2)}× raw fastify, p99 ≤ ${r.target.p99RatioToRaw}× raw's`,
    `${fmt(f.sqliteToRaw, 2)} × req/s, ${fmt(f.sqliteP99ToRaw, 2)} × p99`,
    `req/s: ${verdict(r, r.target.ratioMet)}; p99: ${verdict(r, r.target.p99Met)}`,
  ];
}

/** Figure 4: both variants of priority-latency. */
function priorityRow(r) {
  const { quiet, submitting } = r.figures;
  const p = r.parameters;
  const job = p.spinMs;
  const backlog = p.backlog >= 1000 ? `${count(p.backlog / 1000)} k` : count(p.backlog);
  return [
    `${p.probes} priority-9 jobs behind ${backlog} queued ${job} ms jobs, \`startedAt − createdAt\``,
    `quiet: p50 ${fmt(quiet.serverP50Ms, 0, 1, ' ms')}, p99 ${fmt(quiet.serverP99Ms, 0, 1, ' ms')}; while another client submits: p50 ${fmt(submitting.serverP50Ms, 0, 1, ' ms')}, p99 ${fmt(submitting.serverP99Ms, 0, 1, ' ms')}`,
    `one job = ${job} ms`,
    `p99 ≤ one job + 2 ms quiet, ≤ one job + 6 ms while jobs are being submitted`,
    `p99 ÷ one job: quiet ${(quiet.serverP99Ms.median / job).toFixed(1)}, submitting ${(submitting.serverP99Ms.median / job).toFixed(1)}`,
    `quiet: ${verdict(r, r.target.quietMet)}; submitting: ${verdict(r, r.target.submittingMet)}`,
  ];
}

/** Figure 5: lag p99 of the 5 ms cpu-efficiency runs and the noop batch runs. */
function lagRow(efficiency, throughput) {
  const five = efficiency?.figures.find((x) => x.spinMs === 5);
  const lags = [five?.eventLoopLagP99Ms, throughput?.figures.batchLagP99Ms].filter((s) => s !== undefined);
  const met =
    lags.length === 2 && lags.every((s) => s.median !== null) ? lags.every((s) => s.median <= LAG_TARGET_MS) : null;
  const judged = efficiency?.size === 'tiny' || throughput?.size === 'tiny' ? { size: 'tiny' } : { size: 'full' };
  return [
    'event-loop lag p99 during the two throughput runs (cpu-efficiency and the noop batch run)',
    `cpu-efficiency ${five === undefined ? 'n/a' : fmt(five.eventLoopLagP99Ms, 1, 1, ' ms')}; noop batch ${throughput === null ? 'n/a' : fmt(throughput.figures.batchLagP99Ms, 1, 1, ' ms')}`,
    '—',
    `≤ ${LAG_TARGET_MS} ms`,
    '—',
    verdict(judged, met),
  ];
}

/** Rows given as arrays of cells, padded the way Prettier formats a Markdown table. */
function markdownTable(header, rows) {
  const cells = [header, ...rows];
  const widths = header.map((_, i) => Math.max(3, ...cells.map((row) => (row[i] ?? '').length)));
  const line = (row) => `| ${widths.map((w, i) => (row[i] ?? '').padEnd(w)).join(' | ')} |`;
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)];
}

const HEADER = ['figure', 'Kiln', 'same-run baseline', 'target', 'ratio to baseline', 'verdict'];

function trackedRows(size, variant, ideal) {
  const efficiency = read('cpu-efficiency', size, variant);
  const throughput = read('throughput', size, variant);
  const ingest = variant === null ? read('ingest', size) : null;
  const priority = read('priority-latency', size, variant);
  const rows = [
    efficiency === null ? null : cpuEfficiencyRow(efficiency, ideal),
    throughput === null ? null : throughputRow(throughput),
    ingest === null ? null : ingestRow(ingest),
    priority === null ? null : priorityRow(priority),
    efficiency === null && throughput === null ? null : lagRow(efficiency, throughput),
  ].filter((row) => row !== null);
  const measured = [
    ['cpu-efficiency', efficiency],
    ['throughput', throughput],
    ['ingest', ingest],
    ['priority-latency', priority],
  ]
    .filter(([, result]) => result !== null)
    .map(([name, result]) => when(variant === null ? name : `${name} --threads ${result.parameters.threads}`, result));
  return { rows, measured };
}

/** One table of main-thread-cost results, a row per workload and thread count. */
function mainThreadCost(results) {
  const rows = results.flatMap((r) =>
    r.figures.map((f) => [
      `${count(f.jobs)} ${f.label}`,
      String(r.parameters.threads),
      fmt(f.microsPerJob, 1),
      fmt(f.onCpuMicrosPerJob, 1),
      fmt(f.waitingMicrosPerJob, 1),
      fmt(f.runsPerJob, 2),
      fmt(f.jobsPerSecond),
      f.topFunctions
        .slice(0, 5)
        .map((fn) => `\`${fn.name}\` ${fn.microsPerJob.toFixed(1)}`)
        .join(', '),
    ]),
  );
  return markdownTable(
    [
      'workload',
      'KILN_THREADS',
      'main thread µs/job (sampled, not idle)',
      'schedstat: on a core µs/job',
      'schedstat: waiting for a core µs/job',
      'schedstat: times on a core per job',
      'jobs/s',
      'top functions, µs/job',
    ],
    rows,
  );
}

/** Figure 17: the dispatch ceiling, a row per job length. */
function dispatchCeiling(r) {
  return markdownTable(
    [
      `job (\`block\`, ${r.parameters.pool} threads)`,
      'jobs/s (% of ideal)',
      'cores kept busy',
      'main thread µs/job on a core',
      'jobs per second of main-thread CPU',
      'main thread busy',
      'the machine busy',
    ],
    r.figures.map((f) => [
      `${count(f.jobs)} × ${f.ms} ms`,
      `${fmt(f.jobsPerSecond)} (${fmt(f.percentOfIdeal, 1, 1, ' %')})`,
      fmt(f.coresBusy, 1),
      fmt(f.mainUs, 1),
      fmt(f.perMainCpuSecond),
      fmt(f.mainBusy, 0, 1, ' %'),
      fmt(f.machineBusy, 0, 1, ' %'),
    ]),
  );
}

function otherRows(size) {
  const rows = [];
  const efficiency = read('cpu-efficiency', size);
  const one = efficiency?.figures.find((x) => x.spinMs === 1);
  if (one !== undefined) {
    rows.push([
      `${count(efficiency.parameters.count)} × 1 ms \`cpu.spin\` (cpu-efficiency)`,
      `${fmt(one.kilnPercentOfIdeal, 1, 1, ' %')} of ideal (${fmt(one.kilnPerSecond)} jobs/s), lag p99 ${fmt(one.eventLoopLagP99Ms, 1, 1, ' ms')}`,
      `raw piscina ${fmt(one.piscinaPercentOfIdeal, 1, 1, ' %')} (${fmt(one.piscinaPerSecond)}/s); ideal ${fmt(one.idealPerSecond)}/s`,
      `${fmt(one.kilnToPiscina, 2)} × raw piscina`,
    ]);
  }
  const throughput = read('throughput', size);
  if (throughput !== null) {
    const f = throughput.figures;
    rows.push([
      `${count(throughput.parameters.total)} \`noop\`, single \`POST /v1/jobs\`, 100 connections (throughput)`,
      `${fmt(f.kilnSinglePerSecond)} jobs/s, lag p99 ${fmt(f.singleLagP99Ms, 1, 1, ' ms')}`,
      'the batch row’s baselines',
      `${fmt(f.singleToBullmq, 2)} × BullMQ, ${fmt(f.singleToPiscina, 2)} × raw piscina`,
    ]);
  }
  const ingest = read('ingest', size);
  if (ingest !== null) {
    const f = ingest.figures;
    rows.push([
      'ingest with the memory store (what durability costs)',
      `${fmt(f.kilnMemory.requestsPerSecond)} req/s, p99 ${fmt(f.kilnMemory.latencyP99Ms, 0, 1, ' ms')}`,
      'the ingest row’s raw fastify',
      `${fmt(f.memoryToRaw, 2)} × req/s`,
    ]);
  }
  const memory = read('memory', size);
  if (memory !== null) {
    for (const f of memory.figures.filter((x) => x.pending > 0)) {
      const last = f === memory.figures.at(-1);
      rows.push([
        `${count(f.pending)} pending \`noop\` jobs, dispatch paused (memory)`,
        `RSS ${fmt(f.rssBytes, 0, MiB, ' MiB')}, heap ${fmt(f.heapUsedBytes, 0, MiB, ' MiB')}${last ? `; ≤ 1 GiB RSS: ${verdict(memory, memory.target.met)}` : ''}`,
        `at 0 pending: RSS ${fmt(memory.figures[0].rssBytes, 0, MiB, ' MiB')}`,
        `${fmt(f.rssBytesPerJob)} B RSS/job, ${fmt(f.heapBytesPerJob)} B heap/job`,
      ]);
    }
  }
  return { rows, memory };
}

/** The PostgreSQL store's figures (pg-*), one row each, with the baseline of the same run. */
function postgresRows(size) {
  const rows = [];
  const measured = [];
  const throughput = read('pg-throughput', size);
  if (throughput !== null) {
    const f = throughput.figures;
    rows.push([
      `${count(throughput.parameters.total)} \`noop\` via \`POST /v1/jobs/batch\` (100 per request), one server, ${throughput.parameters.threads} threads, first request → last completion (pg-throughput)`,
      `jobs table analyzed: ${fmt(f.kilnAnalyzedPerSecond)} jobs/s; fresh schema, never analyzed: ${fmt(f.kilnFreshPerSecond)} jobs/s`,
      `graphile-worker on the same database: ${fmt(f.graphilePerSecond)} jobs/s`,
      `analyzed ${fmt(f.analyzedToGraphile, 2)} × graphile-worker; fresh ${fmt(f.freshToGraphile, 2)} ×`,
    ]);
    measured.push(when('pg-throughput', throughput));
  }
  const cluster = read('pg-cluster', size);
  if (cluster !== null) {
    const p = cluster.parameters;
    for (const mode of ['live', 'backlog']) {
      const f = cluster.figures[mode];
      const how = mode === 'live' ? 'submitted while running' : 'queued while paused, then resumed';
      const twice =
        f.jobsRunMoreThanOnce > 0
          ? `; ${f.jobsRunMoreThanOnce} job(s) run twice in ${f.runsWithJobsRunTwice} run(s)`
          : '';
      const failed = (f.jobsFailed ?? 0) > 0 ? `, **${f.jobsFailed} failed**` : '';
      rows.push([
        `${count(p.total)} × ${p.spinMs} ms \`cpu.spin\`, ${how}, two servers on one schema, \`KILN_THREADS=1\` each (pg-cluster)`,
        `${fmt(f.twoPerSecond, 1)} jobs/s, ${fmt(f.twoPercentOfIdeal, 1, 1, ' %')} of ideal (100/s)${twice}${failed}`,
        `one server, \`KILN_THREADS=1\`: ${fmt(f.onePerSecond, 1)} jobs/s, ${fmt(f.onePercentOfIdeal, 1, 1, ' %')} of ideal (50/s)`,
        `${fmt(f.twoToOne, 2)} × one server (ideal 2)`,
      ]);
    }
    measured.push(when('pg-cluster', cluster));
  }
  const claim = read('pg-claim-latency', size);
  if (claim !== null) {
    const p = claim.parameters;
    const k = (n) => (n >= 1_000_000 ? `${count(n / 1_000_000)} M` : n >= 1000 ? `${count(n / 1000)} k` : count(n));
    const plan = claim.figures.planHasSort ? 'a **Sort** in a claim plan' : 'no Sort in either claim plan';
    const unanalyzed = claim.figures.planHasSortNeverAnalyzed
      ? `; before the first ANALYZE the micro-batch candidates query sorts every queued row (${claim.figures.candidatesNeverAnalyzedMs.toFixed(1)} ms against ${claim.figures.candidatesAnalyzedMs.toFixed(2)} ms)`
      : '';
    for (const variant of ['plain', 'micro']) {
      const f = claim.figures[variant];
      rows.push([
        `\`store.claim\` ${variant === 'plain' ? 'of 2 jobs (no micro-batching)' : `micro-batched (${count(Math.round(f.jobsPerCall.median))} noop jobs a call)`}, ${k(p.rows)} rows in \`jobs\` (${k(p.backlog)} queued), then \`store.finish\` (pg-claim-latency)`,
        `claim p50 ${fmt(f.claimP50Ms, 2, 1, ' ms')}, p99 ${fmt(f.claimP99Ms, 2, 1, ' ms')}; finish p50 ${fmt(f.finishP50Ms, 2, 1, ' ms')}, p99 ${fmt(f.finishP99Ms, 2, 1, ' ms')}${variant === 'plain' ? `; ${plan}${unanalyzed}` : ''}`,
        `the ${k(p.backlog)} queued rows alone: claim p50 ${fmt(f.backlogClaimP50Ms, 2, 1, ' ms')}, p99 ${fmt(f.backlogClaimP99Ms, 2, 1, ' ms')}; \`SELECT 1\` ${fmt(claim.figures.roundTripP50Ms, 2, 1, ' ms')}`,
        `p50 ${fmt(f.claimP50ToBacklog, 2)} ×, p99 ${fmt(f.claimP99ToBacklog, 2)} × the backlog alone; p50 ${fmt(f.claimP50ToRoundTrip, 1)} × \`SELECT 1\``,
      ]);
    }
    measured.push(when('pg-claim-latency', claim));
  }
  const bloat = read('pg-bloat', size);
  if (bloat !== null) {
    const size3 = (stage) =>
      `${fmt(stage.totalBytes, 1, MiB, ' MiB')} (table ${fmt(stage.tableBytes, 1, MiB, ' MiB')}, indexes ${fmt(stage.indexBytes, 1, MiB, ' MiB')})`;
    const autovacuum = bloat.parameters.postgres?.autovacuum;
    for (const mode of ['server', 'vacuumed']) {
      const f = bloat.figures[mode];
      const how =
        mode === 'server'
          ? `no VACUUM but autovacuum (${autovacuum === undefined ? 'see the result file' : `here: \`autovacuum = ${autovacuum}\``})`
          : `the benchmark's \`VACUUM\` every ${bloat.parameters.vacuumEveryMs / 1000} s (${fmt(f.vacuumsDuringRun)} ran)`;
      rows.push([
        `\`jobs\` after ${count(bloat.parameters.total)} jobs ran through the store and were purged, ${how} (pg-bloat)`,
        `after the purge ${size3(f.purged)}, ${fmt(f.purged.deadTuples)} dead tuples, autovacuum ran ${fmt(f.autovacuumRuns)} time(s); after a \`VACUUM\` ${size3(f.vacuumed)}`,
        `freshly migrated: ${size3(f.atStart)}; all completed: ${size3(f.completed)}`,
        `after VACUUM ${fmt(f.vacuumedToPurged, 2)} × after the purge; ${fmt(f.vacuumedBytesPerJob, 1)} B left per job run`,
      ]);
    }
    measured.push(when('pg-bloat', bloat));
  }
  const finished = read('pg-finished-table', size);
  if (finished !== null) {
    const { move, update } = finished.figures;
    const side = (f, retention) =>
      `a finish: ${fmt(f.walBytesPerJob)} WAL bytes, ${fmt(f.cpuUsPerJob, 1)} µs of PostgreSQL CPU, ${fmt(f.indexInsertsPerJob, 2)} index entries; ${retention} ${fmt(f.retentionMs)} ms, \`jobs\` ${fmt(f.jobsMiBAfterRetention, 1)} MiB after it (${fmt(f.jobsMiBBefore, 1)} before); read by id p50 ${fmt(f.readP50Us)} µs`;
    rows.push([
      `${count(finished.parameters.total)} finished \`noop\` jobs over a day of the store's clock, moved by their finish into \`jobs_done\` (partitioned by status and finish time, a 24th of the retention a partition), against the same finish written in place in \`jobs\` (pg-finished-table)`,
      side(move, 'retention of the day (`store.purge`, partitions dropped)'),
      side(update, 'retention of the day (rows deleted from `jobs`)'),
      `of the medians: WAL ${ratio(move.walBytesPerJob, update.walBytesPerJob, 2)} ×, retention ${ratio(move.retentionMs, update.retentionMs, 3)} ×, read ${ratio(move.readP50Us, update.readP50Us, 2)} ×`,
    ]);
    measured.push(when('pg-finished-table', finished));
  }
  return { rows, measured };
}

/**
 * Markdown: every table of the given size that bench/results/ has figures for, but the
 * PostgreSQL store's (postgresResultsTable); null when there is none.
 */
export function resultsTable(size = 'full') {
  const lines = [];
  const measured = [];
  const main = trackedRows(size, null, 'cores');
  if (main.rows.length > 0) {
    lines.push(...markdownTable(HEADER, main.rows), '');
    measured.push(...main.measured);
  }
  const one = trackedRows(size, 'threads-1', '1 thread');
  if (one.rows.length > 0) {
    lines.push(
      'The same figures with `KILN_THREADS=1` (raw piscina on 1 thread too; ingest runs with dispatch paused, so it has no thread count):',
      '',
      ...markdownTable(HEADER, one.rows),
      '',
    );
    measured.push(...one.measured);
  }
  const costs = [null, 'threads-1']
    .map((variant) => [variant, read('main-thread-cost', size, variant)])
    .filter(([, result]) => result !== null);
  if (costs.length > 0) {
    lines.push(
      "Main-thread CPU per job (`main-thread-cost`; from the main thread's CPU profile between the first request and the last completion):",
      '',
      ...mainThreadCost(costs.map(([, result]) => result)),
      '',
    );
    for (const [variant, result] of costs) {
      measured.push(
        when(variant === null ? 'main-thread-cost' : `main-thread-cost --threads ${result.parameters.threads}`, result),
      );
    }
  }
  const ceiling = read('dispatch-ceiling', size);
  if (ceiling !== null) {
    lines.push(
      `The dispatch ceiling (\`dispatch-ceiling\`; single jobs that hold a thread without a core; ≥ ${count(ceiling.target.perMainCpuSecond)} jobs per second of main-thread CPU, judged at ${ceiling.target.judgedAtMs} ms: ${verdict(ceiling, ceiling.target.met)}):`,
      '',
      ...dispatchCeiling(ceiling),
      '',
    );
    measured.push(when('dispatch-ceiling', ceiling));
  }
  const other = otherRows(size);
  if (other.rows.length > 0) {
    lines.push(
      'Other figures of the same runs:',
      '',
      ...markdownTable(['figure', 'Kiln', 'same-run baseline', 'ratio'], other.rows),
      '',
    );
  }
  if (other.memory !== null) measured.push(when('memory', other.memory));
  if (measured.length === 0) return null;
  lines.push('Measured:', '', ...measured.map((m) => `- ${m}`));
  return `${lines.join('\n')}\n`;
}

/** Markdown: the PostgreSQL store's figures of the given size (null: no pg-* result file). */
export function postgresResultsTable(size = 'full') {
  const { rows, measured } = postgresRows(size);
  if (rows.length === 0) return null;
  return `${[
    ...markdownTable(['figure', 'Kiln', 'same-run baseline', 'ratio'], rows),
    '',
    'Measured:',
    '',
    ...measured.map((m) => `- ${m}`),
  ].join('\n')}\n`;
}
