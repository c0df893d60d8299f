import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { claimStatement } from '../../src/store/postgres/claim.js';
import {
  expiredJobsStatement,
  heartbeatStatement,
  markDeadStatement,
  registerNodeStatement,
} from '../../src/store/postgres/leases.js';
import { migrate } from '../../src/store/postgres/migrate.js';
import { connect, dropSchema, freshSchemaName } from '../support/postgres.js';

describe('postgres store: leases and rescue on a real server (KILN_TEST_PG)', () => {
  const schema = freshSchemaName();
  let client: pg.Client;
  before(async () => {
    client = await connect();
    await migrate(client, schema);
  });
  after(async () => {
    await client.end();
    await dropSchema(schema);
  });

  async function queued(n: number): Promise<string[]> {
    const ids = Array.from({ length: n }, () => randomUUID());
    for (const id of ids) {
      await client.query(
        `INSERT INTO "${schema}".jobs (id, type, priority, status, payload, metadata, backoff, max_attempts, timeout_ms, ready_at)
         VALUES ($1, 'noop', 5, 'queued', '{}', '{}', '{"initialMs":1}', 3, 1000, now())`,
        [id],
      );
    }
    return ids;
  }

  it('renews all of a node’s leases in one statement and answers the jobs it no longer holds', async () => {
    await client.query(registerNodeStatement(schema), ['node-a', 'host', 1, 'test', 2, 60_000]);
    await queued(2);
    const claimed = await client.query<{ id: string }>(claimStatement(schema), ['node-a', 2]);
    const ids = claimed.rows.map((row) => row.id);
    // One of them is cancelled elsewhere: the heartbeat says it is lost.
    await client.query(`UPDATE "${schema}".jobs SET status = 'waiting', lease_owner = NULL WHERE id = $1`, [ids[0]]);
    const beat = await client.query<{ renewed: boolean; lost: string[]; db_now: string }>(heartbeatStatement(schema), [
      'node-a',
      60_000,
      2,
      2,
      ids,
    ]);
    assert.equal(beat.rows[0]?.renewed, true);
    assert.deepEqual(beat.rows[0]?.lost, [ids[0]]);
    assert.ok(Math.abs(Number(beat.rows[0]?.db_now) - Date.now()) < 60_000, 'the database clock');
  });

  it('rescues the running jobs of a node whose lease ran out, and that node can renew nothing after', async () => {
    await client.query(registerNodeStatement(schema), ['node-b', 'host', 2, 'test', 1, 60_000]);
    await queued(1);
    const claimed = await client.query<{ id: string }>(claimStatement(schema), ['node-b', 1]);
    const [job] = claimed.rows;
    assert.ok(job);
    // Back-date the lease, as if the node had stopped renewing, then run the rescuer once.
    await client.query(
      `UPDATE "${schema}".nodes SET lease_expires_at = now() - interval '1 second' WHERE id = 'node-b'`,
    );
    const dead = await client.query<{ id: string }>(markDeadStatement(schema));
    assert.deepEqual(
      dead.rows.map((row) => row.id),
      ['node-b'],
    );
    const expired = await client.query<{ id: string; lease_owner: string; attempts: number }>(
      expiredJobsStatement(schema),
      [100],
    );
    assert.deepEqual(
      expired.rows.map((row) => [row.id, row.lease_owner, row.attempts]),
      [[job.id, 'node-b', 1]],
    );
    // Expiry is final: a late heartbeat of the dead node renews nothing, and it claims nothing.
    const late = await client.query<{ renewed: boolean }>(heartbeatStatement(schema), [
      'node-b',
      60_000,
      1,
      1,
      [job.id],
    ]);
    assert.equal(late.rows[0]?.renewed, false);
    await queued(1);
    const none = await client.query(claimStatement(schema), ['node-b', 1]);
    assert.equal(none.rowCount, 0);
    // A live node is untouched by the rescue.
    const live = await client.query<{ dead_at: Date | null }>(
      `SELECT dead_at FROM "${schema}".nodes WHERE id = 'node-a'`,
    );
    assert.equal(live.rows[0]?.dead_at, null);
  });
});
