/**
 * The PostgreSQL the pg-* benchmarks run on (BENCH_PG_URL, else the local server with
 * trust auth): a schema of its own per run, named `<prefix>_<pid>_<8 hex>`, dropped at
 * the end; the Kiln store opened in this process from dist/ for the benchmarks that
 * time the store itself; and a few reads of the server's own statistics.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { ROOT_DIR } from './processes.mjs';

export const PG_URL = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** The prefix of the schemas the benchmarks give Kiln (graphile-worker's: lib/graphile.mjs). */
export const KILN_SCHEMA_PREFIX = 'kiln_bench';

/** A schema name no other run uses (Kiln accepts `^[a-z_][a-z0-9_]{0,62}$`). */
export function freshSchemaName(prefix) {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** Runs `work(client)` on a connection of its own, closed after. */
export async function withPg(work) {
  const client = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** Throws, naming the URL's host, when PostgreSQL does not answer; answers the server's version. */
export async function requirePostgres() {
  try {
    return await withPg(async (client) => (await client.query('SHOW server_version')).rows[0].server_version);
  } catch (error) {
    const { host, port } = new URL(PG_URL);
    throw new Error(
      `PostgreSQL at ${host}:${port} is unreachable (${error?.message ?? error}); start it or set BENCH_PG_URL`,
      { cause: error },
    );
  }
}

export async function dropSchema(schema) {
  await withPg((client) => client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
}

/**
 * Drops the schemas an earlier benchmark of this machine left behind when it was killed:
 * named by one of `prefixes` with the pid of a process that no longer exists.
 */
export async function dropStaleSchemas(prefixes) {
  const pattern = new RegExp(`^(${prefixes.join('|')})_(\\d+)_[0-9a-f]{8}$`);
  const alive = (pid) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch (error) {
      return error.code === 'EPERM';
    }
  };
  await withPg(async (client) => {
    const { rows } = await client.query('SELECT nspname FROM pg_namespace');
    for (const { nspname } of rows) {
      const match = pattern.exec(nspname);
      if (match !== null && !alive(Number(match[2]))) {
        await client.query(`DROP SCHEMA IF EXISTS "${nspname}" CASCADE`);
      }
    }
  });
}

/** Settings of the server that bear on the figures, for the result file. */
export async function serverSettings() {
  return withPg(async (client) => {
    const names = [
      'server_version',
      'shared_buffers',
      'synchronous_commit',
      'autovacuum',
      'autovacuum_naptime',
      'max_connections',
      'work_mem',
    ];
    const { rows } = await client.query(
      'SELECT name, current_setting(name) AS value FROM pg_settings WHERE name = ANY($1) ORDER BY name',
      [names],
    );
    return Object.fromEntries(rows.map((r) => [r.name, r.value]));
  });
}

const dist = (...parts) => pathToFileURL(join(ROOT_DIR, 'dist', 'src', ...parts)).href;

/** Kiln's PostgreSQL store, opened (and migrated) in this process: PostgresStore from dist/. */
export async function openPostgresStore({ schema, poolSize = 10, capacity = 50_000_000, clock }) {
  const { PostgresStore } = await import(dist('store', 'postgres', 'store.js'));
  return PostgresStore.open({ url: PG_URL, schema, poolSize, capacity, ...(clock === undefined ? {} : { clock }) });
}

/** The claim's statements templated for `schema` (dist/src/store/postgres/claim.js). */
export async function claimStatements(schema) {
  const { claimStatements: statements } = await import(dist('store', 'postgres', 'claim.js'));
  return statements(schema);
}

/**
 * `newJob(now)`: a job as the API would hand the store a `{"type":"noop"}` submission:
 * Kiln's own ids (UUIDv7, dist/src/jobs/ids.js) and defaults (dist/src/contract/job.js).
 */
export async function noopJobMaker() {
  const { newJobId } = await import(dist('jobs', 'ids.js'));
  const { JOB_DEFAULTS } = await import(dist('contract', 'job.js'));
  return (now = Date.now()) => ({
    id: newJobId(now),
    type: 'noop',
    priority: JOB_DEFAULTS.priority,
    payload: {},
    maxAttempts: JOB_DEFAULTS.maxAttempts,
    timeoutMs: JOB_DEFAULTS.timeoutMs,
    backoff: JOB_DEFAULTS.backoff,
    idempotencyKey: null,
    dependsOn: [],
    metadata: {},
    runAt: null,
    createdAt: now,
  });
}

/**
 * `store.purge('completed', 0, batch)` until it answers 0: every completed job deleted, as
 * retention would; answers how many, in how many calls and how long it took.
 */
export async function purgeCompleted(store, batch) {
  const started = performance.now();
  let purged = 0;
  let calls = 0;
  for (;;) {
    const n = await store.purge('completed', 0, batch);
    calls++;
    if (n === 0) break;
    purged += n;
  }
  return { purged, calls, elapsedMs: performance.now() - started };
}

/** Sizes of a table and its statistics (pg_stat_user_tables). */
export async function tableStats(client, schema, table) {
  const name = `"${schema}"."${table}"`;
  const { rows } = await client.query(
    `SELECT pg_total_relation_size($1::regclass)::bigint AS total_bytes,
            pg_relation_size($1::regclass)::bigint AS table_bytes,
            pg_indexes_size($1::regclass)::bigint AS index_bytes,
            s.n_live_tup::bigint AS live_tuples, s.n_dead_tup::bigint AS dead_tuples,
            s.autovacuum_count::bigint AS autovacuum_count, s.vacuum_count::bigint AS vacuum_count,
            s.autoanalyze_count::bigint AS autoanalyze_count,
            s.last_autovacuum, s.last_vacuum
     FROM pg_stat_user_tables s WHERE s.relid = $1::regclass`,
    [name],
  );
  const row = rows[0];
  const indexes = await client.query(
    `SELECT indexrelid::regclass::text AS name, pg_relation_size(indexrelid)::bigint AS bytes
     FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1`,
    [name],
  );
  const number = (v) => (v === null ? null : Number(v));
  return {
    totalBytes: number(row.total_bytes),
    tableBytes: number(row.table_bytes),
    indexBytes: number(row.index_bytes),
    liveTuples: number(row.live_tuples),
    deadTuples: number(row.dead_tuples),
    autovacuumCount: number(row.autovacuum_count),
    vacuumCount: number(row.vacuum_count),
    autoanalyzeCount: number(row.autoanalyze_count),
    lastAutovacuum: row.last_autovacuum === null ? null : new Date(row.last_autovacuum).toISOString(),
    indexes: Object.fromEntries(indexes.rows.map((r) => [r.name.split('.').at(-1), Number(r.bytes)])),
  };
}

/** The node types of an `EXPLAIN (FORMAT JSON)` plan, depth first (init plans and sub plans included). */
export function planNodeTypes(plan) {
  const types = [];
  const walk = (node) => {
    const index = node['Index Name'] === undefined ? '' : ` using ${node['Index Name']}`;
    types.push(`${node['Node Type']}${index}`);
    for (const child of node.Plans ?? []) walk(child);
  };
  walk(plan);
  return types;
}
