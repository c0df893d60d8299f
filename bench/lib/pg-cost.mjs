/**
 * What a stretch of work cost the PostgreSQL server, read from the server itself, so that
 * Kiln and graphile-worker are judged by the same meter:
 *   - WAL bytes: `pg_current_wal_lsn()` before and after;
 *   - the WAL's records by kind (pg_walinspect's `pg_get_wal_stats`): heap rows inserted,
 *     updated (HOT or not), deleted and locked, b-tree index entries inserted, commits;
 *   - the server's CPU time: every `postgres` process's user + system time from /proc, plus
 *     the postmaster's reaped children (a backend that exits during the stretch, a
 *     producer's connection, still counts). Only where the server runs on this machine;
 *     null elsewhere.
 * The whole server is metered, background writers and autovacuum included: run nothing else
 * on it while measuring.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { withPg } from './postgres.mjs';

const CLOCK_TICKS_PER_SECOND = 100; // _SC_CLK_TCK on Linux

/** The fields of /proc/<pid>/stat after the command's closing parenthesis, or null. */
function statFields(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = text.lastIndexOf(')');
    return { comm: text.slice(text.indexOf('(') + 1, close), fields: text.slice(close + 2).split(' ') };
  } catch {
    return null;
  }
}

/** CPU seconds of the PostgreSQL processes of this machine (see above), or null when there are none. */
export function postgresCpuSeconds() {
  const processes = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = statFields(name);
    if (stat !== null && stat.comm === 'postgres') processes.set(Number(name), stat.fields);
  }
  if (processes.size === 0) return null;
  let ticks = 0;
  for (const fields of processes.values()) {
    // After the command: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    ticks += Number(fields[11]) + Number(fields[12]);
    const postmaster = !processes.has(Number(fields[1]));
    if (postmaster) ticks += Number(fields[13]) + Number(fields[14]);
  }
  return ticks / CLOCK_TICKS_PER_SECOND;
}

/** Where the meter stands now: the WAL position and the server's CPU time. */
export async function pgCostMark() {
  return withPg(async (client) => {
    await client.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
    const { rows } = await client.query('SELECT pg_current_wal_lsn()::text AS lsn');
    return { lsn: rows[0].lsn, cpuSeconds: postgresCpuSeconds() };
  });
}

const RECORD_KINDS = {
  heapInserts: ['Heap/INSERT', 'Heap2/MULTI_INSERT'],
  heapUpdates: ['Heap/UPDATE'],
  heapHotUpdates: ['Heap/HOT_UPDATE'],
  heapDeletes: ['Heap/DELETE'],
  heapLocks: ['Heap/LOCK'],
  indexInserts: ['Btree/INSERT_LEAF', 'Btree/INSERT_POST'],
  commits: ['Transaction/COMMIT'],
};

/**
 * The cost of what ran between two marks, per job: WAL bytes, CPU µs (null where the
 * server is not local) and the WAL's records by kind (see RECORD_KINDS), plus every kind
 * seen with its count for the result file.
 */
export async function pgCostSince(before, jobs, { byRelation = false } = {}) {
  const after = await pgCostMark();
  return withPg(async (client) => {
    const bytes = await client.query('SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::float8 AS bytes', [
      before.lsn,
      after.lsn,
    ]);
    // WAL is read only once it is flushed (the WAL writer does so within wal_writer_delay).
    for (let waited = 0; ; waited += 50) {
      const { rows } = await client.query('SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn AS flushed', [after.lsn]);
      if (rows[0].flushed) break;
      if (waited > 10_000) throw new Error(`the WAL up to ${after.lsn} was not flushed within 10 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const stats = await client.query(
      `SELECT "resource_manager/record_type" AS kind, count::float8 AS count
         FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, true) WHERE count > 0`,
      [before.lsn, after.lsn],
    );
    // A record that starts a new page is named with `+INIT`: the same kind of record.
    const records = {};
    for (const { kind, count } of stats.rows) {
      const name = kind.replace(/\+INIT$/, '');
      records[name] = (records[name] ?? 0) + count;
    }
    const perJob = (kinds) => kinds.reduce((sum, kind) => sum + (records[kind] ?? 0), 0) / jobs;
    return {
      walBytesPerJob: bytes.rows[0].bytes / jobs,
      cpuUsPerJob:
        before.cpuSeconds === null || after.cpuSeconds === null
          ? null
          : ((after.cpuSeconds - before.cpuSeconds) * 1e6) / jobs,
      ...Object.fromEntries(Object.entries(RECORD_KINDS).map(([name, kinds]) => [`${name}PerJob`, perJob(kinds)])),
      records,
      ...(byRelation ? { walBytesPerJobByRelation: await walByRelation(client, before.lsn, after.lsn, jobs) } : {}),
    };
  });
}

/**
 * WAL bytes per job by the relation each record writes (the first block it names: a
 * table, an index, a sequence), named as `regclass` names it; records that name no block
 * (commits, running transactions) under `(none)`. A full-page image counts with its record.
 */
async function walByRelation(client, from, to, jobs) {
  const { rows } = await client.query(
    `SELECT coalesce(pg_filenode_relation(0, w.node::oid)::text, w.node, '(none)') AS relation,
            sum(w.record_length)::float8 AS bytes
       FROM (SELECT substring(block_ref FROM 'rel \\d+/\\d+/(\\d+)') AS node, record_length
               FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)) w
      GROUP BY 1 ORDER BY 2 DESC`,
    [from, to],
  );
  return Object.fromEntries(rows.map((row) => [row.relation.replace(/^.*\./, ''), row.bytes / jobs]));
}
