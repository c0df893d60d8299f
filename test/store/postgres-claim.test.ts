import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { claimStatement } from '../../src/store/postgres/claim.js';
import { migrate } from '../../src/store/postgres/migrate.js';
import { connect, dropSchema, freshSchemaName } from '../support/postgres.js';

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

describe('postgres store: the claim statement on a real server (KILN_TEST_PG)', () => {
  const schema = freshSchemaName();
  let client: pg.Client;
  before(async () => {
    client = await connect();
    await migrate(client, schema);
    await client.query(
      `INSERT INTO "${schema}".nodes (id, host, pid, version, threads, busy, lease_expires_at)
       VALUES ('node-a', 'h', 1, 't', 2, 0, now() + interval '1 minute'),
              ('node-dead', 'h', 2, 't', 2, 0, now() - interval '1 second')`,
    );
  });
  after(async () => {
    await client.end();
    await dropSchema(schema);
  });

  async function insert(priority: number, readyOffsetMs: number, status = 'queued'): Promise<string> {
    const id = randomUUID();
    await client.query(
      `INSERT INTO "${schema}".jobs (id, type, priority, status, payload, metadata, backoff, max_attempts, timeout_ms,
         ready_at, run_at)
       VALUES ($1, 'noop', $2, $3, '{}', '{}', '{}', 3, 1000,
         CASE WHEN $3 = 'queued' THEN now() + ($4 || ' milliseconds')::interval END,
         CASE WHEN $3 = 'scheduled' THEN now() + interval '1 hour' END)`,
      [id, priority, status, String(readyOffsetMs)],
    );
    return id;
  }

  it('takes the best queued jobs, priority first, then the earliest ready, under the lease of a live node', async () => {
    const low = await insert(1, 0);
    const highLate = await insert(9, 20);
    const highEarly = await insert(9, 10);
    await insert(9, 0, 'scheduled');
    const mid = await insert(5, 5);
    const claimed = await client.query<{ id: string; attempts: number }>(claimStatement(schema), ['node-a', 3]);
    assert.deepEqual(claimed.rows.map((row) => row.id).sort(), [highEarly, highLate, mid].sort());
    assert.ok(claimed.rows.every((row) => row.attempts === 1));
    const left = await client.query<{ id: string; status: string }>(
      `SELECT id, status FROM "${schema}".jobs WHERE status = 'queued'`,
    );
    assert.deepEqual(
      left.rows.map((row) => row.id),
      [low],
    );
    // A node whose lease has run out claims nothing, whatever it believes.
    const dead = await client.query(claimStatement(schema), ['node-dead', 10]);
    assert.equal(dead.rowCount, 0);
  });

  it('reads the claim index in order: no sort, however many jobs are queued', async () => {
    await client.query(
      `INSERT INTO "${schema}".jobs (id, type, priority, status, payload, metadata, backoff, max_attempts, timeout_ms, ready_at)
       SELECT gen_random_uuid(), 'noop', (i % 10), 'queued', '{}', '{}', '{}', 3, 1000, now() + (i || ' milliseconds')::interval
       FROM generate_series(1, 20000) i`,
    );
    await client.query(`ANALYZE "${schema}".jobs`);
    const explained = await client.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
      `EXPLAIN (FORMAT JSON) ${claimStatement(schema)}`,
      ['node-a', 100],
    );
    const plan = explained.rows[0]?.['QUERY PLAN'][0]?.Plan;
    assert.ok(plan);
    const all = nodes(plan);
    assert.ok(
      all.some((node) => node['Node Type'] === 'Index Scan' && node['Index Name'] === 'jobs_claim'),
      JSON.stringify(all.map((node) => [node['Node Type'], node['Index Name']])),
    );
    assert.equal(
      all.some((node) => node['Node Type'] === 'Sort'),
      false,
      'the claim never sorts',
    );
  });
});
