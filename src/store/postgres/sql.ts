import { createHash } from 'node:crypto';
import { PENDING_STATUSES } from '../core/statuses.js';
import type { JobStatus } from '../../contract/job.js';

/**
 * What the statements of the PostgreSQL store share. Each facet templates its own
 * statements once per schema, next to the code that runs them. Every time that decides
 * something (ready, due, lease expiry, finish, retention) is `now_ms()`, the database's
 * clock; callers pass durations.
 */

export const PENDING_SQL = `(${PENDING_STATUSES.map((status) => `'${status}'`).join(', ')})`;

/** Columns of a job as core/rows.ts names them (it maps the rows of both stores). */
export const SUMMARY_COLUMNS =
  'id::text AS id, type, status, priority, error, attempts, max_attempts, snoozes, interruptions, timeout_ms, ' +
  'backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on, metadata, run_at, ' +
  'created_at, started_at, finished_at, ready_at, lease_owner, lease_expires_at, group_key, schedule, callback, batch::text AS batch, trace, ' +
  'attempt_started, prior_started_at';

export const JOB_COLUMNS = `${SUMMARY_COLUMNS}, payload, result`;

/** Whether dispatch runs (not paused cluster-wide): every claim's condition. */
export const NOT_PAUSED = (s: string) =>
  `NOT EXISTS (SELECT 1 FROM ${s}.settings WHERE key = 'paused' AND value = 'true')`;

/**
 * A job found by its id, fenced on its status: `j.status = (SELECT 'running'::text)`, where
 * `j.status = 'running'` would mean the same. Every claim and lease index is partial on one
 * status (`WHERE status = 'queued'`, `'running'`; `jobs_status` holds the waiting, failed and
 * cancelled ones), and a comparison with a constant lets the planner read such an index in
 * place of probing the ids. With statistics taken when no job had that status (a table
 * analyzed young), it counts on one row there, and the statement reads every entry of the
 * index, the dead ones of each job that had the status since the last vacuum: finishing a
 * hundred jobs took seconds, and a server's throughput fell tenfold. To the planner a
 * sub-select's value is no constant, so no partial index can serve the fence; the rows are
 * found by their ids.
 */
export function statusIs(alias: string, status: 'queued' | 'running' | 'waiting'): string {
  return `${alias}.status = (SELECT '${status}'::text)`;
}

/**
 * Jobs `alias` whose ids the relation `from` (a CTE) lists, as a condition on the primary
 * key: `j.id = ANY (ARRAY(SELECT id FROM i))`, for a statement that locks them by id. On a
 * table analyzed while it held no job (the finish moves finished jobs out of it, migration
 * 021), `j.id IN (SELECT id FROM i)` was planned as a semi join that walked the whole
 * primary key and, for each job, the ids: 100 starts took a second. An array of ids is an
 * index condition whatever the statistics say. A statement that joins values per id to
 * the jobs so found runs with nested loops off as well (HASH_JOINS): on such a table the
 * planner would otherwise walk the ids once for each job found.
 */
export function idIn(alias: string, from: string): string {
  return `${alias}.id = ANY (ARRAY(SELECT id FROM ${from}))`;
}

/**
 * Settings, for one transaction, of a statement that joins rows it was given (ids with
 * values each) to the jobs they name (docs/postgres-store.md, "Plans that do not trust
 * the row count"). A table analyzed while empty is taken for one row, and a join to one
 * row is cheapest as a nested loop that compares every row found with every row given:
 * with nested loops off, the rows are joined by a hash or a merge. The lookups that lock
 * rows by id stay nested loops (LATERAL has no other plan), at a cost the planner then
 * counts as huge, which would compile the statement to machine code: JIT is off too.
 * The finish function sets the same around its join (migration 022).
 */
export const HASH_JOINS = 'SET LOCAL enable_nestloop = off; SET LOCAL jit = off';

/** A queued job's place in line, as the claim index orders it. */
export interface LinePlace {
  priority: number;
  round: number;
  readyAt: number;
  seq: number;
}

/** Claim order (the claim index's): priority, the group's turn, ready time, place in line. */
export function inLine(a: LinePlace, b: LinePlace): number {
  return b.priority - a.priority || a.round - b.round || a.readyAt - b.readyAt || a.seq - b.seq;
}

/**
 * The first round of each (priority, group) among the rows `from` names, one probe each:
 * a materialized CTE named `bases`. Joined as a sub-select, the planner pulls it up into
 * the join or runs it again for each joined row (an insert of 100 jobs of one group: 100
 * probes, 0.7 to 2 ms, against one). The probes are written into the statement, not called
 * as `round_base`: a SQL function with sub-selects is never inlined, so each statement that
 * called it planned its body again, about 0.3 ms of the database's time an insert, which an
 * insert of one job paid whole. Written in, they are planned with the statement, once per
 * connection for a prepared one (postgres-cluster.test.ts checks the generic plan reads the
 * round indexes in order, on a table young or grown).
 */
export const ROUND_BASES = (s: string, from: string) =>
  `bases AS MATERIALIZED (SELECT g.priority, g.group_key, ${roundBase(s, 'g.priority', 'g.group_key')} AS base
    FROM (SELECT DISTINCT priority, group_key FROM ${from}) g)`;

/**
 * The first round a job of group `group` at `priority` takes now (migration 004 gives the
 * rule): one after the last queued job of its group there, else the lowest round queued
 * there, else 0. Two probes of an index. The same text is the body of the `round_base`
 * function, which statements that move single rows call (postgres-cluster.test.ts holds
 * the two equal); `priority` and `group` must name columns of an outer row, qualified.
 */
export function roundBase(s: string, priority: string, group: string): string {
  return `coalesce(
    CASE WHEN ${group} IS NULL THEN
      (SELECT j.round + 1 FROM ${s}.jobs j
       WHERE j.status = 'queued' AND j.group_key IS NULL AND j.priority = ${priority} ORDER BY j.round DESC LIMIT 1)
    ELSE
      (SELECT j.round + 1 FROM ${s}.jobs j
       WHERE j.status = 'queued' AND j.group_key = ${group} AND j.priority = ${priority} ORDER BY j.round DESC LIMIT 1)
    END,
    (SELECT j.round FROM ${s}.jobs j
     WHERE j.status = 'queued' AND j.priority = ${priority} ORDER BY j.priority DESC, j.round LIMIT 1),
    0)`;
}
/**
 * A statement run often enough to be parsed once per connection: a named (prepared)
 * statement, sent as its name and values after its first run on a connection. The name
 * is a hash of the text, so one name never stands for two texts (every schema has its
 * own). PostgreSQL plans it as it plans any prepared statement: custom plans for the
 * first five runs, then a generic plan when that is not costlier on average.
 */
export interface Prepared {
  readonly name: string;
  readonly text: string;
}

export function prepared(text: string): Prepared {
  return { name: `kiln_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`, text };
}

/** Every column of a job, each taken from the table `alias` names. */
export function prefixed(alias: string): string {
  return JOB_COLUMNS.split(', ')
    .map((column) => (column.startsWith('id::text') ? `${alias}.id::text AS id` : `${alias}.${column}`))
    .join(', ');
}

/**
 * Jobs by `where` in both tables: `jobs`, and `jobs_done`, where the finish moves the
 * finished jobs nothing else reads in `jobs` (migration 021). One statement reads both with
 * one snapshot, so a job moved meanwhile is seen in one of them, once. `since` (a
 * parameter, ms) leaves out the partitions of jobs that finished before it
 * (PgConnection.readByIds).
 */
export function inBothTables(s: string, columns: string, where: string, since?: string): string {
  const finished = since === undefined ? '' : ` AND finished_at >= ${since}::bigint`;
  return `SELECT ${columns} FROM ${s}.jobs WHERE ${where} UNION ALL SELECT ${columns} FROM ${s}.jobs_done WHERE ${where}${finished}`;
}

/** Statements that several facets run. */
export function sharedStatements(schema: string) {
  const s = `"${schema}"`;
  return {
    /**
     * Outside parents, locked so a parent cannot finish unseen while its child is inserted,
     * nor a finished one be retried. A parent moved while the lock was awaited is no longer
     * where this statement's snapshot finds it: lockParents (below) reads again.
     */
    lockParents: `
WITH a AS (SELECT id::text AS id, status FROM ${s}.jobs WHERE id = ANY($1::uuid[]) FOR SHARE),
b AS (SELECT id::text AS id, status FROM ${s}.jobs_done WHERE id = ANY($1::uuid[]) FOR SHARE)
SELECT * FROM a UNION ALL SELECT * FROM b`,
    /** These three take `since` as $2: PgConnection.readByIds runs them. */
    parents: prepared(inBothTables(s, 'id::text AS id, type, result', 'id = ANY($1::uuid[])', '$2')),
    statusOf: prepared(inBothTables(s, 'status', 'id = $1', '$2')),
    getMany: prepared(inBothTables(s, JOB_COLUMNS, 'id = ANY($1::uuid[])', '$2')),
  };
}

/**
 * The parents `ids` with their statuses, locked (sharedStatements.lockParents). A parent
 * whose finish moved it to `jobs_done` while this waited for its lock is missed by the
 * statement that waited, so when any is missing the statement runs once more, with a
 * snapshot that sees the move.
 */
export async function lockParents(
  client: { query<R extends object>(text: string, values: unknown[]): Promise<{ rows: R[] }> },
  shared: SharedStatements,
  ids: string[],
): Promise<Map<string, JobStatus>> {
  let rows = (await client.query<{ id: string; status: JobStatus }>(shared.lockParents, [ids])).rows;
  if (rows.length < new Set(ids).size) {
    rows = (await client.query<{ id: string; status: JobStatus }>(shared.lockParents, [ids])).rows;
  }
  return new Map(rows.map((row) => [row.id, row.status]));
}

export type SharedStatements = ReturnType<typeof sharedStatements>;
