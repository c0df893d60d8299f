import assert from 'node:assert/strict';
import { copyFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import jobsSchema from '../../src/store/sqlite/migrations/001-jobs.js';
import settingsSchema from '../../src/store/sqlite/migrations/002-settings.js';
import runningLeaseSchema from '../../src/store/sqlite/migrations/003-running-lease.js';
import { MIGRATIONS, SCHEMA_VERSION } from '../../src/store/sqlite/migrate.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import {
  assertCountsExact,
  claimJobs,
  claimOne,
  claimOneUnstarted,
  claimUnstarted,
  claimRequest,
  completed,
  finishOne,
  insertOk,
  insertOne,
  LEASE_MS,
  mustGet,
  newJob,
  OWNER,
  rescueOnce,
  startAttempts,
  T0,
} from '../support/store-fixtures.js';
import { FakeClock } from '../support/fake-clock.js';
import { runStoreConformance } from './conformance/index.js';
import { tempFiles } from '../support/temp-files.js';

const freshPath = tempFiles('kiln-sqlite-store-');

runStoreConformance('sqlite store (file)', (options) => SqliteStore.open(freshPath(), options));

/** Opens a copy of the file as it is on disk now: only committed transactions are in it. */
function committedCopy(path: string): Database.Database {
  const copy = freshPath();
  copyFileSync(path, copy);
  if (existsSync(`${path}-wal`)) copyFileSync(`${path}-wal`, `${copy}-wal`);
  return new Database(copy, { readonly: true });
}

function statusOnDisk(path: string, id: string): string | null {
  const copy = committedCopy(path);
  try {
    const row = copy.prepare('SELECT status FROM jobs WHERE id = ?').get(id) as { status: string } | undefined;
    return row?.status ?? null;
  } finally {
    copy.close();
  }
}

/** A row of the jobs table as schema version 1 has it. */
function insertRawJob(db: Database.Database, row: { id: string; status: string; attempts?: number; lease?: string }) {
  db.prepare(
    `INSERT INTO jobs (id, type, status, priority, payload, result, error, attempts, max_attempts, timeout_ms,
       backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on,
       metadata, run_at, created_at, started_at, finished_at, ready_at, lease_owner, lease_expires_at)
     VALUES (?, 'test.old', ?, 5, '{"old":true}', NULL, NULL, ?, 3, 1000, 100, 2, 10000, 'none', NULL, NULL, '[]',
       '{}', NULL, ?, ?, NULL, ?, ?, ?)`,
  ).run(
    row.id,
    row.status,
    row.attempts ?? 0,
    T0,
    row.status === 'running' ? T0 : null,
    T0,
    row.lease ?? null,
    row.lease === undefined ? null : T0 + 10 * LEASE_MS,
  );
}

function schemaOf(path: string): { version: number; names: string[] } {
  const db = new Database(path, { readonly: true });
  try {
    const version = db.pragma('user_version', { simple: true }) as number;
    const names = (db.prepare('SELECT name FROM sqlite_master ORDER BY name').all() as { name: string }[]).map(
      (r) => r.name,
    );
    return { version, names };
  } finally {
    db.close();
  }
}

describe('sqlite store: the file', () => {
  it('keeps jobs, their ready order and the counts across close and reopen', async () => {
    const path = freshPath();
    const clock = new FakeClock(T0);
    const first = await SqliteStore.open(path, { capacity: 100, clock: clock.now });
    const a = await insertOne(first, { priority: 5, payload: { kept: [1, 'two'] } });
    clock.set(T0 + 1);
    const b = await insertOne(first, { priority: 9 });
    clock.set(T0 + 2);
    const c = await insertOne(first, { priority: 5 });
    const delayed = await insertOne(first, { runAt: T0 + 5000 });
    const waiting = await insertOne(first, { dependsOn: [a.id] });
    const cancelled = await insertOne(first);
    await first.cancel(cancelled.id);
    const before = await first.counts();
    assert.equal(before.exact, true);
    const storedA = await mustGet(first, a.id);
    await first.close();

    const second = await SqliteStore.open(path, { capacity: 100, clock: clock.now });
    try {
      assert.deepEqual(await second.counts(), before);
      await assertCountsExact(second);
      assert.deepEqual(await second.get(a.id), storedA);
      assert.equal((await mustGet(second, waiting.id)).status, 'waiting');
      assert.equal((await mustGet(second, cancelled.id)).status, 'cancelled');
      assert.equal(await rescueOnce(second), 0);
      assert.equal(await second.nextDueAt(), T0 + 5000);
      clock.set(T0 + 10);
      const claimed = await claimJobs(second, 10);
      assert.deepEqual(
        claimed.map((j) => j.id),
        [b.id, a.id, c.id],
      );
      assert.deepEqual(JSON.parse(claimed[1]?.payloadText ?? 'null'), { kept: [1, 'two'] });
      clock.set(T0 + 5000);
      assert.equal((await claimOne(second)).id, delayed.id);
    } finally {
      await second.close();
    }
  });

  it('gives back, after one rescuer pass, the attempts left running at close whose handlers never started', async () => {
    const path = freshPath();
    const clock = new FakeClock(T0);
    const first = await SqliteStore.open(path, { capacity: 100, clock: clock.now });
    const [ran, lookAhead] = await insertOk(first, [
      newJob({ maxAttempts: 1, priority: 9 }),
      newJob({ maxAttempts: 1 }),
    ]);
    assert.ok(ran && lookAhead);
    const [r1, l1] = await claimUnstarted(first, 2, 'gone');
    assert.ok(r1 && l1);
    await startAttempts(first, [r1], 'gone');
    await first.close();

    clock.set(T0 + 1000);
    const second = await SqliteStore.open(path, { capacity: 100, clock: clock.now });
    try {
      assert.equal(await rescueOnce(second), 2);
      assert.equal((await mustGet(second, ran.id)).status, 'failed');
      const back = await mustGet(second, lookAhead.id);
      assert.equal(back.status, 'queued');
      assert.equal(back.attempts, 0);
      assert.equal(back.error, null);
      await assertCountsExact(second);
      const again = await claimOne(second);
      assert.equal(again.id, lookAhead.id);
      assert.equal(again.attempts, 1);
    } finally {
      await second.close();
    }
  });

  it('retries jobs left running at close after one rescuer pass: interrupted, or failed on the last attempt', async () => {
    const path = freshPath();
    const clock = new FakeClock(T0);
    const first = await SqliteStore.open(path, { capacity: 100, clock: clock.now });
    const backoff = { initialMs: 100, factor: 2, maxMs: 1000, jitter: 'none' } as const;
    const [again, last, idle] = await insertOk(first, [
      newJob({ maxAttempts: 3, backoff, priority: 9 }),
      newJob({ maxAttempts: 1 }),
      newJob(),
    ]);
    assert.ok(again && last && idle);
    const dependent = await insertOne(first, { dependsOn: [last.id] });
    const [a1, l1] = await claimUnstarted(first, 2, 'gone');
    assert.equal(a1?.id, again.id);
    assert.equal(l1?.id, last.id);
    assert.ok(a1 && l1);
    await startAttempts(first, [a1, l1], 'gone');
    await first.close();

    // Well within the lease by the clock: only the open marks those leases dead.
    clock.set(T0 + 1000);
    const second = await SqliteStore.open(path, { capacity: 100, clock: clock.now });
    try {
      assert.deepEqual(
        (await second.expiredLeases(10)).map((e) => [e.id, e.owner, e.attempt]).sort(),
        [
          [again.id, 'gone', 1],
          [last.id, 'gone', 1],
        ].sort(),
      );
      assert.equal(await rescueOnce(second), 2);
      const retrying = await mustGet(second, again.id);
      assert.equal(retrying.status, 'retrying');
      assert.equal(retrying.error?.code, 'interrupted');
      assert.equal(retrying.error?.attempt, 1);
      assert.equal(retrying.runAt, T0 + 1000 + 100);
      const failed = await mustGet(second, last.id);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error?.code, 'interrupted');
      const failedDependent = await mustGet(second, dependent.id);
      assert.equal(failedDependent.status, 'failed');
      assert.equal(failedDependent.error?.code, 'dependency_failed');
      assert.equal((await mustGet(second, idle.id)).status, 'queued');
      await assertCountsExact(second);
      assert.equal(await finishOne(second, { id: again.id, attempts: 1 }, completed(1), 'gone'), null);
      assert.equal(await rescueOnce(second), 0);
      clock.set(T0 + 1100);
      const [next, after] = await claimJobs(second, 2);
      assert.equal(next?.id, again.id);
      assert.equal(next?.attempts, 2);
      assert.equal(after?.id, idle.id);
    } finally {
      await second.close();
    }
  });

  it('refuses a second open of the same file with store_in_use', async () => {
    const path = freshPath();
    const first = await SqliteStore.open(path, { capacity: 10 });
    try {
      await assert.rejects(SqliteStore.open(path, { capacity: 10 }), {
        name: 'StoreError',
        code: 'store_in_use',
        message: `the database ${path} is in use by another Kiln process`,
      });
      const raw = new Database(path, { timeout: 0 });
      try {
        assert.throws(() => raw.prepare('SELECT count(*) FROM jobs').get(), { code: 'SQLITE_BUSY' });
      } finally {
        raw.close();
      }
      // The refused open changed nothing for the holder.
      assert.equal(first.available, true);
      await insertOne(first);
    } finally {
      await first.close();
    }
    const again = await SqliteStore.open(path, { capacity: 10 });
    assert.equal((await again.counts()).pending, 1);
    await again.close();
  });

  it('keeps a paused queue paused across close and reopen', async () => {
    const path = freshPath();
    const first = await SqliteStore.open(path, { capacity: 10 });
    assert.equal(await first.paused(), false);
    await first.setPaused(true);
    await first.close();
    const second = await SqliteStore.open(path, { capacity: 10 });
    assert.equal(await second.paused(), true);
    await second.setPaused(false);
    await second.close();
    const third = await SqliteStore.open(path, { capacity: 10 });
    assert.equal(await third.paused(), false);
    await third.close();
  });

  it('upgrades a file of schema version 1 at open, jobs and leases included', async () => {
    const path = freshPath();
    const raw = new Database(path);
    raw.exec(jobsSchema);
    insertRawJob(raw, { id: 'old-queued', status: 'queued' });
    insertRawJob(raw, { id: 'old-running', status: 'running', attempts: 1, lease: 'old-server' });
    raw.pragma('user_version = 1');
    raw.close();

    const clock = new FakeClock(T0 + 100);
    const store = await SqliteStore.open(path, { capacity: 10, clock: clock.now });
    try {
      const queued = await mustGet(store, 'old-queued');
      assert.equal(queued.status, 'queued');
      assert.deepEqual(queued.payload, { old: true });
      assert.equal(await store.paused(), false);
      await store.setPaused(true);
      assert.equal(await store.paused(), true);
      // The old file's lease is dead like any other at open.
      assert.equal(await rescueOnce(store), 1);
      assert.equal((await mustGet(store, 'old-running')).status, 'retrying');
      assert.equal((await claimOne(store)).id, 'old-queued');
      await assertCountsExact(store);
    } finally {
      await store.close();
    }
    const upgraded = schemaOf(path);
    assert.equal(upgraded.version, SCHEMA_VERSION);
    assert.ok(upgraded.names.includes('settings'));
    assert.ok(upgraded.names.includes('jobs_running_lease'));
  });

  it('upgrades a file of schema version 2 at open, keeping its settings', async () => {
    const path = freshPath();
    const raw = new Database(path);
    raw.exec(jobsSchema);
    raw.exec(settingsSchema);
    raw.prepare("INSERT INTO settings (key, value) VALUES ('paused', 'true')").run();
    insertRawJob(raw, { id: 'v2-queued', status: 'queued' });
    raw.pragma('user_version = 2');
    raw.close();

    const store = await SqliteStore.open(path, { capacity: 10 });
    try {
      assert.equal(await store.paused(), true);
      assert.equal((await mustGet(store, 'v2-queued')).status, 'queued');
      await assertCountsExact(store);
    } finally {
      await store.close();
    }
    const upgraded = schemaOf(path);
    assert.equal(upgraded.version, SCHEMA_VERSION);
    assert.ok(upgraded.names.includes('jobs_running_lease'));
  });

  it('upgrades a file of schema version 11: the jobs of a batch with a callback are counted, the others read', async () => {
    const path = freshPath();
    const raw = new Database(path);
    for (const step of MIGRATIONS.slice(0, 11)) raw.exec(step);
    const callback = JSON.stringify({ url: 'https://hooks.example.com/b' });
    const addBatch = raw.prepare(
      'INSERT INTO batches (id, total, remaining, created_at, finished_at, callback) VALUES (?, 1, 1, ?, NULL, ?)',
    );
    addBatch.run('b-callback', T0, callback);
    addBatch.run('b-plain', T0, null);
    insertRawJob(raw, { id: 'in-callback-batch', status: 'queued' });
    insertRawJob(raw, { id: 'in-plain-batch', status: 'queued' });
    raw.prepare("UPDATE jobs SET batch = 'b-callback' WHERE id = 'in-callback-batch'").run();
    raw.prepare("UPDATE jobs SET batch = 'b-plain' WHERE id = 'in-plain-batch'").run();
    raw.pragma('user_version = 11');
    raw.close();

    const clock = new FakeClock(T0 + 100);
    const store = await SqliteStore.open(path, { capacity: 10, clock: clock.now });
    try {
      assert.equal((await store.batch('b-callback'))?.finishedAt, null);
      for (let i = 0; i < 2; i++) await finishOne(store, await claimOne(store), completed(i));
      const due = await store.claimDeliveries(OWNER, 10_000, 10);
      assert.deepEqual(
        due.map((d) => [d.event, d.jobId]),
        [['batch.finished', 'b-callback']],
      );
      assert.equal((await store.batch('b-callback'))?.finishedAt, T0 + 100);
      assert.equal((await store.batch('b-plain'))?.finishedAt, T0 + 100);
    } finally {
      await store.close();
    }
  });

  it('refuses a file written by a newer schema', async () => {
    const path = freshPath();
    const raw = new Database(path);
    for (const step of [jobsSchema, settingsSchema, runningLeaseSchema]) raw.exec(step);
    raw.pragma('user_version = 99');
    raw.close();
    await assert.rejects(SqliteStore.open(path, { capacity: 10 }), {
      name: 'StoreError',
      code: 'unsupported_schema',
      message: `the database ${path} has schema version 99; this Kiln knows versions up to ${SCHEMA_VERSION}`,
    });
    assert.equal(schemaOf(path).version, 99);
  });

  it('resolves a write only after the commit that holds it', async () => {
    const path = freshPath();
    const store = await SqliteStore.open(path, { capacity: 10, synchronous: 'full' });
    try {
      const one = newJob();
      const two = newJob();
      const writes = [store.insert([one]), store.insert([two])];
      assert.equal(statusOnDisk(path, one.id), null);
      const onDiskAtResolve = await Promise.all(
        writes.map((write, i) => write.then(() => statusOnDisk(path, (i === 0 ? one : two).id))),
      );
      assert.deepEqual(onDiskAtResolve, ['queued', 'queued']);

      const cancel = store.cancel(one.id);
      assert.equal(statusOnDisk(path, one.id), 'queued');
      await cancel;
      assert.equal(statusOnDisk(path, one.id), 'cancelled');
    } finally {
      await store.close();
    }
  });

  it('answers a claim of tiny jobs before storing it (at-least-once allows losing it), and stores it with the next write', async () => {
    const path = freshPath();
    const store = await SqliteStore.open(path, { capacity: 10 });
    try {
      const job = await insertOne(store);
      const micro = { costs: new Map([[job.type, 0.05]]), budgetMs: 2, maxJobs: 10, solo: new Set<string>() };
      const claimed = await store.claim(claimRequest(1, { micro }));
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [[job.id]],
      );
      assert.equal(statusOnDisk(path, job.id), 'queued');
      assert.deepEqual(await store.heartbeat(OWNER, [job.id], LEASE_MS), []);
      assert.equal(statusOnDisk(path, job.id), 'running');
    } finally {
      await store.close();
    }
  });

  it('answers a claim of a job not known to be tiny once it is stored: a crash as its handler starts finds it running', async () => {
    const path = freshPath();
    const store = await SqliteStore.open(path, { capacity: 10 });
    try {
      const job = await insertOne(store);
      const claimed = await claimOneUnstarted(store);
      assert.equal(claimed.id, job.id);
      assert.equal(statusOnDisk(path, job.id), 'running');
    } finally {
      await store.close();
    }
  });

  it('commits what is open at close, claims included', async () => {
    const path = freshPath();
    const clock = new FakeClock(T0);
    const store = await SqliteStore.open(path, { capacity: 10, clock: clock.now });
    const claimedJob = await insertOne(store);
    const job = newJob();
    const write = store.insert([job]);
    const claimed = await store.claim(claimRequest(1));
    assert.deepEqual(
      claimed.map((batch) => batch.map((j) => j.id)),
      [[claimedJob.id]],
    );
    await store.close();
    assert.equal((await write).ok, true);
    const reopened = await SqliteStore.open(path, { capacity: 10, clock: clock.now });
    try {
      assert.equal((await mustGet(reopened, job.id)).status, 'queued');
      // The claim is in the file (its lease is there to rescue), and its handler never started:
      // a reader sees it as before the claim, and the rescue gives the attempt back.
      const claimedRead = await mustGet(reopened, claimedJob.id);
      assert.equal(claimedRead.status, 'queued');
      assert.equal(claimedRead.attempts, 0);
      assert.equal(await rescueOnce(reopened), 1);
      const back = await mustGet(reopened, claimedJob.id);
      assert.equal(back.status, 'queued');
      assert.equal(back.attempts, 0);
    } finally {
      await reopened.close();
    }
  });

  it('creates the directory of the file', async () => {
    const path = join(dirname(freshPath()), 'nested', 'deeper', 'kiln.db');
    const store = await SqliteStore.open(path, { capacity: 10, synchronous: 'normal' });
    assert.equal(store.path, path);
    await store.close();
    assert.ok(existsSync(path));
  });
});
