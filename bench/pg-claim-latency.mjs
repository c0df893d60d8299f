/**
 * PostgreSQL store, claim latency with a big jobs table: Kiln's PostgresStore opened in
 * this process (dist/src/store/postgres/store.js, a pool of 4), on a fresh schema filled
 * straight with SQL (INSERT … SELECT generate_series, in the store's own columns) with
 * 1,000,000 rows: 900,000 completed and a backlog of 100,000 queued noop jobs (one in ten
 * at a priority from 0 to 9, the rest at 5), time-ordered UUIDv7-shaped ids as the API
 * makes, then VACUUM ANALYZE as autovacuum would have done by then. The same backlog alone
 * in a second schema is the baseline: what the completed rows cost. Then, on each schema,
 * calls of the store's own claim path, each timed alone:
 *   - plain: `store.claim({ owner, leaseMs: 30000, batches: 2, micro: null })`, the one
 *     SKIP LOCKED statement, 1,000 calls a run;
 *   - micro: the same with micro = { costs: noop 0.01 ms, budgetMs 2, maxJobs 64 }, the
 *     short transaction that reads up to 128 candidates and claims the batches it forms,
 *     150 calls a run;
 * each claim followed by `store.finish` of what it claimed (completed, timed too), so the
 * claimed rows end as completed rows, as they would in a server. 20 untimed calls first.
 * p50/p99 per call, and the ratio of the big table's to the backlog's; a `SELECT 1` round
 * trip on a pool of its own, timed in the same run, is the floor of any statement. The
 * runs share one fill (each takes ~21,000 jobs off the backlog, and starts with a
 * VACUUM ANALYZE of both tables); which schema goes first alternates. Finally `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of the claim statement
 * and of the micro-batch candidates query on each schema, in a transaction rolled back:
 * the plan's node types (no Sort expected) and its time.
 *
 *   node bench/pg-claim-latency.mjs [--size tiny|full] [--runs N]
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import {
  dropSchema,
  dropStaleSchemas,
  freshSchemaName,
  KILN_SCHEMA_PREFIX,
  openPostgresStore,
  PG_URL,
  planNodeTypes,
  requirePostgres,
  serverSettings,
  claimStatements,
  tableStats,
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

const NAME = 'pg-claim-latency';
const OWNER = 'bench-claim-latency';
const MICRO = { costs: new Map([['noop', 0.01]]), budgetMs: 2, maxJobs: 64, solo: new Set() };
const VARIANTS = {
  plain: { micro: null },
  micro: { micro: MICRO },
};
const WARMUP_CALLS = 20;

/** A UUIDv7-shaped id from a ms timestamp (SQL expression over `ms`): time first, random after. */
const uuidv7 = (ms) =>
  `overlay(overlay(replace(gen_random_uuid()::text, '-', '') PLACING lpad(to_hex(${ms}), 12, '0') FROM 1 FOR 12) PLACING '7' FROM 13 FOR 1)::uuid`;

/**
 * Fills the migrated schema: `completed` completed noop jobs finished over the last hour,
 * then `queued` queued ones ready over the last minute. The statement triggers keep the
 * store's counts right.
 */
async function fill(client, schema, { completed, queued }) {
  const s = `"${schema}"`;
  const started = performance.now();
  if (completed > 0) {
    await client.query(`
INSERT INTO ${s}.jobs (id, type, status, priority, payload, result, attempts, max_attempts, timeout_ms,
  backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, created_at, started_at, finished_at,
  ready_at, ready_seq)
SELECT ${uuidv7('t.at')}, 'noop', 'completed', 5, '{}', '{}', 1, 3, 60000, 1000, 2, 300000, 'full',
  t.at, t.at + 2, t.at + 3, t.at, nextval('${s}.ready_order')
FROM (SELECT ${s}.now_ms() - 3600000 + (i * 3600000::bigint) / ${completed} AS at
      FROM generate_series(1, ${completed}) AS i) AS t`);
  }
  await client.query(`
INSERT INTO ${s}.jobs (id, type, status, priority, payload, attempts, max_attempts, timeout_ms,
  backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, created_at, ready_at, ready_seq)
SELECT ${uuidv7('t.at')}, 'noop', 'queued', t.priority, '{}', 0, 3, 60000, 1000, 2, 300000, 'full',
  t.at, t.at, nextval('${s}.ready_order')
FROM (SELECT ${s}.now_ms() - 60000 + (i * 60000::bigint) / ${queued} AS at,
             CASE WHEN i % 10 = 0 THEN (i / 10) % 10 ELSE 5 END AS priority
      FROM generate_series(1, ${queued}) AS i) AS t`);
  const filledMs = performance.now() - started;
  // The plans a table that was never analyzed gets (a new schema until autovacuum's first ANALYZE).
  const plansNeverAnalyzed = await claimPlans(client, schema);
  const vacuumStarted = performance.now();
  await client.query(`VACUUM ANALYZE ${s}.jobs`);
  return { filledMs, vacuumAnalyzeMs: performance.now() - vacuumStarted, plansNeverAnalyzed };
}

/** `calls` timed claims (each followed by a timed finish of what it claimed); per-call ms. */
async function timeClaims(store, variant, calls) {
  const claimMs = [];
  const finishMs = [];
  let claimed = 0;
  for (let i = 0; i < WARMUP_CALLS + calls; i++) {
    const t0 = performance.now();
    const batches = await store.claim({ owner: OWNER, leaseMs: 30_000, batches: 2, micro: VARIANTS[variant].micro });
    const t1 = performance.now();
    const jobs = batches.flat();
    if (jobs.length === 0) throw new Error(`the backlog ran dry after ${claimed} claimed jobs`);
    await store.finish(
      jobs.map((job) => ({
        id: job.id,
        attempt: job.attempts,
        owner: OWNER,
        outcome: { kind: 'completed', resultText: '{}' },
      })),
    );
    const t2 = performance.now();
    if (i < WARMUP_CALLS) continue;
    claimMs.push(t1 - t0);
    finishMs.push(t2 - t1);
    claimed += jobs.length;
  }
  const stats = (samples) => {
    const sorted = [...samples].sort((a, b) => a - b);
    return { p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99), maxMs: sorted.at(-1) };
  };
  return { calls, jobsPerCall: claimed / calls, claim: stats(claimMs), finish: stats(finishMs) };
}

/** `SELECT 1` round trips on a pool of its own: the floor under any statement. */
async function timeRoundTrips(pool, calls) {
  const samples = [];
  for (let i = 0; i < WARMUP_CALLS + calls; i++) {
    const t0 = performance.now();
    await pool.query('SELECT 1');
    if (i >= WARMUP_CALLS) samples.push(performance.now() - t0);
  }
  samples.sort((a, b) => a - b);
  return { p50Ms: percentile(samples, 50), p99Ms: percentile(samples, 99) };
}

/**
 * EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of a statement, each time in a transaction that
 * is rolled back; three times on one connection, the last one kept (the first pays for
 * the session's cold caches: the catalog, the count trigger's plpgsql).
 */
async function explain(client, text, values) {
  let result;
  for (let i = 0; i < 3; i++) {
    await client.query('BEGIN');
    try {
      [result] = (await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, values)).rows[0]['QUERY PLAN'];
    } finally {
      await client.query('ROLLBACK');
    }
  }
  const nodeTypes = planNodeTypes(result.Plan);
  return {
    nodeTypes,
    hasSort: nodeTypes.some((type) => type.startsWith('Sort') || type.startsWith('Incremental Sort')),
    executionMs: result['Execution Time'],
    planningMs: result['Planning Time'],
    triggers: (result.Triggers ?? []).map((t) => ({ name: t['Trigger Name'], ms: t.Time, calls: t.Calls })),
    sharedHitBlocks: result.Plan['Shared Hit Blocks'],
    sharedReadBlocks: result.Plan['Shared Read Blocks'],
  };
}

/** The plans of the plain claim and of the micro-batch candidates query on `schema`. */
async function claimPlans(client, schema) {
  const sql = await claimStatements(schema);
  return {
    claim: await explain(client, sql.claim.text, ['bench-explain', 2, 30_000]),
    claimCandidates: await explain(client, sql.claimCandidates.text, [128]),
  };
}

await runBenchmark(NAME, async () => {
  const options = benchOptions({ full: 3, tiny: 1 });
  const rows = options.tiny ? 20_000 : 1_000_000;
  const backlog = options.tiny ? 15_000 : 100_000;
  const calls = options.tiny ? { plain: 200, micro: 10 } : { plain: 1000, micro: 150 };
  const perRun = (WARMUP_CALLS + calls.plain) * 2 + (WARMUP_CALLS + calls.micro) * 2 * MICRO.maxJobs;
  if (perRun * options.runs > backlog) {
    throw new Error(
      `${options.runs} runs would claim ${perRun * options.runs} jobs, more than the backlog of ${backlog}: at most ${Math.floor(backlog / perRun)} runs`,
    );
  }
  const version = await requirePostgres();
  await dropStaleSchemas([KILN_SCHEMA_PREFIX]);
  const parameters = {
    rows,
    backlog,
    completedRows: rows - backlog,
    calls,
    warmupCalls: WARMUP_CALLS,
    plain: 'store.claim({ owner, leaseMs: 30000, batches: 2, micro: null })',
    micro: 'store.claim({ …, batches: 2, micro: { costs: noop → 0.01 ms, budgetMs: 2, maxJobs: 64, solo: ∅ } })',
    finish: 'store.finish of every job the claim answered, completed',
    store: 'PostgresStore from dist/, in the benchmark process, pool of 4',
    baseline: `the same backlog alone (${backlog.toLocaleString('en-US')} queued rows), same calls, same run`,
    postgres: await serverSettings(),
    runs: options.runs,
  };
  console.log(
    `${NAME}: ${rows} rows (${backlog} queued) against the backlog alone, PostgreSQL ${version}, ${options.runs} run(s)`,
  );

  const schemas = { big: freshSchemaName(KILN_SCHEMA_PREFIX), backlog: freshSchemaName(KILN_SCHEMA_PREFIX) };
  const stores = {};
  const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
  try {
    const fills = {};
    for (const [name, schema] of Object.entries(schemas)) {
      stores[name] = await openPostgresStore({ schema, poolSize: 4 });
      fills[name] = await withPg((client) =>
        fill(client, schema, { completed: name === 'big' ? rows - backlog : 0, queued: backlog }),
      );
      console.log(
        `  filled ${name === 'big' ? rows : backlog} rows in ${(fills[name].filledMs / 1000).toFixed(1)} s (VACUUM ANALYZE ${(fills[name].vacuumAnalyzeMs / 1000).toFixed(1)} s)`,
      );
    }
    const sizes = {};
    await withPg(async (client) => {
      for (const [name, schema] of Object.entries(schemas)) sizes[name] = await tableStats(client, schema, 'jobs');
    });

    const runs = [];
    for (let run = 1; run <= options.runs; run++) {
      // Each run starts from a vacuumed table (the rows the previous run claimed leave dead
      // entries in the claim index, which this server's autovacuum may not clear).
      if (run > 1) {
        await withPg(async (client) => {
          for (const schema of Object.values(schemas)) await client.query(`VACUUM ANALYZE "${schema}".jobs`);
        });
      }
      const order = run % 2 === 1 ? ['big', 'backlog'] : ['backlog', 'big'];
      const record = { run, order, roundTrip: await timeRoundTrips(pool, 500) };
      for (const variant of Object.keys(VARIANTS)) {
        record[variant] = {};
        for (const name of order) record[variant][name] = await timeClaims(stores[name], variant, calls[variant]);
        const { big, backlog: alone } = record[variant];
        record[variant].claimP50ToBacklog = big.claim.p50Ms / alone.claim.p50Ms;
        record[variant].claimP99ToBacklog = big.claim.p99Ms / alone.claim.p99Ms;
        record[variant].claimP50ToRoundTrip = big.claim.p50Ms / record.roundTrip.p50Ms;
      }
      runs.push(record);
      const line = (variant) => {
        const { big, backlog: alone } = record[variant];
        return `${variant}: claim p50/p99 ${big.claim.p50Ms.toFixed(2)}/${big.claim.p99Ms.toFixed(2)} ms (backlog alone ${alone.claim.p50Ms.toFixed(2)}/${alone.claim.p99Ms.toFixed(2)}), finish ${big.finish.p50Ms.toFixed(2)}/${big.finish.p99Ms.toFixed(2)} ms, ${big.jobsPerCall.toFixed(1)} jobs/call`;
      };
      console.log(
        `  run ${run}: ${line('plain')}; ${line('micro')}; SELECT 1 p50 ${record.roundTrip.p50Ms.toFixed(3)} ms`,
      );
    }

    // The plans, on the tables as the runs left them (analyzed at the fill), and the tables' state.
    const plans = {};
    const after = {};
    await withPg(async (client) => {
      for (const [name, schema] of Object.entries(schemas)) {
        plans[name] = await claimPlans(client, schema);
        after[name] = await tableStats(client, schema, 'jobs');
      }
    });
    const describe = (plan) => `${plan.nodeTypes.join(' → ')} (${plan.executionMs.toFixed(2)} ms)`;
    for (const [name, plan] of Object.entries(plans)) {
      const before = fills[name].plansNeverAnalyzed;
      console.log(`  ${name}: claim plan ${describe(plan.claim)}; never analyzed: ${describe(before.claim)}`);
      console.log(
        `  ${name}: micro-batch candidates plan ${describe(plan.claimCandidates)}; never analyzed: ${describe(before.claimCandidates)}`,
      );
    }
    if (Object.values(plans).some((p) => p.claim.hasSort || p.claimCandidates.hasSort)) {
      console.log('!!! a claim plan sorts on the analyzed table: it no longer reads the claim index in order !!!');
    }
    const sortsUnanalyzed = Object.values(fills).some(
      (f) => f.plansNeverAnalyzed.claim.hasSort || f.plansNeverAnalyzed.claimCandidates.hasSort,
    );
    if (sortsUnanalyzed) console.log('note: before its first ANALYZE, a claim plan sorts every queued row');

    const of = (pick) => summarize(runs.map(pick));
    const figures = {};
    for (const variant of Object.keys(VARIANTS)) {
      figures[variant] = {
        claimP50Ms: of((r) => r[variant].big.claim.p50Ms),
        claimP99Ms: of((r) => r[variant].big.claim.p99Ms),
        finishP50Ms: of((r) => r[variant].big.finish.p50Ms),
        finishP99Ms: of((r) => r[variant].big.finish.p99Ms),
        jobsPerCall: of((r) => r[variant].big.jobsPerCall),
        backlogClaimP50Ms: of((r) => r[variant].backlog.claim.p50Ms),
        backlogClaimP99Ms: of((r) => r[variant].backlog.claim.p99Ms),
        claimP50ToBacklog: of((r) => r[variant].claimP50ToBacklog),
        claimP99ToBacklog: of((r) => r[variant].claimP99ToBacklog),
        claimP50ToRoundTrip: of((r) => r[variant].claimP50ToRoundTrip),
      };
    }
    figures.roundTripP50Ms = of((r) => r.roundTrip.p50Ms);
    figures.planHasSort = Object.values(plans).some((p) => p.claim.hasSort || p.claimCandidates.hasSort);
    figures.planHasSortNeverAnalyzed = sortsUnanalyzed;
    figures.candidatesNeverAnalyzedMs = fills.big.plansNeverAnalyzed.claimCandidates.executionMs;
    figures.candidatesAnalyzedMs = plans.big.claimCandidates.executionMs;
    printTable(
      `PostgreSQL claim latency, ${rows.toLocaleString('en-US')} rows (${backlog.toLocaleString('en-US')} queued) vs the backlog alone; median (min–max) of ${options.runs} run(s), ms`,
      [
        'claim',
        'jobs/call',
        'p50',
        'p99',
        'backlog alone p50',
        'p99',
        'p50 ÷ alone',
        'p99 ÷ alone',
        'finish p50',
        'p99',
      ],
      Object.keys(VARIANTS).map((variant) => {
        const f = figures[variant];
        return [
          variant,
          formatSummary(f.jobsPerCall, 1),
          formatSummary(f.claimP50Ms, 2),
          formatSummary(f.claimP99Ms, 2),
          formatSummary(f.backlogClaimP50Ms, 2),
          formatSummary(f.backlogClaimP99Ms, 2),
          formatSummary(f.claimP50ToBacklog, 2),
          formatSummary(f.claimP99ToBacklog, 2),
          formatSummary(f.finishP50Ms, 2),
          formatSummary(f.finishP99Ms, 2),
        ];
      }),
    );
    console.log(`SELECT 1 round trip p50: ${formatSummary(figures.roundTripP50Ms, 3)} ms`);
    const path = writeResult(NAME, { size: options.size, parameters, fills, sizes, after, plans, figures, runs });
    console.log(`wrote ${path}`);
  } finally {
    await pool.end();
    for (const store of Object.values(stores)) await store.close();
    for (const schema of Object.values(schemas)) await dropSchema(schema);
  }
});
