import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { PgConnection, run } from '../../src/store/postgres/connection.js';
import { prepared } from '../../src/store/postgres/sql.js';
import { connect, PgTestScope, TEST_PG_URL } from '../support/postgres.js';
import { newJob, nextId, OWNER } from '../support/store-fixtures.js';

/**
 * Named statements that the server no longer matches on a pooled connection: one
 * deallocated under the driver (26000), one whose result type a table change altered
 * (0A000). The connection is dropped and the statement prepared again on a new one,
 * rather than failing on every run.
 */
const scope = new PgTestScope();
after(() => scope.close());

const SUM = prepared('SELECT 41 + $1::int AS n, pg_backend_pid() AS pid');

/** A connection of the store's kind with a pool of one, so every call meets the same connection. */
function onePool(): PgConnection {
  const db = new PgConnection({ url: TEST_PG_URL, schema: 'public', poolSize: 1, clock: null }, () => undefined);
  scope.onClose(async () => {
    db.markClosed();
    await db.end();
  });
  return db;
}

/** Forgets every named statement of the pool's connection, behind the driver's back. */
async function deallocateAll(db: PgConnection): Promise<number> {
  return db.withClient(async (client) => {
    await client.query('DEALLOCATE ALL');
    return (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid as number;
  });
}

describe('postgres store: named statements out of step with the server (KILN_TEST_PG)', () => {
  it('runs a lone statement again on a new connection once its own was deallocated', async () => {
    const db = onePool();
    assert.equal((await db.query<{ n: number }>(SUM, [1])).rows[0]?.n, 42);
    const pid = await deallocateAll(db);
    const again = (await db.query<{ n: number; pid: number }>(SUM, [1])).rows[0];
    assert.equal(again?.n, 42);
    assert.notEqual(again?.pid, pid, 'the connection that lost its statements was dropped');
    assert.equal((await db.poolQuery(SUM, [2])).rows[0]?.n, 43);
  });

  it('runs a transaction again on a new connection once its own was deallocated', async () => {
    const db = onePool();
    const inTransaction = () => db.transaction(async (client) => (await run<{ n: number }>(client, SUM, [1])).rows);
    assert.equal((await inTransaction())[0]?.n, 42);
    await deallocateAll(db);
    assert.equal((await inTransaction())[0]?.n, 42);
    assert.equal((await inTransaction())[0]?.n, 42);
  });

  it('drops a connection whose statements were deallocated when work on it fails, so the next runs', async () => {
    const db = onePool();
    const onClient = () => db.withClient(async (client) => (await run<{ n: number }>(client, SUM, [1])).rows);
    assert.equal((await onClient())[0]?.n, 42);
    await deallocateAll(db);
    // Work that commits statement by statement is not run again: it fails once.
    await assert.rejects(onClient(), (error: { code?: string }) => error.code === '26000');
    assert.equal((await onClient())[0]?.n, 42);
  });

  it('claims again after a column a claim returns changed its type', { timeout: 60_000 }, async () => {
    const { store, schema } = await scope.openStore(1_000_000);
    const ids = Array.from({ length: 12 }, () => nextId());
    const inserted = await store.insert(ids.map((id) => newJob({ id })));
    assert.equal(inserted.ok, true, JSON.stringify(inserted));
    const micro = { costs: new Map([['test.echo', 0.1]]), budgetMs: 1, maxJobs: 2, solo: new Set<string>() };
    // Both ways of claiming (a lone statement; a transaction) prepare their statements on both connections.
    for (let round = 0; round < 2; round++) {
      assert.equal((await store.claim({ owner: OWNER, leaseMs: 60_000, batches: 1, micro: null })).length, 1);
      assert.equal((await store.claim({ owner: OWNER, leaseMs: 60_000, batches: 1, micro })).length, 1);
    }
    const db = await connect();
    try {
      await db.query(`ALTER TABLE "${schema}".jobs ALTER COLUMN metadata TYPE varchar`);
    } finally {
      await db.end();
    }
    for (let round = 0; round < 2; round++) {
      const [[plain]] = (await store.claim({ owner: OWNER, leaseMs: 60_000, batches: 1, micro: null })) as [[never]];
      assert.ok(ids.includes((plain as { id: string }).id));
      const batches = await store.claim({ owner: OWNER, leaseMs: 60_000, batches: 1, micro });
      assert.equal(batches.flat().length, 2);
    }
  });
});
