import type { ClientBase } from 'pg';
import { StoreError } from '../errors.js';
import jobs from './migrations/001-jobs.js';
import taskLimits from './migrations/002-task-limits.js';
import dedupe from './migrations/003-dedupe.js';
import groups from './migrations/004-groups.js';
import schedules from './migrations/005-schedules.js';
import callbacks from './migrations/006-callbacks.js';
import finishFence from './migrations/007-finish-fence.js';
import nodeLease from './migrations/008-node-lease.js';
import attemptStarted from './migrations/009-attempt-started.js';
import snoozes from './migrations/010-snoozes.js';
import groupLimits from './migrations/011-group-limits.js';
import batches from './migrations/012-batches.js';
import trace from './migrations/013-trace.js';
import typeGroup from './migrations/014-type-group.js';
import fenceById from './migrations/015-fence-by-id.js';
import interruptions from './migrations/016-interruptions.js';
import lighterWrites from './migrations/017-lighter-writes.js';
import finishWithoutDependents from './migrations/018-finish-without-dependents.js';
import batchCounts from './migrations/019-batch-counts.js';
import batchRange from './migrations/020-batch-range.js';
import finishedJobs from './migrations/021-finished-jobs.js';
import joinsByHash from './migrations/022-joins-by-hash.js';
import partitionsUnderLock from './migrations/023-partitions-under-lock.js';

/**
 * Numbered schema steps, one file each, applied at start in order, each in its own
 * transaction and recorded in `schema_migrations`. A session advisory lock keyed on the
 * schema name covers the whole run, so servers that start together apply each step
 * once: the first applies, the others wait and find nothing left to do. Append a step
 * to change the schema; never edit one that shipped.
 *
 * A step never changes the type of a column or function result that a prepared statement
 * returns while servers of the version before may still run: their connections hold
 * those statements (`prepared()` in sql.ts), each would fail a run ("cached plan must not
 * change result type") before its connection is dropped (connection.ts), and the older
 * code would then read a type it was not written for. Add a column beside the old one
 * instead, and drop the old one a release later.
 */
const MIGRATIONS: readonly { version: number; name: string; sql: string }[] = [
  { version: 1, name: 'jobs', sql: jobs },
  { version: 2, name: 'task-limits', sql: taskLimits },
  { version: 3, name: 'dedupe', sql: dedupe },
  { version: 4, name: 'groups', sql: groups },
  { version: 5, name: 'schedules', sql: schedules },
  { version: 6, name: 'callbacks', sql: callbacks },
  { version: 7, name: 'finish-fence', sql: finishFence },
  { version: 8, name: 'node-lease', sql: nodeLease },
  { version: 9, name: 'attempt-started', sql: attemptStarted },
  { version: 10, name: 'snoozes', sql: snoozes },
  { version: 11, name: 'group-limits', sql: groupLimits },
  { version: 12, name: 'batches', sql: batches },
  { version: 13, name: 'trace', sql: trace },
  { version: 14, name: 'type-group', sql: typeGroup },
  { version: 15, name: 'fence-by-id', sql: fenceById },
  { version: 16, name: 'interruptions', sql: interruptions },
  { version: 17, name: 'lighter-writes', sql: lighterWrites },
  { version: 18, name: 'finish-without-dependents', sql: finishWithoutDependents },
  { version: 19, name: 'batch-counts', sql: batchCounts },
  { version: 20, name: 'batch-range', sql: batchRange },
  { version: 21, name: 'finished-jobs', sql: finishedJobs },
  { version: 22, name: 'joins-by-hash', sql: joinsByHash },
  { version: 23, name: 'partitions-under-lock', sql: partitionsUnderLock },
];

/** Every step's version, in order. */
export const PG_SCHEMA_VERSIONS: readonly number[] = MIGRATIONS.map((step) => step.version);

export const PG_SCHEMA_VERSION = PG_SCHEMA_VERSIONS[PG_SCHEMA_VERSIONS.length - 1] as number;

/** Schema names Kiln accepts (KILN_PG_SCHEMA): plain lower-case identifiers. */
// At most 56 characters, so that the notification channel `<schema>_events` fits PostgreSQL's 63.
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,55}$/;

/** Applies the missing steps to `schema`; answers the versions it applied. */
export async function migrate(client: ClientBase, schema: string): Promise<number[]> {
  if (!SCHEMA_NAME.test(schema)) {
    throw new StoreError(
      'invalid_store_url',
      `KILN_PG_SCHEMA must be a lower-case identifier (letters, digits, _; at most 56), got "${schema}"`,
    );
  }
  const quoted = `"${schema}"`;
  const key = "('x' || left(md5('kiln:migrate:' || $1::text), 16))::bit(64)::bigint";
  await client.query(`SELECT pg_advisory_lock(${key})`, [schema]);
  try {
    // CREATE SCHEMA needs the right to create in the database even when the schema exists:
    // a role that only owns its schema must be able to start.
    const exists = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    if (exists.rowCount === 0) await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoted}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${quoted}.schema_migrations (
         version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const current = await client.query<{ version: number | null }>(
      `SELECT max(version) AS version FROM ${quoted}.schema_migrations`,
    );
    const version = current.rows[0]?.version ?? 0;
    if (version > PG_SCHEMA_VERSION) {
      throw new StoreError(
        'unsupported_schema',
        `the schema ${schema} has version ${version}; this Kiln knows versions up to ${PG_SCHEMA_VERSION}`,
      );
    }
    const applied: number[] = [];
    for (const step of MIGRATIONS) {
      if (step.version <= version) continue;
      await client.query('BEGIN');
      try {
        await client.query(step.sql.replaceAll('{{schema}}', quoted));
        await client.query(`INSERT INTO ${quoted}.schema_migrations (version, name) VALUES ($1, $2)`, [
          step.version,
          step.name,
        ]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      }
      applied.push(step.version);
    }
    return applied;
  } finally {
    await client.query(`SELECT pg_advisory_unlock(${key})`, [schema]);
  }
}
