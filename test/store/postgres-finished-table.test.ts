import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type pg from 'pg';
import { JOB_TABLE_COLUMNS, MOVE_FINISHED } from '../../src/store/postgres/migrations/021-finished-jobs.js';
import { PostgresStore } from '../../src/store/postgres/store.js';
import type { ClaimedJob } from '../../src/store/store.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { pollUntil } from '../support/poll.js';
import { completed, handlerError, insertOk, newJob, nextId, OWNER } from '../support/store-fixtures.js';

/**
 * Finished jobs move out of the hot table (migration 021): the finish of a job nothing
 * else reads in `jobs` deletes it there and inserts it into `jobs_done`, partitioned by
 * status and finish time, and retention drops a partition whole. Every read still finds
 * the job, every count and batch still counts it, and a cancel, retry or removal of a
 * moved job works as on one that stayed.
 */
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const schemas: string[] = [];
const closing: (() => Promise<void>)[] = [];
after(async () => {
  for (const close of closing.splice(0)) await close();
  for (const schema of schemas) await dropSchema(schema);
});

async function open(clock?: () => number): Promise<{ store: PostgresStore; schema: string; db: pg.Client }> {
  const schema = freshSchemaName();
  schemas.push(schema);
  const store = await PostgresStore.open({
    url: TEST_PG_URL,
    schema,
    poolSize: 2,
    capacity: 100_000,
    pollMs: 60_000,
    ...(clock === undefined ? {} : { clock }),
  });
  const db = await connect();
  closing.push(
    () => store.close(),
    () => db.end(),
  );
  return { store, schema, db };
}

async function claimAll(store: PostgresStore, count: number): Promise<ClaimedJob[]> {
  const claimed = (await store.claim({ owner: OWNER, leaseMs: 60_000, batches: count, micro: null })).flat();
  assert.equal(claimed.length, count);
  return claimed;
}

async function where(db: pg.Client, schema: string, id: string): Promise<string[]> {
  const rows = await db.query<{ place: string }>(
    `SELECT 'jobs' AS place FROM "${schema}".jobs WHERE id = $1
     UNION ALL SELECT tableoid::regclass::text FROM "${schema}".jobs_done WHERE id = $1`,
    [id],
  );
  return rows.rows.map((row) => row.place.replace(`"${schema}".`, '').replace(`${schema}.`, ''));
}

describe('postgres store: finished jobs out of the hot table (KILN_TEST_PG)', () => {
  it('moves a job the finish ends for good when nothing reads it in jobs, and finds it everywhere', async () => {
    const { store, schema, db } = await open();
    const plain = newJob();
    const failing = newJob({ maxAttempts: 1 });
    const keyed = newJob({ idempotencyKey: `key-${nextId()}` });
    const deduped = newJob({ dedupeKey: `dedupe-${nextId()}` });
    const called = newJob({ callback: { url: 'http://127.0.0.1:9/hook' } });
    const retried = newJob({ maxAttempts: 3 });
    await insertOk(store, [plain, failing, keyed, deduped, called, retried]);
    const claimed = await claimAll(store, 6);
    const byId = new Map(claimed.map((job) => [job.id, job]));
    const end = (id: string, outcome: Parameters<PostgresStore['finish']>[0][number]['outcome']) => ({
      id,
      attempt: byId.get(id)?.attempts ?? 0,
      owner: OWNER,
      outcome,
    });
    const answers = await store.finish([
      end(plain.id, completed({ plain: true })),
      end(failing.id, { kind: 'failed', error: handlerError(1), retryAt: null }),
      end(keyed.id, completed(1)),
      end(deduped.id, completed(2)),
      end(called.id, completed(3)),
      end(retried.id, { kind: 'failed', error: handlerError(1), retryAt: Date.now() + 60_000 }),
    ]);
    assert.deepEqual(
      answers.map((answer) => answer?.status),
      ['completed', 'failed', 'completed', 'completed', 'completed', 'retrying'],
    );

    assert.deepEqual(await where(db, schema, plain.id), ['jobs_done_completed_default']);
    assert.deepEqual(await where(db, schema, failing.id), ['jobs_done_ended_default']);
    for (const stays of [keyed, deduped, called, retried])
      assert.deepEqual(await where(db, schema, stays.id), ['jobs']);

    const got = await store.get(plain.id);
    assert.equal(got?.status, 'completed');
    assert.deepEqual(got?.result, { plain: true });
    assert.equal((await store.get(failing.id))?.error?.code, 'handler_error');
    assert.deepEqual(
      (await store.getMany([plain.id, failing.id, keyed.id])).map((job) => job.id).sort(),
      [plain.id, failing.id, keyed.id].sort(),
    );
    const listed = await store.list({ statuses: ['completed'], limit: 10 });
    assert.deepEqual(listed.jobs.map((job) => job.id).sort(), [plain.id, keyed.id, deduped.id, called.id].sort());
    // Newest first across both tables, a page at a time.
    const all = await store.list({ limit: 100 });
    const ids = all.jobs.map((job) => job.id);
    assert.deepEqual(ids, [...ids].sort().reverse());
    assert.equal(ids.length, 6);
    const first = await store.list({ limit: 3 });
    assert.ok(first.nextCursor);
    const second = await store.list({ limit: 3, cursor: first.nextCursor });
    assert.deepEqual(
      [...first.jobs, ...second.jobs].map((job) => job.id),
      ids,
    );

    const counts = await store.counts();
    assert.equal(counts.byStatus.completed, 4);
    assert.equal(counts.byStatus.failed, 1);
    assert.equal(counts.byStatus.retrying, 1);
    assert.equal(counts.byStatus.running, 0);
  });

  it('moves a job back for a retry, a cancel or a removal, and a child of a moved parent sees it', async () => {
    const { store, schema, db } = await open();
    const parent = newJob();
    const failing = newJob({ maxAttempts: 1 });
    const done = newJob();
    await insertOk(store, [parent, failing, done]);
    const claimed = await claimAll(store, 3);
    await store.finish(
      claimed.map((job) => ({
        id: job.id,
        attempt: job.attempts,
        owner: OWNER,
        outcome:
          job.id === failing.id
            ? { kind: 'failed' as const, error: handlerError(1), retryAt: null }
            : completed(job.id),
      })),
    );
    for (const job of [parent, done])
      assert.deepEqual(await where(db, schema, job.id), ['jobs_done_completed_default']);
    assert.deepEqual(await where(db, schema, failing.id), ['jobs_done_ended_default']);

    // A child submitted after its parent moved: ready at once, with the parent's result.
    const child = newJob({ dependsOn: [parent.id] });
    const [inserted] = await insertOk(store, [child]);
    assert.equal(inserted?.status, 'queued');
    const [claimedChild] = await claimAll(store, 1);
    assert.deepEqual(claimedChild?.parents, [{ id: parent.id, type: parent.type, result: parent.id }]);

    // A cancel of a finished job is refused, as before; the job is whole wherever it is.
    const refused = await store.cancel(done.id);
    assert.ok(refused !== null && 'invalidState' in refused);
    assert.equal((await store.get(done.id))?.status, 'completed');

    const retried = await store.retry(failing.id);
    assert.ok(retried !== null && !('invalidState' in retried), JSON.stringify(retried));
    assert.equal(retried.job.status, 'queued');
    assert.equal(retried.job.attempts, 0);
    assert.deepEqual(await where(db, schema, failing.id), ['jobs']);

    assert.equal(await store.remove(parent.id), 'removed');
    assert.deepEqual(await where(db, schema, parent.id), []);
    assert.equal(await store.get(parent.id), null);

    const counts = await store.counts();
    assert.equal(counts.byStatus.completed, 1);
    assert.equal(counts.byStatus.failed, 0);
    assert.equal(counts.byStatus.queued + counts.byStatus.running, 2);
  });

  it('counts a moved batch job out of its batch, which finishes with its last one', async () => {
    const { store } = await open();
    const batch = { id: nextId(), createdAt: 1_700_000_000_000, callback: null, trace: null };
    const jobs = [newJob({ batch: batch.id }), newJob({ batch: batch.id })];
    assert.equal((await store.insert(jobs, batch)).ok, true);
    const claimed = await claimAll(store, 2);
    const [one, two] = claimed;
    assert.ok(one && two);
    await store.finish([{ id: one.id, attempt: one.attempts, owner: OWNER, outcome: completed(1) }]);
    let read = await store.batch(batch.id);
    assert.equal(read?.counts.completed, 1);
    // Claimed, its start not recorded: counted as queued.
    assert.equal(read?.counts.queued, 1);
    assert.equal(read?.finishedAt, null);
    await store.finish([
      {
        id: two.id,
        attempt: two.attempts,
        owner: OWNER,
        outcome: { kind: 'failed', error: handlerError(1), retryAt: null },
      },
    ]);
    read = await store.batch(batch.id);
    assert.equal(read?.counts.completed, 1);
    assert.equal(read?.counts.failed, 1);
    assert.notEqual(read?.finishedAt, null);
    assert.equal((await store.list({ batch: batch.id, limit: 10 })).jobs.length, 2);
  });

  it(
    'drops a partition whose whole span is past the retention, its jobs out of the counts',
    { timeout: 120_000 },
    async () => {
      // The database's clock, as the store pins it: ten minutes into an hour.
      let now = Math.floor(Date.UTC(2026, 0, 10) / HOUR) * HOUR + 10 * 60_000;
      const { store, schema, db } = await open(() => now);
      // The first purge makes the partitions of the next hours.
      assert.equal(await store.purge('completed', DAY, 1000), 0);
      const jobs = Array.from({ length: 500 }, () => newJob());
      await insertOk(store, jobs);
      const claimed = await claimAll(store, 500);
      await store.finish(
        claimed.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(null) })),
      );
      const hour = Math.floor(now / HOUR);
      const partition = `jobs_done_completed_${hour}_${hour + 1}`;
      assert.deepEqual(await where(db, schema, claimed[0]?.id as string), [partition]);
      const exists = async () =>
        (
          await db.query(
            `SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2`,
            [schema, partition],
          )
        ).rowCount === 1;

      // A day later its span is not wholly past the retention yet: nothing goes.
      now += DAY;
      assert.equal(await store.purge('completed', DAY, 1000), 0);
      assert.equal(await exists(), true);
      // Once the hour it spans is a day old, the partition is dropped with its 500 jobs.
      now += HOUR;
      assert.equal(await store.purge('completed', DAY, 100), 500);
      assert.equal(await exists(), false);
      assert.equal(await store.get(claimed[0]?.id as string), null);
      const counts = await store.counts();
      assert.equal(counts.byStatus.completed, 0);
      // Partitions ahead of the clock are made again as it moves.
      const ahead = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".done_partitions('jobs_done_completed') WHERE to_h * $1::bigint > $2::bigint`,
        [HOUR, now],
      );
      assert.ok((ahead.rows[0]?.n ?? 0) >= 1);
    },
  );

  it(
    'deletes by rows what a partition does not hold, and what a retention under an hour keeps',
    { timeout: 60_000 },
    async () => {
      let now = Math.floor(Date.UTC(2026, 0, 10) / HOUR) * HOUR + 10 * 60_000;
      const { store } = await open(() => now);
      // No partition yet: the jobs go to the default partition.
      await insertOk(
        store,
        Array.from({ length: 30 }, () => newJob()),
      );
      const claimed = await claimAll(store, 30);
      await store.finish(
        claimed.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(null) })),
      );
      now += 10 * 60_000;
      // Ten minutes' retention: rows, a chunk at a time.
      assert.equal(await store.purge('completed', 5 * 60_000, 20), 20);
      assert.equal(await store.purge('completed', 5 * 60_000, 20), 10);
      assert.equal((await store.counts()).byStatus.completed, 0);
    },
  );

  it('finds a job finished into a partition attached while the reads by id were being planned', async () => {
    const { store, schema, db } = await open();
    // The partitions of failed jobs made in a transaction held open, as the retention purge
    // makes them when a server starts, while reads by id go on.
    const ddl = await connect();
    closing.push(() => ddl.end());
    await ddl.query('BEGIN');
    const made = await ddl.query<{ n: number }>(
      `SELECT "${schema}".prepare_done_partitions('jobs_done_ended', 7, 8) AS n`,
    );
    assert.ok((made.rows[0]?.n ?? 0) >= 1);
    // Both connections of the reads by id plan their statement now (the store is new: none
    // has planned it before), and wait for it.
    const reads = Promise.all([store.get(nextId()), store.get(nextId())]);
    reads.catch(() => {});
    await pollUntil(
      async () =>
        (
          await db.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
             JOIN pg_namespace s ON s.oid = c.relnamespace WHERE NOT l.granted AND s.nspname = $1`,
            [schema],
          )
        ).rows[0]?.n ?? 0,
      (waiting) => waiting >= 2,
      { what: 'both reads by id to wait for the partitions' },
    );
    await ddl.query('COMMIT');
    assert.deepEqual(await reads, [null, null]);

    // A job that fails for good now lands in a partition made then, and every read finds it.
    const failing = newJob({ maxAttempts: 1 });
    await insertOk(store, [failing]);
    const [claimed] = await claimAll(store, 1);
    await store.finish([
      {
        id: failing.id,
        attempt: claimed?.attempts ?? 0,
        owner: OWNER,
        outcome: { kind: 'failed', error: handlerError(1), retryAt: null },
      },
    ]);
    assert.match((await where(db, schema, failing.id)).join(), /^jobs_done_ended_\d+_\d+$/);
    for (let read = 0; read < 4; read++) assert.equal((await store.get(failing.id))?.status, 'failed');
  });

  it('has the columns of jobs in the same order, as the finish and the move back write them', async () => {
    const { schema, db } = await open();
    const columns = async (table: string) =>
      (
        await db.query<{ name: string }>(
          `SELECT column_name AS name FROM information_schema.columns
           WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
          [schema, table],
        )
      ).rows.map((row) => row.name);
    assert.deepEqual(await columns('jobs'), [...JOB_TABLE_COLUMNS]);
    assert.deepEqual(await columns('jobs_done'), [...JOB_TABLE_COLUMNS]);
  });

  it('moves the finished jobs an existing database holds in jobs, counts unchanged', async () => {
    const { store, schema, db } = await open();
    const jobs = [newJob(), newJob(), newJob({ idempotencyKey: `key-${nextId()}` })];
    await insertOk(store, jobs);
    const claimed = await claimAll(store, 3);
    await store.finish(
      claimed.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(1) })),
    );
    // As a database before the step held them: every finished job in jobs.
    await db.query(
      `WITH b AS (DELETE FROM "${schema}".jobs_done RETURNING *) INSERT INTO "${schema}".jobs SELECT * FROM b`,
    );
    for (const job of jobs) assert.deepEqual(await where(db, schema, job.id), ['jobs']);
    const before = await store.counts();
    await db.query(MOVE_FINISHED.replaceAll('{{schema}}', `"${schema}"`));
    assert.deepEqual(await where(db, schema, jobs[0]?.id as string), ['jobs_done_completed_default']);
    assert.deepEqual(await where(db, schema, jobs[1]?.id as string), ['jobs_done_completed_default']);
    assert.deepEqual(await where(db, schema, jobs[2]?.id as string), ['jobs']);
    assert.deepEqual((await store.counts()).byStatus, before.byStatus);
    assert.equal((await store.get(jobs[0]?.id as string))?.status, 'completed');
  });
});
