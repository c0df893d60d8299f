/**
 * PostgreSQL store, the finished-jobs table measured before it is built: what the database
 * would spend per finish, and what retention would take, if a finish moved a job out of
 * the hot `jobs` table into a table partitioned by finish time, against today's finish,
 * which updates the row in place.
 *
 * Each variant runs on a fresh schema that Kiln's PostgresStore (dist/, in this process,
 * pool of 10) created and migrated. `total` noop jobs are inserted through `store.insert`
 * (1,000 a call) and claimed through `store.claim` (500 a call, no micro-batching); then
 * the finish is metered (lib/pg-cost.mjs: WAL bytes, the server's CPU, the WAL's
 * records), 500 jobs a statement, 3 loops at once (the insert and the claim are metered too,
 * the same in every variant: what the finish is weighed against):
 *   - `finish`: Kiln's own `store.finish` (the fenced plpgsql finish, its triggers);
 *   - `update`: one plain `UPDATE … WHERE id = ANY($1) AND status = 'running' AND
 *     lease_owner = $2` setting what a completed finish sets: the write itself, without
 *     the fence's reads;
 *   - `move`: the same jobs deleted from `jobs` and inserted, completed, into `jobs_done`
 *     in one statement (`WITH d AS (DELETE … RETURNING *) INSERT INTO jobs_done SELECT …`).
 *     `jobs_done` has the columns of `jobs` and is partitioned by range of `finished_at`,
 *     one partition an hour for a day back and an hour ahead; each partition indexes `id`
 *     (reads by id), `(status, id)` for the failed and cancelled (lists), `batch`,
 *     `schedule`, and `(dedupe_key, finished_at)` of completed jobs (result reuse): what
 *     `jobs` indexes of finished rows today, less the claim's and the lease's indexes.
 * Then, before retention: 2,000 reads of a finished job by id (random, prepared), from
 * `jobs` for `finish` and `update`, from `jobs` and then `jobs_done` for `move`, there only
 * in the partitions from the job's creation on (a Kiln id is a UUIDv7: its first 48 bits
 * are the creation time in ms, and no job finishes before it was created; PostgreSQL
 * prunes the older partitions as the statement runs). Then retention: for
 * `finish` and `update`, `store.purge('completed', 0, 1000)` until it answers 0; for
 * `move`, `DROP TABLE` of the partition that holds the finished jobs. Then a plain `VACUUM`
 * of `jobs`, and the size of `jobs` (and `jobs_done`) before and after. Which variant goes
 * first rotates from run to run.
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
  purgeCompleted,
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
const VARIANTS = ['finish', 'update', 'move'];
const MiB = 2 ** 20;

/** What a completed finish sets (the columns a read, a rescue or a retry would see), as SQL of the schema `s`. */
const completedColumns = (s) => ({
  status: `'completed'`,
  result: `'{}'`,
  error: 'NULL',
  finished_at: `${s}.now_ms()`,
  lease_owner: 'NULL',
  lease_expires_at: 'NULL',
  progress: 'NULL',
});

/** The partitioned table for finished jobs: one partition an hour from a day back to an hour ahead. */
async function createJobsDone(client, s) {
  await client.query(
    `CREATE TABLE ${s}.jobs_done (LIKE ${s}.jobs INCLUDING DEFAULTS) PARTITION BY RANGE (finished_at)`,
  );
  const hour = Math.floor(Date.now() / HOUR_MS) * HOUR_MS;
  for (let from = hour - 24 * HOUR_MS; from <= hour + HOUR_MS; from += HOUR_MS) {
    await client.query(
      `CREATE TABLE ${s}.jobs_done_${from} PARTITION OF ${s}.jobs_done FOR VALUES FROM (${from}) TO (${from + HOUR_MS})`,
    );
  }
  // Created on the parent, so every partition has them.
  await client.query(`CREATE INDEX jobs_done_id ON ${s}.jobs_done (id)`);
  await client.query(
    `CREATE INDEX jobs_done_status ON ${s}.jobs_done (status, id) WHERE status IN ('failed', 'cancelled')`,
  );
  await client.query(`CREATE INDEX jobs_done_batch ON ${s}.jobs_done (batch, status) WHERE batch IS NOT NULL`);
  await client.query(`CREATE INDEX jobs_done_schedule ON ${s}.jobs_done (schedule, id) WHERE schedule IS NOT NULL`);
  await client.query(
    `CREATE INDEX jobs_done_dedupe ON ${s}.jobs_done (dedupe_key, finished_at) WHERE dedupe_key IS NOT NULL AND status = 'completed'`,
  );
}

/** The move: the jobs' rows deleted from `jobs` and inserted, completed, into `jobs_done`. */
async function moveStatement(client, s) {
  const { rows } = await client.query(
    `SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'jobs' ORDER BY ordinal_position`,
    [s.slice(1, -1)],
  );
  const set = completedColumns(s);
  const columns = rows.map((row) => row.column_name);
  const values = columns.map((column) => set[column] ?? `d.${column}`);
  return `WITH d AS (
      DELETE FROM ${s}.jobs WHERE id = ANY ($1::uuid[]) AND status = 'running' AND lease_owner = $2 RETURNING *)
    INSERT INTO ${s}.jobs_done (${columns.join(', ')}) SELECT ${values.join(', ')} FROM d`;
}

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

/** Finishes the claimed jobs by `variant`, FINISH_BATCH a statement, FINISHERS at once; answers ms. */
async function finishAll(store, variant, s, claimed) {
  const chunks = [];
  for (let i = 0; i < claimed.length; i += FINISH_BATCH) chunks.push(claimed.slice(i, i + FINISH_BATCH));
  const sql =
    variant === 'move'
      ? await withPg((client) => moveStatement(client, s))
      : `UPDATE ${s}.jobs SET ${Object.entries(completedColumns(s))
          .map(([column, value]) => `${column} = ${value}`)
          .join(', ')}
         WHERE id = ANY ($1::uuid[]) AND status = 'running' AND lease_owner = $2`;
  const started = performance.now();
  let finished = 0;
  const loop = async (client) => {
    for (let chunk = chunks.shift(); chunk !== undefined; chunk = chunks.shift()) {
      if (variant === 'finish') {
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
        ]);
        finished += result.rowCount;
      }
    }
  };
  await Promise.all(Array.from({ length: FINISHERS }, () => withPg(loop)));
  if (finished !== claimed.length) throw new Error(`${variant}: finished ${finished} of ${claimed.length}`);
  return performance.now() - started;
}

/** When a UUIDv7 was made: its first 48 bits, ms since the epoch. */
function createdAt(id) {
  return Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
}

/** READS reads of a finished job by id (prepared), on one connection; answers µs per read, p50 and p99. */
async function readsById(variant, s, ids) {
  const text =
    variant === 'move'
      ? `SELECT * FROM ${s}.jobs WHERE id = $1
         UNION ALL SELECT * FROM ${s}.jobs_done WHERE id = $1 AND finished_at >= $2 LIMIT 1`
      : `SELECT * FROM ${s}.jobs WHERE id = $1`;
  return withPg(async (client) => {
    const times = [];
    for (let i = 0; i < READS; i++) {
      const id = ids[(i * 7919) % ids.length];
      const started = performance.now();
      const values = variant === 'move' ? [id, createdAt(id)] : [id];
      const { rows } = await client.query({ name: `${variant}-read`, text }, values);
      times.push((performance.now() - started) * 1000);
      if (rows.length !== 1 || rows[0].status !== 'completed')
        throw new Error(`${variant}: read of ${id} found ${rows.length} rows`);
    }
    times.sort((a, b) => a - b);
    return { p50Us: percentile(times, 50), p99Us: percentile(times, 99) };
  });
}

/** The on-disk size of `jobs` and of `jobs_done`'s partitions, with their indexes, in bytes. */
async function sizes(s) {
  return withPg(async (client) => {
    const { rows } = await client.query(
      `SELECT pg_total_relation_size('${s}.jobs'::regclass)::bigint AS jobs,
              (SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits
                WHERE inhparent = to_regclass('${s}.jobs_done'))::bigint AS done`,
    );
    return { jobsBytes: Number(rows[0].jobs), doneBytes: Number(rows[0].done) };
  });
}

/** Retention of every finished job: the store's purge, or the DROP of the partitions that hold them. */
async function retention(store, variant, s) {
  if (variant !== 'move') return purgeCompleted(store, PURGE_BATCH);
  // A partition past retention is known by its bounds; the count here only checks the figure.
  return withPg(async (client) => {
    const { rows } = await client.query(
      `SELECT inhrelid::regclass::text AS name FROM pg_inherits WHERE inhparent = '${s}.jobs_done'::regclass`,
    );
    let purged = 0;
    let calls = 0;
    let elapsedMs = 0;
    for (const { name } of rows) {
      const count = await client.query(`SELECT count(*)::int AS n FROM ${name}`);
      if (count.rows[0].n === 0) continue;
      const dropStarted = performance.now();
      await client.query(`DROP TABLE ${name}`);
      elapsedMs += performance.now() - dropStarted;
      calls++;
      purged += count.rows[0].n;
    }
    return { purged, calls, elapsedMs };
  });
}

async function oneRun(run, variant, total, newJob) {
  const schema = freshSchemaName(KILN_SCHEMA_PREFIX);
  const s = `"${schema}"`;
  let store = null;
  try {
    store = await openPostgresStore({ schema, poolSize: 10 });
    if (variant === 'move') await withPg((client) => createJobsDone(client, s));
    const insertMark = await pgCostMark();
    await insertAll(store, total, newJob);
    const insertCost = await pgCostSince(insertMark, total, { byRelation: true });
    const claimMark = await pgCostMark();
    const claimed = await claimAll(store, total);
    const claimCost = await pgCostSince(claimMark, total, { byRelation: true });
    const mark = await pgCostMark();
    const finishMs = await finishAll(store, variant, s, claimed);
    const cost = await pgCostSince(mark, total, { byRelation: true });
    const reads = await readsById(
      variant,
      s,
      claimed.map((job) => job.id),
    );
    const before = await sizes(s);
    const purge = await retention(store, variant, s);
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
      finish: 'store.finish (the fenced plpgsql finish, its triggers): today',
      update: 'one UPDATE of the rows in jobs, without the fence',
      move: 'one DELETE from jobs … RETURNING, INSERT INTO jobs_done (partitioned by finished_at, an hour a partition)',
    },
    reads: `${READS} reads by id of finished jobs, prepared, one connection`,
    retention: `finish, update: store.purge('completed', 0, ${PURGE_BATCH}) until 0; move: DROP TABLE of each partition holding jobs`,
    store: 'PostgresStore from dist/, in the benchmark process, pool of 10',
    postgres: await serverSettings(),
    runs: options.runs,
  };
  console.log(`${NAME}: ${total} noop jobs a variant, PostgreSQL ${version}, ${options.runs} run(s)`);

  const runs = [];
  for (let run = 1; run <= options.runs; run++) {
    const order = VARIANTS.map((_, i) => VARIANTS[(i + run - 1) % VARIANTS.length]);
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
    ['per job, or as named', 'finish (today)', 'update in place', 'move to jobs_done'],
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
      row('retention of them all, ms', 'retentionMs'),
      row('jobs MiB before retention', 'jobsMiBBefore', 1),
      row('jobs_done MiB before retention', 'doneMiBBefore', 1),
      row('jobs MiB after retention', 'jobsMiBAfterRetention', 1),
      row('jobs MiB after VACUUM', 'jobsMiBAfterVacuum', 1),
      row('that VACUUM, ms', 'vacuumMs'),
    ],
  );
  // Where each phase's WAL goes, relation by relation: the insert and the claim of today's
  // variant (the same in each), and the finish of today's and of the move.
  const phases = [
    ['insert', (r) => r.finish.insertCost],
    ['claim', (r) => r.finish.claimCost],
    ['finish (today)', (r) => r.finish.cost],
    ['finish (move)', (r) => r.move.cost],
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
