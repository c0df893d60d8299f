import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { isStoreError } from '../../src/store/errors.js';
import { migrate, PG_MIGRATION_VERSIONS, PG_SCHEMA_VERSION } from '../../src/store/postgres/migrate.js';
import { connect, dropSchema, freshSchemaName } from '../support/postgres.js';

describe('postgres store: migrations on a real server (KILN_TEST_PG)', () => {
  const schemas: string[] = [];
  after(async () => {
    for (const schema of schemas) await dropSchema(schema);
  });

  it('applies every step once when several servers start at the same moment', async () => {
    const schema = freshSchemaName();
    schemas.push(schema);
    const clients = await Promise.all([connect(), connect(), connect()]);
    try {
      const applied = await Promise.all(clients.map((client) => migrate(client, schema)));
      // One of them applied every step; the others waited for its lock and found nothing to do.
      const steps = [...PG_MIGRATION_VERSIONS];
      assert.deepEqual(
        applied.flat().sort((a, b) => a - b),
        steps,
      );
      assert.equal(applied.filter((versions) => versions.length > 0).length, 1);
      const recorded = await clients[0]?.query<{ version: number }>(
        `SELECT version FROM "${schema}".schema_migrations ORDER BY version`,
      );
      assert.deepEqual(
        recorded?.rows.map((row) => row.version),
        steps,
      );
      // Again: nothing left to do.
      assert.deepEqual(await migrate(clients[1] as (typeof clients)[number], schema), []);
    } finally {
      await Promise.all(clients.map((client) => client.end()));
    }
  });

  it('creates the index the claim reads in order: priority desc, turn of the group, ready time, ready order, queued jobs only', async () => {
    const schema = freshSchemaName();
    schemas.push(schema);
    const client = await connect();
    try {
      await migrate(client, schema);
      const index = await client.query<{ indexdef: string }>(
        `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'jobs_claim'`,
        [schema],
      );
      assert.match(
        index.rows[0]?.indexdef ?? '',
        /\(priority DESC, round, ready_at, ready_seq\) WHERE \(status = 'queued'::text\)/,
      );
    } finally {
      await client.end();
    }
  });

  it('refuses a schema written by a newer Kiln, and a schema name that is not a plain identifier', async () => {
    const schema = freshSchemaName();
    schemas.push(schema);
    const client = await connect();
    try {
      await migrate(client, schema);
      await client.query(`INSERT INTO "${schema}".schema_migrations (version, name) VALUES ($1, 'future')`, [
        PG_SCHEMA_VERSION + 1,
      ]);
      await assert.rejects(migrate(client, schema), (error: unknown) => isStoreError(error, 'unsupported_schema'));
      await assert.rejects(migrate(client, 'Kiln; DROP'), (error: unknown) => isStoreError(error, 'invalid_store_url'));
      // The lock was given back: another client gets it at once.
      const other = await connect();
      try {
        const free = await other.query<{ locked: boolean }>(
          `SELECT pg_try_advisory_lock(('x' || left(md5('kiln:migrate:' || $1::text), 16))::bit(64)::bigint) AS locked`,
          [schema],
        );
        assert.equal(free.rows[0]?.locked, true);
      } finally {
        await other.end();
      }
    } finally {
      await client.end();
    }
  });
});
