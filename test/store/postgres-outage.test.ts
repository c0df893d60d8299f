import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { newJobId } from '../../src/jobs/ids.js';
import { leaseStatements } from '../../src/store/postgres/lease.js';
import { PostgresStore } from '../../src/store/postgres/store.js';
import { FakeClock } from '../support/fake-clock.js';
import { insertOk, newJob, T0 } from '../support/store-fixtures.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * Time during which the database was out of everyone's reach counts against no lease:
 * neither before the database's own start (a restart, a crash), nor while every live
 * server was cut off (each rejoined after its beats failed). The rescuer's statement is
 * run as a server runs it, on a clock pinned by the session, with the database's start
 * pinned too (`kiln.up_since_ms`).
 */
const schemas: string[] = [];
const stores: PostgresStore[] = [];
after(async () => {
  for (const store of stores.splice(0)) await store.close();
  for (const schema of schemas) await dropSchema(schema);
});

const NODE_LEASE_MS = 1_000;
const JOB_LEASE_MS = 2_000;

async function open(): Promise<{ store: PostgresStore; clock: FakeClock; schema: string }> {
  const schema = freshSchemaName();
  schemas.push(schema);
  const clock = new FakeClock(T0);
  const store = await PostgresStore.open({
    url: TEST_PG_URL,
    schema,
    poolSize: 2,
    capacity: 1_000_000,
    leaseMs: JOB_LEASE_MS,
    nodeLeaseMs: NODE_LEASE_MS,
    clock: clock.now,
  });
  stores.push(store);
  return { store, clock, schema };
}

/**
 * The ids the rescuer's statement lists at `now`, the database having started at `upSince`;
 * rolled back (the statement cuts the job leases of dead servers), so each call sees the same rows.
 */
async function expiredAt(schema: string, now: number, upSince: number): Promise<string[]> {
  const db = await connect();
  try {
    await db.query('BEGIN');
    await db.query(`SELECT set_config('kiln.now_ms', $1, true), set_config('kiln.up_since_ms', $2, true)`, [
      String(now),
      String(upSince),
    ]);
    const rows = await db.query<{ id: string }>(leaseStatements(schema).expired, [100, JOB_LEASE_MS]);
    return rows.rows.map((row) => row.id).sort();
  } finally {
    await db.query('ROLLBACK');
    await db.end();
  }
}

async function claimAs(store: PostgresStore, owner: string, count: number, leaseMs: number): Promise<string[]> {
  const jobs = await insertOk(
    store,
    Array.from({ length: count }, () => newJob({ id: newJobId(), createdAt: T0 })),
  );
  const claimed = (await store.claim({ owner, leaseMs, batches: count, micro: null })).flat();
  assert.equal(claimed.length, count);
  return jobs.map((job) => job.id).sort();
}

describe('postgres store: leases across an outage (KILN_TEST_PG)', () => {
  it('counts no node lease or job lease against the time before the database started', async () => {
    const { store, schema } = await open();
    // A server that beat at T0, holding long job leases: only its node lease can make it dead.
    const beating = await claimAs(store, 'server-a', 2, 600_000);
    await store.heartbeat('server-a', [], 600_000);
    // A claim by a server that never beat: only its job lease counts.
    const unbeaten = await claimAs(store, 'server-b', 1, 100);

    // No restart: the node lease ran out at T0 + 1000, the job lease at T0 + 100.
    assert.deepEqual(await expiredAt(schema, T0 + 1_001, 0), [...beating, ...unbeaten].sort());

    // The database was down from before T0 + 100 until T0 + 4500: nothing ran out meanwhile.
    const upSince = T0 + 4_500;
    assert.deepEqual(await expiredAt(schema, T0 + 5_000, upSince), []);
    // A node lease counts from the start: the silent server is dead a node lease after it.
    assert.deepEqual(await expiredAt(schema, upSince + NODE_LEASE_MS, upSince), []);
    assert.deepEqual(await expiredAt(schema, upSince + NODE_LEASE_MS + 1, upSince), beating);
    // A job lease that ran out while the database was down runs out a job lease after the start.
    assert.deepEqual(await expiredAt(schema, upSince + JOB_LEASE_MS + 1, upSince), [...beating, ...unbeaten].sort());
  });

  it('counts no node lease against the time every live server was cut off, and counts it when one was not', async () => {
    const { store, clock, schema } = await open();
    const silent = await claimAs(store, 'server-a', 2, 600_000);
    await store.heartbeat('server-a', [], 600_000);
    await store.heartbeat('server-b', [], 600_000);
    // server-b's beats failed from T0 on and came back at T0 + 3000 (its beat after failures).
    clock.set(T0 + 3_000);
    const db = await connect();
    try {
      await db.query(`UPDATE "${schema}".nodes SET last_seen_at = $1, rejoined_at = $1 WHERE id = 'server-b'`, [
        T0 + 3_000,
      ]);
      // The only live server rejoined at T0 + 3000: server-a's silence counts from then.
      assert.deepEqual(await expiredAt(schema, T0 + 3_500, 0), []);
      assert.deepEqual(await expiredAt(schema, T0 + 4_001, 0), silent);
      // A live server that was never cut off shows the database was reachable all along.
      await db.query(
        `INSERT INTO "${schema}".nodes (id, host, pid, version, threads, busy, started_at, last_seen_at, lease_ms)
         VALUES ('server-c', 'h', 1, '0', 1, 0, $1, $2, $3)`,
        [T0, T0 + 3_400, NODE_LEASE_MS],
      );
      assert.deepEqual(await expiredAt(schema, T0 + 3_500, 0), silent);
    } finally {
      await db.end();
    }
  });

  it('records that a server rejoins with its first beat after beats failed', async () => {
    const { store, schema } = await open();
    await store.heartbeat('server-a', [], 600_000);
    const db = await connect();
    const rejoined = async () =>
      (
        await db.query<{ rejoined_at: number | null }>(
          `SELECT rejoined_at FROM "${schema}".nodes WHERE id = 'server-a'`,
        )
      ).rows[0]?.rejoined_at ?? null;
    try {
      assert.equal(await rejoined(), null);
      // The beat fails: the table it writes is out of reach for a moment.
      await db.query(`ALTER TABLE "${schema}".nodes RENAME TO nodes_away`);
      await assert.rejects(store.heartbeat('server-a', [], 600_000));
      await db.query(`ALTER TABLE "${schema}".nodes_away RENAME TO nodes`);
      await store.heartbeat('server-a', [], 600_000);
      assert.equal(Number(await rejoined()), T0);
    } finally {
      await db.end();
    }
  });
});
