import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { newJobId } from '../../src/jobs/ids.js';
import type pg from 'pg';
import { PostgresStore } from '../../src/store/postgres/store.js';
import { progressStatements } from '../../src/store/postgres/progress.js';
import type { ClaimedJob } from '../../src/store/store.js';
import { completed, insertOk, newJob } from '../support/store-fixtures.js';
import { pollUntil } from '../support/poll.js';
import { connect, dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';

/**
 * The writes that end or renew an attempt are fenced on what the row holds (status,
 * attempt, owner). Under READ COMMITTED a fence must hold when another transaction
 * changed the row and committed while this one waited for its lock: the write then
 * applies to the row's newest version, and an attempt that is still this owner's is
 * never taken for a void one. The blocker below is such a writer, made deterministic:
 * it holds the rows' locks with a new version of each until the write under test waits
 * for them, then commits.
 */
const schemas: string[] = [];
const stores: PostgresStore[] = [];
const clients: pg.Client[] = [];
after(async () => {
  for (const client of clients.splice(0)) await client.end().catch(() => undefined);
  for (const store of stores.splice(0)) await store.close();
  for (const schema of schemas) await dropSchema(schema);
});

const OWNER = 'fence-owner';
const LEASE_MS = 60_000;

async function openStore(schema?: string): Promise<{ schema: string; store: PostgresStore }> {
  const name = schema ?? freshSchemaName();
  if (schema === undefined) schemas.push(name);
  const store = await PostgresStore.open({ url: TEST_PG_URL, schema: name, poolSize: 4, capacity: 1_000_000 });
  stores.push(store);
  return { schema: name, store };
}

async function client(): Promise<pg.Client> {
  const db = await connect();
  clients.push(db);
  return db;
}

async function claimAll(store: PostgresStore, count: number): Promise<ClaimedJob[]> {
  const jobs = Array.from({ length: count }, () => newJob({ id: newJobId(), createdAt: Date.now() }));
  await insertOk(store, jobs);
  const claimed = (await store.claim({ owner: OWNER, leaseMs: LEASE_MS, batches: count, micro: null })).flat();
  assert.equal(claimed.length, count);
  return claimed;
}

/** Resolves once a backend is waiting for a row lock on `schema`'s jobs (or fails after 20 s). */
async function lockWaiter(db: pg.Client, schema: string): Promise<void> {
  await pollUntil(
    async () => {
      const waiting = await db.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND position($1 in query) > 0`,
        [schema],
      );
      return (waiting.rows[0] as { n: number }).n;
    },
    (n) => n > 0,
    { what: 'the write under test to wait for the held rows', deadlineMs: 20_000, everyMs: 5 },
  );
}

/**
 * Runs `write` while another transaction has updated `ids` (as a heartbeat does: the
 * lease moves, nothing else) and commits once `write` waits for their locks.
 */
async function racedByCommit<T>(schema: string, ids: string[], write: () => Promise<T>): Promise<T> {
  const blocker = await client();
  const watcher = await client();
  await blocker.query('BEGIN');
  await blocker.query(
    `UPDATE "${schema}".jobs SET lease_expires_at = lease_expires_at + 1 WHERE id = ANY($1::uuid[])`,
    [ids],
  );
  const pending = write();
  // An early failure of the write is reported as itself, not as a missing waiter.
  pending.catch(() => undefined);
  await lockWaiter(watcher, schema);
  await blocker.query('COMMIT');
  return pending;
}

describe('postgres store: fences hold against a concurrent writer (KILN_TEST_PG)', () => {
  it('stores a finish whose rows a heartbeat renewed while it waited for them', { timeout: 60_000 }, async () => {
    const { schema, store } = await openStore();
    const claimed = await claimAll(store, 3);
    const answers = await racedByCommit(
      schema,
      claimed.map((job) => job.id),
      () =>
        store.finish(
          claimed.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(job.id) })),
        ),
    );
    assert.deepEqual(
      answers.map((answer) => answer?.status),
      ['completed', 'completed', 'completed'],
      'every outcome is stored',
    );
    for (const job of claimed) {
      const stored = await store.get(job.id);
      assert.equal(stored?.status, 'completed');
      assert.deepEqual(stored?.result, job.id);
    }
  });

  it('renews a lease that another writer changed while the heartbeat waited', { timeout: 60_000 }, async () => {
    const { schema, store } = await openStore();
    const claimed = await claimAll(store, 3);
    const ids = claimed.map((job) => job.id);
    const lost = await racedByCommit(schema, ids, () => store.heartbeat(OWNER, ids, LEASE_MS));
    assert.deepEqual(lost, [], 'no lease this owner holds is reported lost');
  });

  it('gives back a claim whose rows another writer changed meanwhile', { timeout: 60_000 }, async () => {
    const { schema, store } = await openStore();
    const claimed = await claimAll(store, 2);
    await racedByCommit(
      schema,
      claimed.map((job) => job.id),
      () => store.release(claimed.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER }))),
    );
    for (const job of claimed) {
      const stored = await store.get(job.id);
      assert.equal(stored?.status, 'queued');
      assert.equal(stored?.attempts, job.attempts - 1);
    }
  });

  it('writes progress to rows another writer changed meanwhile', { timeout: 60_000 }, async () => {
    const { schema, store } = await openStore();
    const claimed = await claimAll(store, 2);
    const writer = await client();
    const progress = JSON.stringify({ percent: 40, message: 'under way' });
    const result = await racedByCommit(
      schema,
      claimed.map((job) => job.id),
      () =>
        writer.query(progressStatements(schema).progress, [
          claimed.map((job) => job.id),
          claimed.map((job) => job.attempts),
          claimed.map(() => OWNER),
          claimed.map(() => progress),
        ]),
    );
    assert.equal(result.rowCount, claimed.length);
  });

  it(
    'stores every outcome while heartbeats of the same jobs run from another connection, many rounds',
    { timeout: 180_000 },
    async () => {
      const { schema, store } = await openStore();
      // The same server's lease keeper and finishes, on two stores so they never share a connection.
      const { store: keeper } = await openStore(schema);
      let refused = 0;
      let stored = 0;
      for (let round = 0; round < 40; round++) {
        const claimed = await claimAll(store, 16);
        const ids = claimed.map((job) => job.id);
        let finishing = true;
        const beats = (async () => {
          let beat = 0;
          while (finishing) {
            const lost = await keeper.heartbeat(OWNER, ids, LEASE_MS);
            // A lease is lost only once its job has finished; never while it still runs here.
            for (const id of lost) assert.notEqual((await store.get(id))?.status, 'running', `lease of ${id} lost`);
            beat++;
          }
          return beat;
        })();
        const answers = await Promise.all(
          claimed.map(async (job, index) => {
            await sleep(index % 4);
            return store.finish([{ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(index) }]);
          }),
        );
        finishing = false;
        await beats;
        for (const [answer] of answers) {
          if (answer?.status === 'completed') stored++;
          else refused++;
        }
      }
      assert.equal(refused, 0, `${refused} finished outcomes refused (${stored} stored)`);
      const left = await (
        await client()
      ).query(`SELECT count(*)::int AS n FROM "${schema}".jobs WHERE status <> 'completed'`);
      assert.equal((left.rows[0] as { n: number }).n, 0);
    },
  );
});

describe('postgres store: batch rows are locked in id order (KILN_TEST_PG)', () => {
  // Batch `low` has the lower id. Whichever of the two jobs a finish writes first, it
  // must lock `low`'s row before `high`'s: holding `high`'s while it waits for `low`'s is
  // what lets two finishes of interleaved batches deadlock.
  for (const first of ['low', 'high'] as const) {
    it(
      `takes a finish’s batch rows in the order of their ids (the ${first} batch’s job has the lower id)`,
      { timeout: 60_000 },
      async () => {
        const { schema, store } = await openStore();
        const low = { id: newJobId(), createdAt: Date.now(), callback: null };
        const high = { id: newJobId(), createdAt: Date.now(), callback: null };
        const firstJob = newJob({ id: newJobId(), createdAt: Date.now(), batch: first === 'low' ? low.id : high.id });
        const secondJob = newJob({ id: newJobId(), createdAt: Date.now(), batch: first === 'low' ? high.id : low.id });
        const lowJob = first === 'low' ? firstJob : secondJob;
        const highJob = first === 'low' ? secondJob : firstJob;
        for (const [job, batch] of [
          [lowJob, low],
          [highJob, high],
        ] as const) {
          const inserted = await store.insert([job], batch);
          assert.ok(inserted.ok, JSON.stringify(inserted));
        }
        const claimed = (await store.claim({ owner: OWNER, leaseMs: LEASE_MS, batches: 2, micro: null })).flat();
        assert.equal(claimed.length, 2);

        const blocker = await client();
        const watcher = await client();
        await blocker.query('BEGIN');
        await blocker.query(`SELECT 1 FROM "${schema}".batches WHERE id = $1 FOR UPDATE`, [low.id]);
        const finishing = store.finish(
          claimed.map((job) => ({ id: job.id, attempt: job.attempts, owner: OWNER, outcome: completed(job.id) })),
        );
        finishing.catch(() => undefined);
        await lockWaiter(watcher, schema);
        // The finish waits for `low`'s row; another transaction can take `high`'s at once.
        await watcher.query('BEGIN');
        await watcher.query(`SELECT 1 FROM "${schema}".batches WHERE id = $1 FOR UPDATE NOWAIT`, [high.id]);
        await watcher.query('ROLLBACK');
        await blocker.query('COMMIT');

        const answers = await finishing;
        assert.deepEqual(
          answers.map((answer) => answer?.status),
          ['completed', 'completed'],
        );
        for (const batch of [low, high]) {
          const stored = await store.batch(batch.id);
          assert.equal(stored?.counts.completed, 1);
          assert.notEqual(stored?.finishedAt, null, 'the batch is finished');
        }
      },
    );
  }
});
