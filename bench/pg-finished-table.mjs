/**
 * PostgreSQL store, finished jobs out of the hot table (migration 021): what the database
 * spends per finish, and what retention of a day of finished jobs takes, when the finish
 * moves a job into `jobs_done` (partitioned by status and finish time), against the same
 * finish written in place in `jobs`, as every finish was before the step.
 *
 * Each variant runs on a fresh schema that Kiln's PostgresStore (dist/, in this process,
 * pool of 10, its clock a fake one that starts at the real time) created and migrated.
 * `total` noop jobs are inserted through `store.insert` (1,000 a call) and claimed through
 * `store.claim` (500 a call, no micro-batching); then they are finished over a day of the
 * store's clock, a 24th of them in each hour, and the finish is metered (lib/pg-cost.mjs:
 * WAL bytes, the server's CPU, the WAL's records), 500 jobs a statement, 3 loops at once
 * (the insert and the claim are metered too, the same in both variants):
 *   - `move`: Kiln's own `store.finish` (the fenced plpgsql finish, its triggers, the move);
 *     the store's purge makes the day's partitions first, as the minute's retention does
 *     ahead of the clock;
 *   - `update`: one plain `UPDATE … WHERE id = ANY($1) AND status = 'running' AND
 *     lease_owner = $2` setting what a completed finish sets, in `jobs`: the write the
 *     finish made before the step, without its fence's reads.
 * Then 2,000 reads of a finished job by id (`store.get`, both tables, random), and
 * retention with a day's (`KILN_RETAIN_COMPLETED_MS`' default) once the store's clock is
 * past it: `store.purge('completed', day, 1000)` until it answers less (for `move` the
 * partitions are dropped; for `update` the rows are deleted from `jobs`). Then a plain
 * `VACUUM` of `jobs`, and the size of `jobs` (and `jobs_done`) before and after. Which
 * variant goes first alternates from run to run.
 *
 *   node bench/pg-finished-table.mjs [--size tiny|full] [--runs N]
 */
import { performance } from 'node:perf_hooks';
import { pgCostMark, pgCostSince } from './lib/pg-cost.mjs';
import {
  dropSchema,
  dropStaleSchemas,
  freshSchemaName,
  KILN_SCHEMA_PREFIX,
  noopJobMaker,
  openPostgresStore,
  requirePostgres,
  serverSettings,
  withPg,
} from './lib/postgres.mjs';
import {
  benchOptions,
  formatSummary,
  percentile,
  printTable,
  runBenchmark,
  summarize,
  writeResult,
} from './lib/report.mjs';

const NAME = 'pg-finished-table';
const OWNER = 'bench-finished';
const INSERT_BATCH = 1000;
const CLAIM_BATCH = 500;
const FINISH_BATCH = 500;
const FINISHERS = 3;
const PURGE_BATCH = 1000;
const READS = 2000;
const HOUR_MS = 3_600_000;
const VARIANTS = ['move', 'update'];
const DAY_MS = 24 * HOUR_MS;
const MiB = 2 ** 20;

/** What a completed finish sets (the columns a read, a rescue or a retry would see); $3 is the store's clock. */
const COMPLETED_COLUMNS = {
  status: `'completed'`,
  result: `'{}'`,
  error: 'NULL',
  finished_at: '$3::bigint',
  lease_owner: 'NULL',
  lease_expires_at: 'NULL',
  progress: 'NULL',
};

async function insertAll(store, total, newJob) {
  for (let inserted = 0; inserted < total; inserted += INSERT_BATCH) {
    const now = Date.now();
    const result = await store.insert(
      Array.from({ length: Math.min(INSERT_BATCH, total - inserted) }, () => newJob(now)),
    );
    if (!result.ok) throw new Error(`an insert was refused: ${result.reason}`);
  }
}

async function claimAll(store, total) {
  const claimed = [];
  while (claimed.length < total) {
    const jobs = (await store.claim({ owner: OWNER, leaseMs: 600_000, batches: CLAIM_BATCH, micro: null })).flat();
    if (jobs.length === 0) throw new Error(`claimed ${claimed.length} of ${total} jobs, then none`);
    claimed.push(...jobs);
  }
  return claimed;
}

/**
 * Finishes the claimed jobs by `variant` over a day of the store's clock (`clock.ms`), a 24th
 * in each hour, FINISH_BATCH a statement, FINISHERS at once; answers ms spent finishing.
 */
async function finishAll(store, variant, s, claimed, clock) {
  const sql = `UPDATE ${s}.jobs SET ${Object.entries(COMPLETED_COLUMNS)
    .map(([column, value]) => `${column} = ${value}`)
    .join(', ')}
     WHERE id = ANY ($1::uuid[]) AND status = 'running' AND lease_owner = $2`;
  const start = clock.ms;
  let finished = 0;
  let spent = 0;
  const perHour = Math.ceil(claimed.length / 24);
  for (let hour = 0; hour < 24; hour++) {
    clock.ms = start + hour * HOUR_MS;
    const chunks = [];
    const share = claimed.slice(hour * perHour, (hour + 1) * perHour);
    for (let i = 0; i < share.length; i += FINISH_BATCH) chunks.push(share.slice(i, i + FINISH_BATCH));
    const loop = async (client) => {
      for (let chunk = chunks.shift(); chunk !== undefined; chunk = chunks.shift()) {
        if (variant === 'move') {
          const answers = await store.finish(
            chunk.map((job) => ({
              id: job.id,
              attempt: job.attempts,
              owner: OWNER,
              outcome: { kind: 'completed', resultText: '{}' },
            })),
          );
          finished += answers.filter((answer) => answer?.status === 'completed').length;
        } else {
          const result = await client.query({ name: `${variant}-finish`, text: sql }, [
            chunk.map((job) => job.id),
            OWNER,
            clock.ms,
          ]);
          finished += result.rowCount;
        }
      }
    };
    const started = performance.now();
    await Promise.all(Array.from({ length: FINISHERS }, () => withPg(loop)));
    spent += performance.now() - started;
  }
  if (finished !== claimed.length) throw new Error(`${variant}: finished ${finished} of ${claimed.length}`);
  return spent;
}

/** READS reads of a finished job by id (`store.get`: both tables); answers µs per read, p50 and p99. */
async function readsById(store, variant, ids) {
  const times = [];
  for (let i = 0; i < READS; i++) {
    const id = ids[(i * 7919) % ids.length];
    const started = performance.now();
    const job = await store.get(id);
    times.push((performance.now() - started) * 1000);
    if (job?.status !== 'completed') throw new Error(`${variant}: read of ${id} found ${job?.status}`);
  }
  times.sort((a, b) => a - b);
  return { p50Us: percentile(times, 50), p99Us: percentile(times, 99) };
}

/** The on-disk size of `jobs` and of `jobs_done`'s partitions, with their indexes, in bytes. */
async function sizes(s) {
  return withPg(async (client) => {
    const { rows } = await client.query(
      `SELECT pg_total_relation_size('${s}.jobs'::regclass)::bigint AS jobs,
              (SELECT coalesce(sum(pg_total_relation_size(relid)), 0)
                 FROM pg_partition_tree(to_regclass('${s}.jobs_done')) WHERE isleaf)::bigint AS done`,
    );
    return { jobsBytes: Number(rows[0].jobs), doneBytes: Number(rows[0].done) };
  });
}

/** Retention with a day's, once the store's clock is past it for every job: the store's purge until it is done. */
async function retention(store, clock) {
  clock.ms += DAY_MS + 2 * HOUR_MS;
  const started = performance.now();
  let purged = 0;
  let calls = 0;
  for (;;) {
    const n = await store.purge('completed', DAY_MS, PURGE_BATCH);
    calls++;
    purged += n;
    if (n < PURGE_BATCH) break;
  }
  return { purged, calls, elapsedMs: performance.now() - started };
}

/** WAL by relation with the partitions of jobs_done (named by their span) and their indexes taken together. */
function byPartition(cost) {
  const merged = {};
  for (const [relation, bytes] of Object.entries(cost.walBytesPerJobByRelation)) {
    const name = relation
      .replace(/^(jobs_done_(completed|ended))_\d+_\d+_id_idx$/, "$1, the hour's partitions: their id index")
      .replace(/^(jobs_done_(completed|ended))_\d+_\d+$/, "$1, the hour's partitions");
    merged[name] = (merged[name] ?? 0) + bytes;
  }
  return { ...cost, walBytesPerJobByRelation: merged };
}

async function oneRun(run, variant, total, newJob) {
  const schema = freshSchemaName(KILN_SCHEMA_PREFIX);
  const s = `"${schema}"`;
  let store = null;
  try {
    const clock = { ms: Date.now() };
    store = await openPostgresStore({ schema, poolSize: 10, clock: () => clock.ms });
    const insertMark = await pgCostMark();
    await insertAll(store, total, newJob);
    const insertCost = await pgCostSince(insertMark, total, { byRelation: true });
    const claimMark = await pgCostMark();
    const claimed = await claimAll(store, total);
    const claimCost = await pgCostSince(claimMark, total, { byRelation: true });
    // The minute's retention makes the partitions ahead of the clock as it goes (nothing is
    // past a day yet): made for the whole day here, so the finish's figures hold no DDL.
    const start = clock.ms;
    for (let hour = 0; hour < 24; hour++) {
      clock.ms = start + hour * HOUR_MS;
      await store.purge('completed', DAY_MS, PURGE_BATCH);
    }
    clock.ms = start;
    const mark = await pgCostMark();
    const finishMs = await finishAll(store, variant, s, claimed, clock);
    const cost = byPartition(await pgCostSince(mark, total, { byRelation: true }));
    const reads = await readsById(
      store,
      variant,
      claimed.map((job) => job.id),
    );
    const before = await sizes(s);
    const purge = await retention(store, clock);
    if (purge.purged !== total) throw new Error(`${variant}: retention removed ${purge.purged} of ${total} jobs`);
    const purged = await sizes(s);
    const vacuumStarted = performance.now();
    await withPg((client) => client.query(`VACUUM ${s}.jobs`));
    const vacuumMs = performance.now() - vacuumStarted;
    const vacuumed = await sizes(s);
    console.log(
      `  run ${run}, ${variant}: ${cost.walBytesPerJob.toFixed(0)} WAL bytes and ${cost.cpuUsPerJob?.toFixed(1) ?? '—'} µs of PostgreSQL CPU a finish; ` +
        `read by id p50 ${reads.p50Us.toFixed(0)} µs; retention ${purge.elapsedMs.toFixed(0)} ms (${purge.calls} statements); ` +
        `jobs ${(purged.jobsBytes / MiB).toFixed(1)} MiB after it, ${(vacuumed.jobsBytes / MiB).toFixed(1)} MiB after VACUUM (${vacuumMs.toFixed(0)} ms)`,
    );
    return { run, variant, insertCost, claimCost, finishMs, cost, reads, before, purge, purged, vacuumMs, vacuumed };
  } finally {
    if (store !== null) await store.close();
    await dropSchema(schema);
  }
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 });
  const total = options.tiny ? 2_000 : 200_000;
  const version = await requirePostgres();
  await dropStaleSchemas([KILN_SCHEMA_PREFIX]);
  const newJob = await noopJobMaker();
  const parameters = {
    total,
    insert: `store.insert of ${INSERT_BATCH} noop jobs a call`,
    claim: `store.claim of ${CLAIM_BATCH} a call (micro: null), all before the finishes`,
    finish: `${FINISH_BATCH} jobs a statement, ${FINISHERS} loops at once; only this phase is metered`,
    variants: {
      move: 'store.finish (the fenced plpgsql finish, its triggers, the move into jobs_done)',
      update: 'one UPDATE of the rows in jobs, without the fence: the write of the finish before migration 021',
    },
    finishes: 'over a day of the store clock, a 24th of the jobs in each hour',
    reads: `${READS} reads by id of finished jobs, prepared, one connection`,
    retention: `store.purge('completed', one day, ${PURGE_BATCH}) until it answers less, the clock a day and 2 hours past the first finish`,
    store: 'PostgresStore from dist/, in the benchmark process, pool of 10',
    postgres: await serverSettings(),
    runs: options.runs,
  };
  console.log(`${NAME}: ${total} noop jobs a variant, PostgreSQL ${version}, ${options.runs} run(s)`);

  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    const order = run % 2 === 1 ? VARIANTS : [...VARIANTS].reverse();
    const record = { run, order };
    for (const variant of order) record[variant] = await oneRun(run, variant, total, newJob);
    runs.push(record);
  }

  const of = (pick) => summarize(runs.map(pick));
  const figures = {};
  for (const variant of VARIANTS) {
    const at = (r) => r[variant];
    figures[variant] = {
      insertWalBytesPerJob: of((r) => at(r).insertCost.walBytesPerJob),
      insertIndexInsertsPerJob: of((r) => at(r).insertCost.indexInsertsPerJob),
      claimWalBytesPerJob: of((r) => at(r).claimCost.walBytesPerJob),
      claimIndexInsertsPerJob: of((r) => at(r).claimCost.indexInsertsPerJob),
      walBytesPerJob: of((r) => at(r).cost.walBytesPerJob),
      cpuUsPerJob: of((r) => at(r).cost.cpuUsPerJob),
      heapUpdatesPerJob: of((r) => at(r).cost.heapUpdatesPerJob),
      heapInsertsPerJob: of((r) => at(r).cost.heapInsertsPerJob),
      heapDeletesPerJob: of((r) => at(r).cost.heapDeletesPerJob),
      heapLocksPerJob: of((r) => at(r).cost.heapLocksPerJob),
      indexInsertsPerJob: of((r) => at(r).cost.indexInsertsPerJob),
      finishJobsPerSecond: of((r) => (total / at(r).finishMs) * 1000),
      readP50Us: of((r) => at(r).reads.p50Us),
      readP99Us: of((r) => at(r).reads.p99Us),
      retentionMs: of((r) => at(r).purge.elapsedMs),
      jobsMiBBefore: of((r) => at(r).before.jobsBytes / MiB),
      doneMiBBefore: of((r) => at(r).before.doneBytes / MiB),
      jobsMiBAfterRetention: of((r) => at(r).purged.jobsBytes / MiB),
      jobsMiBAfterVacuum: of((r) => at(r).vacuumed.jobsBytes / MiB),
      vacuumMs: of((r) => at(r).vacuumMs),
    };
  }
  const row = (label, key, digits = 0) => [
    label,
    ...VARIANTS.map((variant) => formatSummary(figures[variant][key], digits)),
  ];
  printTable(
    `${NAME} (${total} noop jobs; median (min–max) of ${options.runs} run(s))`,
    ['per job, or as named', 'store.finish, moved to jobs_done', 'update in place (before the step)'],
    [
      row('WAL bytes an insert (the same in each)', 'insertWalBytesPerJob'),
      row('index entries an insert', 'insertIndexInsertsPerJob', 2),
      row('WAL bytes a claim (the same in each)', 'claimWalBytesPerJob'),
      row('index entries a claim', 'claimIndexInsertsPerJob', 2),
      row('WAL bytes a finish', 'walBytesPerJob'),
      row('PostgreSQL CPU µs a finish', 'cpuUsPerJob', 1),
      row('rows updated (not HOT)', 'heapUpdatesPerJob', 2),
      row('rows inserted', 'heapInsertsPerJob', 2),
      row('rows deleted', 'heapDeletesPerJob', 2),
      row('rows locked', 'heapLocksPerJob', 2),
      row('index entries inserted', 'indexInsertsPerJob', 2),
      row('finishes a second', 'finishJobsPerSecond'),
      row('read by id p50 µs', 'readP50Us'),
      row('read by id p99 µs', 'readP99Us'),
      row('retention of the day, ms', 'retentionMs'),
      row('jobs MiB before retention', 'jobsMiBBefore', 1),
      row('jobs_done MiB before retention', 'doneMiBBefore', 1),
      row('jobs MiB after retention', 'jobsMiBAfterRetention', 1),
      row('jobs MiB after VACUUM', 'jobsMiBAfterVacuum', 1),
      row('that VACUUM, ms', 'vacuumMs'),
    ],
  );
  // Where each phase's WAL goes, relation by relation: the insert and the claim (the same
  // in each), and the finish of each variant. Partitions of jobs_done are named by their span.
  const phases = [
    ['insert', (r) => r.move.insertCost],
    ['claim', (r) => r.move.claimCost],
    ['finish (move)', (r) => r.move.cost],
    ['finish (update in place)', (r) => r.update.cost],
  ];
  const relations = [
    ...new Set(runs.flatMap((r) => phases.flatMap(([, at]) => Object.keys(at(r).walBytesPerJobByRelation)))),
  ];
  figures.walBytesPerJobByRelation = Object.fromEntries(
    phases.map(([phase, at]) => [
      phase,
      Object.fromEntries(
        relations.map((relation) => [relation, of((r) => at(r).walBytesPerJobByRelation[relation] ?? 0)]),
      ),
    ]),
  );
  const weight = (relation) =>
    phases.reduce((sum, [phase]) => sum + figures.walBytesPerJobByRelation[phase][relation].median, 0);
  printTable(
    `${NAME}: WAL bytes per job by the relation written (median of ${options.runs} run(s))`,
    ['relation', ...phases.map(([phase]) => phase)],
    relations
      .filter((relation) => weight(relation) >= 1)
      .sort((a, b) => weight(b) - weight(a))
      .map((relation) => [
        relation,
        ...phases.map(([phase]) => figures.walBytesPerJobByRelation[phase][relation].median.toFixed(0)),
      ]),
  );
  writeResult(NAME, { size: options.size, parameters, runs, figures });
});
