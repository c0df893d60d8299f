/**
 * PostgreSQL store, what a million jobs leave behind in the one `jobs` table: Kiln's
 * PostgresStore opened in this process (dist/src/store/postgres/store.js, a pool of 10)
 * on a fresh schema; 1,000,000 noop jobs inserted through `store.insert` (1,000 a call,
 * Kiln's own ids and defaults), claimed through `store.claim` (500 a call, no
 * micro-batching) and finished as completed through `store.finish` by 3 concurrent
 * loops, as fast as they go, the inserts at most 50,000 jobs ahead; then purged with
 * `store.purge('completed', 0, 1000)` until it answers 0. No HTTP, no worker threads.
 * Read from the server: pg_total_relation_size, pg_relation_size and pg_indexes_size of
 * `jobs` (and each index), n_live_tup and n_dead_tup, and whether autovacuum ran
 * (autovacuum_count): at the start (the freshly migrated table, the baseline), once every
 * job has completed, after the purge, and after a plain `VACUUM` of the table. The store
 * is closed before the statistics are read, so its connections have flushed theirs.
 * Two modes, each on a schema of its own:
 *   - as the server vacuums: nothing but autovacuum (which may be off: the result file
 *     records the server's `autovacuum` setting);
 *   - vacuumed as it goes: the benchmark runs `VACUUM` of jobs itself every 5 s (0.5 s at
 *     the tiny size) while the jobs run and the purge deletes, what autovacuum with a
 *     short naptime would do.
 * The full size runs once by default (a million jobs through the store take minutes).
 *
 *   node bench/pg-bloat.mjs [--size tiny|full] [--runs N]
 */
import { performance } from 'node:perf_hooks';
import {
  dropSchema,
  dropStaleSchemas,
  freshSchemaName,
  KILN_SCHEMA_PREFIX,
  noopJobMaker,
  openPostgresStore,
  purgeCompleted,
  requirePostgres,
  serverSettings,
  tableStats,
  withPg,
} from './lib/postgres.mjs';
import { benchOptions, formatSummary, printTable, runBenchmark, sleep, summarize, writeResult } from './lib/report.mjs';

const NAME = 'pg-bloat';
const OWNER = 'bench-bloat';
const INSERT_BATCH = 1000;
const CLAIM_BATCH = 500;
const CONSUMERS = 3;
const MAX_AHEAD = 50_000;
const PURGE_BATCH = 1000;
const MODES = ['server', 'vacuumed'];
const MiB = 2 ** 20;

/** Statistics of `jobs` once the store's connections have gone (they flush theirs as they end). */
async function statsNow(schema) {
  await sleep(1500);
  return withPg((client) => tableStats(client, schema, 'jobs'));
}

/**
 * `VACUUM` of jobs on a connection of its own every `everyMs` (after the previous one
 * ended) until stop() is called; stop() answers how many ran and their total time.
 */
function vacuumEvery(schema, everyMs) {
  if (everyMs === null) return { stop: async () => ({ vacuums: 0, vacuumMs: 0 }) };
  let stopped = false;
  let vacuums = 0;
  let vacuumMs = 0;
  const loop = withPg(async (client) => {
    for (;;) {
      for (let waited = 0; waited < everyMs && !stopped; waited += 50) await sleep(50);
      if (stopped) return;
      const started = performance.now();
      await client.query(`VACUUM "${schema}".jobs`);
      vacuumMs += performance.now() - started;
      vacuums++;
    }
  });
  return {
    async stop() {
      stopped = true;
      await loop;
      return { vacuums, vacuumMs };
    },
  };
}

/** Inserts, claims and finishes `total` jobs through the store; answers the time it took. */
async function runJobs(store, total, newJob) {
  let inserted = 0;
  let completed = 0;
  const started = performance.now();
  const producer = async () => {
    while (inserted < total) {
      if (inserted - completed >= MAX_AHEAD) {
        await sleep(2);
        continue;
      }
      const size = Math.min(INSERT_BATCH, total - inserted);
      const now = Date.now();
      const result = await store.insert(Array.from({ length: size }, () => newJob(now)));
      if (!result.ok) throw new Error(`an insert was refused: ${result.reason}`);
      inserted += size;
    }
  };
  const consumer = async () => {
    while (completed < total) {
      const batches = await store.claim({ owner: OWNER, leaseMs: 60_000, batches: CLAIM_BATCH, micro: null });
      const jobs = batches.flat();
      if (jobs.length === 0) {
        await sleep(2);
        continue;
      }
      const answers = await store.finish(
        jobs.map((job) => ({
          id: job.id,
          attempt: job.attempts,
          owner: OWNER,
          outcome: { kind: 'completed', resultText: '{}' },
        })),
      );
      const accepted = answers.filter((answer) => answer?.status === 'completed').length;
      if (accepted !== jobs.length) throw new Error(`${jobs.length - accepted} finishes were refused`);
      completed += accepted;
    }
  };
  await Promise.all([producer(), ...Array.from({ length: CONSUMERS }, consumer)]);
  return { elapsedMs: performance.now() - started, completed };
}

async function oneRun(run, mode, total, newJob, vacuumEveryMs) {
  const schema = freshSchemaName(KILN_SCHEMA_PREFIX);
  let store = null;
  let vacuuming = null;
  try {
    store = await openPostgresStore({ schema, poolSize: 10 });
    const atStart = await withPg((client) => tableStats(client, schema, 'jobs'));
    vacuuming = vacuumEvery(schema, mode === 'vacuumed' ? vacuumEveryMs : null);
    const jobs = await runJobs(store, total, newJob);
    const counts = await store.counts();
    if (counts.byStatus.completed !== total || counts.pending !== 0) {
      throw new Error(`expected ${total} completed and none pending, counts say ${JSON.stringify(counts.byStatus)}`);
    }
    await store.close();
    store = null;
    const completed = await statsNow(schema);
    store = await openPostgresStore({ schema, poolSize: 10 });
    const purge = await purgeCompleted(store, PURGE_BATCH);
    if (purge.purged !== total) throw new Error(`purged ${purge.purged} of ${total} jobs`);
    const during = await vacuuming.stop();
    vacuuming = null;
    await store.close();
    store = null;
    const purged = await statsNow(schema);
    const vacuumStarted = performance.now();
    await withPg((client) => client.query(`VACUUM "${schema}".jobs`));
    const vacuumMs = performance.now() - vacuumStarted;
    const vacuumed = await statsNow(schema);
    const record = {
      run,
      mode,
      jobs: { ...jobs, jobsPerSecond: (total / jobs.elapsedMs) * 1000 },
      purge,
      vacuumsDuringRun: during,
      vacuumMs,
      atStart,
      completed,
      purged,
      vacuumed,
      autovacuumRan: purged.autovacuumCount > 0,
    };
    console.log(
      `  run ${run}, ${mode === 'server' ? 'as the server vacuums' : `VACUUM every ${vacuumEveryMs / 1000} s (${during.vacuums} ran)`}: ${total} jobs through the store at ${record.jobs.jobsPerSecond.toFixed(0)}/s; purged in ${(purge.elapsedMs / 1000).toFixed(1)} s (${purge.calls} calls); jobs ${(purged.totalBytes / MiB).toFixed(1)} MiB after the purge (${purged.deadTuples} dead tuples, autovacuum ran ${purged.autovacuumCount} time(s)), ${(vacuumed.totalBytes / MiB).toFixed(1)} MiB after VACUUM`,
    );
    return record;
  } finally {
    if (vacuuming !== null) await vacuuming.stop().catch(() => undefined);
    if (store !== null) await store.close();
    await dropSchema(schema);
  }
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 1, tiny: 1 });
  const total = options.tiny ? 20_000 : 1_000_000;
  const vacuumEveryMs = options.tiny ? 500 : 5000;
  const version = await requirePostgres();
  await dropStaleSchemas([KILN_SCHEMA_PREFIX]);
  const newJob = await noopJobMaker();
  const parameters = {
    total,
    insert: `store.insert of ${INSERT_BATCH} noop jobs a call, at most ${MAX_AHEAD.toLocaleString('en-US')} ahead of the completions`,
    claimFinish: `${CONSUMERS} loops of store.claim (batches: ${CLAIM_BATCH}, micro: null) then store.finish (completed)`,
    purge: `store.purge('completed', 0, ${PURGE_BATCH}) until 0`,
    vacuum: 'VACUUM of jobs (not FULL) after the purge',
    vacuumEveryMs,
    modes: {
      server: 'no VACUUM but what the server runs itself (autovacuum, if on)',
      vacuumed: `VACUUM of jobs by the benchmark every ${vacuumEveryMs / 1000} s while the jobs run and during the purge`,
    },
    store: 'PostgresStore from dist/, in the benchmark process, pool of 10',
    postgres: await serverSettings(),
    runs: options.runs,
  };
  console.log(
    `${NAME}: ${total} noop jobs through the store, then purged, PostgreSQL ${version}, ${options.runs} run(s)`,
  );

  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    // Which mode goes first alternates.
    const order = run % 2 === 1 ? ['server', 'vacuumed'] : ['vacuumed', 'server'];
    const record = { run, order };
    for (const mode of order) record[mode] = await oneRun(run, mode, total, newJob, vacuumEveryMs);
    runs.push(record);
  }

  const of = (pick) => summarize(runs.map(pick));
  const figures = {};
  for (const mode of MODES) {
    const stage = (key) => ({
      totalBytes: of((r) => r[mode][key].totalBytes),
      tableBytes: of((r) => r[mode][key].tableBytes),
      indexBytes: of((r) => r[mode][key].indexBytes),
      liveTuples: of((r) => r[mode][key].liveTuples),
      deadTuples: of((r) => r[mode][key].deadTuples),
      autovacuumCount: of((r) => r[mode][key].autovacuumCount),
    });
    figures[mode] = {
      atStart: stage('atStart'),
      completed: stage('completed'),
      purged: stage('purged'),
      vacuumed: stage('vacuumed'),
      jobsPerSecond: of((r) => r[mode].jobs.jobsPerSecond),
      purgeSeconds: of((r) => r[mode].purge.elapsedMs / 1000),
      vacuumMs: of((r) => r[mode].vacuumMs),
      vacuumsDuringRun: of((r) => r[mode].vacuumsDuringRun.vacuums),
      purgedBytesPerJob: of((r) => (r[mode].purged.totalBytes - r[mode].atStart.totalBytes) / total),
      vacuumedBytesPerJob: of((r) => (r[mode].vacuumed.totalBytes - r[mode].atStart.totalBytes) / total),
      vacuumedToPurged: of((r) => r[mode].vacuumed.totalBytes / r[mode].purged.totalBytes),
      autovacuumRuns: of((r) => r[mode].purged.autovacuumCount),
    };
  }
  figures.vacuumedToServerAfterPurge = of((r) => r.vacuumed.purged.totalBytes / r.server.purged.totalBytes);
  figures.vacuumedToServerJobsPerSecond = of((r) => r.vacuumed.jobs.jobsPerSecond / r.server.jobs.jobsPerSecond);
  const mib = (s) =>
    formatSummary(s.median === null ? s : { ...s, median: s.median / MiB, min: s.min / MiB, max: s.max / MiB }, 1);
  const rows = [];
  for (const [mode, label] of [
    ['server', 'as the server vacuums'],
    ['vacuumed', `VACUUM every ${vacuumEveryMs / 1000} s`],
  ]) {
    const f = figures[mode];
    for (const [stage, when] of [
      ['atStart', 'freshly migrated'],
      ['completed', 'all completed'],
      ['purged', 'after the purge'],
      ['vacuumed', 'after VACUUM'],
    ]) {
      const s = f[stage];
      rows.push([
        label,
        when,
        mib(s.totalBytes),
        mib(s.tableBytes),
        mib(s.indexBytes),
        formatSummary(s.liveTuples),
        formatSummary(s.deadTuples),
        formatSummary(s.autovacuumCount),
      ]);
    }
  }
  printTable(
    `PostgreSQL jobs table after ${total.toLocaleString('en-US')} jobs ran and were purged (MiB; median (min–max) of ${options.runs} run(s)); server autovacuum = ${parameters.postgres.autovacuum}`,
    ['mode', 'when', 'total', 'table', 'indexes', 'live tuples', 'dead tuples', 'autovacuums'],
    rows,
  );
  for (const mode of MODES) {
    const f = figures[mode];
    console.log(
      `${mode}: through the store ${formatSummary(f.jobsPerSecond)} jobs/s; purge ${formatSummary(f.purgeSeconds, 1)} s; final VACUUM ${formatSummary(f.vacuumMs)} ms`,
    );
  }
  const path = writeResult(NAME, { size: options.size, parameters, figures, runs });
  console.log(`wrote ${path}`);
});
