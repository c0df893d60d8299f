import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import batchRange from '../../src/store/postgres/migrations/020-batch-range.js';
import type { NewJob } from '../../src/contract/job.js';
import { readStatements } from '../../src/store/postgres/reads.js';
import type { PostgresStore } from '../../src/store/postgres/store.js';
import { planNodes } from '../support/pg-plans.js';
import { connect, PgTestScope } from '../support/postgres.js';
import { newJob, nextId, T0 } from '../support/store-fixtures.js';

/**
 * A batch's jobs are found by the range of ids its row keeps (migration 020), with no index
 * of their own: its counts and the list of its jobs walk the primary key from its first job
 * to its last, past the jobs submitted between them and no others.
 */
const scope = new PgTestScope();
after(() => scope.close());

async function insertBatch(store: PostgresStore, jobs: NewJob[]): Promise<string> {
  const batch = { id: nextId(), createdAt: T0, callback: null, trace: null };
  for (const job of jobs) job.batch = batch.id;
  assert.equal((await store.insert(jobs, batch)).ok, true);
  return batch.id;
}

/** Every read of `jobs` in an analyzed plan: how it reads, by what, and the rows it passed over. */
function jobReads(plan: unknown): { node: string; index: unknown; removed: number; rows: number }[] {
  return planNodes(plan)
    .filter((node) => node['Relation Name'] === 'jobs')
    .map((node) => ({
      node: String(node['Node Type']),
      index: node['Index Name'],
      removed: Number(node['Rows Removed by Filter'] ?? 0),
      rows: Number(node['Actual Rows'] ?? 0),
    }));
}

describe('postgres store: a batch found by its range of ids (KILN_TEST_PG)', () => {
  it('counts and lists a batch by walking the primary key over its range only', { timeout: 120_000 }, async () => {
    const { store, schema } = await scope.openStore(1_000_000);
    const db = await connect();
    scope.onClose(() => db.end());
    // Jobs before the batch, the batch with 20 jobs submitted among its own, jobs after it.
    assert.equal((await store.insert(Array.from({ length: 5000 }, () => newJob()))).ok, true);
    const jobs = Array.from({ length: 30 }, () => newJob());
    const beside = Array.from({ length: 20 }, () => newJob());
    // Ids in time order, the batch's and the others' interleaved as two requests at one moment.
    const ids = [...jobs, ...beside].map((job) => job.id).sort();
    beside.forEach((job, i) => (job.id = ids[2 * i + 1] as string));
    const taken = new Set(beside.map((job) => job.id));
    const own = ids.filter((id) => !taken.has(id));
    jobs.forEach((job, i) => (job.id = own[i] as string));
    const batch = await insertBatch(store, jobs);
    assert.equal((await store.insert(beside)).ok, true);
    assert.equal((await store.insert(Array.from({ length: 5000 }, () => newJob()))).ok, true);
    await db.query(`ANALYZE "${schema}".jobs`);

    const found = await store.batch(batch);
    assert.equal(found?.total, 30);
    assert.equal(found?.counts.queued, 30);
    const listed = await store.list({ batch, limit: 100 });
    assert.deepEqual(listed.jobs.map((job) => job.id).sort(), jobs.map((job) => job.id).sort());

    const row = await db.query<{ first: string; last: string }>(
      `SELECT first_job_id::text AS first, last_job_id::text AS last FROM "${schema}".batches WHERE id = $1`,
      [batch],
    );
    assert.deepEqual(row.rows[0], { first: ids[0], last: ids[49] });
    const { batchCounts, list, inBatch } = readStatements(schema);
    for (const [name, text] of [
      ['counts', batchCounts],
      ['list', list([inBatch('', '$1::uuid')], 2)],
    ] as const) {
      const params = name === 'counts' ? [batch] : [batch, 101];
      const explained = await db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params);
      const reads = jobReads(explained.rows[0]?.['QUERY PLAN']);
      assert.ok(reads.length > 0, `${name}: the plan reads jobs`);
      for (const read of reads) {
        assert.equal(read.index, 'jobs_pkey', `${name} reads jobs by the primary key: ${JSON.stringify(reads)}`);
        // The batch's 30 and the 20 submitted between its first and last, nothing else.
        assert.ok(read.rows + read.removed <= 50, `${name} passed over only the range: ${JSON.stringify(reads)}`);
      }
    }
  });

  it('gives an existing database its batches ranges and drops the index', { timeout: 60_000 }, async () => {
    const { store, schema } = await scope.openStore(1_000);
    const db = await connect();
    scope.onClose(() => db.end());
    const first = await insertBatch(
      store,
      Array.from({ length: 7 }, () => newJob()),
    );
    assert.equal((await store.insert(Array.from({ length: 3 }, () => newJob()))).ok, true);
    const second = await insertBatch(
      store,
      Array.from({ length: 4 }, () => newJob()),
    );
    // The state before the step: no ranges, the index.
    await db.query(`UPDATE "${schema}".batches SET first_job_id = NULL, last_job_id = NULL`);
    await db.query(`ALTER TABLE "${schema}".batches DROP COLUMN first_job_id, DROP COLUMN last_job_id`);
    await db.query(`CREATE INDEX jobs_batch ON "${schema}".jobs (batch, status) WHERE batch IS NOT NULL`);
    // A batch without a range is read over every id, as one written by a server of the version before.
    await db.query(batchRange.replaceAll('{{schema}}', `"${schema}"`));
    const ranges = await db.query<{ id: string; ok: boolean }>(
      `SELECT b.id::text AS id, b.first_job_id = (SELECT j.id FROM "${schema}".jobs j WHERE j.batch = b.id ORDER BY j.id LIMIT 1)
         AND b.last_job_id = (SELECT j.id FROM "${schema}".jobs j WHERE j.batch = b.id ORDER BY j.id DESC LIMIT 1) AS ok
       FROM "${schema}".batches b ORDER BY b.id`,
    );
    assert.deepEqual(
      ranges.rows,
      [first, second].sort().map((id) => ({ id, ok: true })),
    );
    const index = await db.query(`SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'jobs_batch'`, [
      schema,
    ]);
    assert.equal(index.rowCount, 0);
    await db.query(`UPDATE "${schema}".batches SET first_job_id = NULL, last_job_id = NULL WHERE id = $1`, [second]);
    assert.equal((await store.batch(second))?.total, 4);
    assert.equal((await store.batch(second))?.counts.queued, 4);
    assert.equal((await store.list({ batch: second, limit: 100 })).jobs.length, 4);
  });
});
