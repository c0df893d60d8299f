import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { SqliteStore } from '../../src/store/sqlite.js';
import {
  assertCountsExact,
  insertOk,
  insertOne,
  lease,
  mustGet,
  newJob,
  runStoreConformance,
  T0,
} from './conformance.js';

const dir = mkdtempSync(join(tmpdir(), 'kiln-sqlite-store-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
const freshPath = () => join(dir, `store-${++files}.db`);

runStoreConformance('sqlite', async (options) => SqliteStore.open(freshPath(), options));

/** Opens a copy of the file as it is on disk now: only committed transactions are in it. */
function committedCopy(path: string): Database.Database {
  const copy = freshPath();
  copyFileSync(path, copy);
  if (existsSync(`${path}-wal`)) copyFileSync(`${path}-wal`, `${copy}-wal`);
  return new Database(copy, { readonly: true });
}

describe('sqlite store: the file', () => {
  it('keeps jobs, their ready order and the counts across close and reopen', async () => {
    const path = freshPath();
    const first = SqliteStore.open(path, { capacity: 100 });
    const a = await insertOne(first, { priority: 5 }, T0);
    const b = await insertOne(first, { priority: 9 }, T0 + 1);
    const c = await insertOne(first, { priority: 5 }, T0 + 2);
    const delayed = await insertOne(first, { runAt: T0 + 5000 });
    await insertOne(first, { dependsOn: [a.id] });
    const cancelled = await insertOne(first);
    await first.cancel(cancelled.id, T0 + 3);
    const before = await first.counts();
    await first.close();

    const second = SqliteStore.open(path, { capacity: 100 });
    try {
      assert.equal(second.recovered, 0);
      assert.deepEqual(await second.counts(), before);
      await assertCountsExact(second);
      assert.equal(await second.nextDueAt(), T0 + 5000);
      const claimed = await second.claim(10, lease(), T0 + 10);
      assert.deepEqual(
        claimed.map((j) => j.id),
        [b.id, a.id, c.id],
      );
      const [late] = await second.claim(10, lease(), T0 + 5000);
      assert.equal(late?.id, delayed.id);
    } finally {
      await second.close();
    }
  });

  it('recovers jobs left running at close as interrupted: retrying, or failed on the last attempt', async () => {
    const path = freshPath();
    const first = SqliteStore.open(path, { capacity: 100 });
    const backoff = { initialMs: 100, factor: 2, maxMs: 1000, jitter: 'none' } as const;
    const [again, last, child] = await insertOk(first, [
      newJob({ maxAttempts: 3, backoff, priority: 9 }),
      newJob({ maxAttempts: 1 }),
      newJob(),
    ]);
    assert.ok(again && last && child);
    const [dependent] = await insertOk(first, [newJob({ dependsOn: [last.id] })]);
    assert.ok(dependent);
    assert.equal((await first.claim(2, lease('gone'), T0)).length, 2);
    await first.close();

    const openedAfter = Date.now();
    const second = SqliteStore.open(path, { capacity: 100 });
    const openedBefore = Date.now();
    try {
      assert.equal(second.recovered, 3);
      const retrying = await mustGet(second, again.id);
      assert.equal(retrying.status, 'retrying');
      assert.equal(retrying.error?.code, 'interrupted');
      assert.equal(retrying.error?.attempt, 1);
      assert.ok(retrying.runAt !== null && retrying.runAt >= openedAfter + 100 && retrying.runAt <= openedBefore + 100);
      const failed = await mustGet(second, last.id);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error?.code, 'interrupted');
      assert.equal((await mustGet(second, dependent.id)).status, 'failed');
      assert.equal((await mustGet(second, child.id)).status, 'queued');
      await assertCountsExact(second);
      assert.equal(await second.finish(again.id, lease('gone'), { kind: 'completed', result: 1 }, T0), null);
    } finally {
      await second.close();
    }
  });

  it('refuses a second open of the same file with a clear error', async () => {
    const path = freshPath();
    const first = SqliteStore.open(path, { capacity: 10 });
    try {
      assert.throws(() => SqliteStore.open(path, { capacity: 10 }), {
        code: 'store_in_use',
        message: `the database ${path} is in use by another Kiln process`,
      });
      assert.throws(() => new Database(path, { timeout: 0 }).prepare('SELECT count(*) FROM jobs').get(), {
        code: 'SQLITE_BUSY',
      });
    } finally {
      await first.close();
    }
    const again = SqliteStore.open(path, { capacity: 10 });
    await again.close();
  });

  it('keeps a paused queue paused across close and reopen', async () => {
    const path = freshPath();
    const first = SqliteStore.open(path, { capacity: 10 });
    assert.equal(await first.paused(), false);
    await first.setPaused(true);
    await first.close();
    const second = SqliteStore.open(path, { capacity: 10 });
    assert.equal(await second.paused(), true);
    await second.setPaused(false);
    await second.close();
    const third = SqliteStore.open(path, { capacity: 10 });
    assert.equal(await third.paused(), false);
    await third.close();
  });

  it('upgrades a file of schema version 1 to the current schema at open', async () => {
    const path = freshPath();
    const first = SqliteStore.open(path, { capacity: 10 });
    await first.close();
    const raw = new Database(path);
    raw.exec('DROP TABLE settings');
    raw.pragma('user_version = 1');
    raw.close();
    const upgraded = SqliteStore.open(path, { capacity: 10 });
    await upgraded.setPaused(true);
    assert.equal(await upgraded.paused(), true);
    await upgraded.close();
  });

  it('resolves a write only after the commit that holds it, one commit for a whole turn', async () => {
    const path = freshPath();
    const store = SqliteStore.open(path, { capacity: 10, synchronous: 'full' });
    try {
      const one = newJob();
      const two = newJob();
      const writes = [store.insert([one], T0), store.insert([two], T0)];
      assert.equal(store.inTransaction, true);
      const before = committedCopy(path);
      assert.deepEqual(before.prepare('SELECT id FROM jobs').all(), []);
      before.close();

      let resolvedInTransaction: boolean | null = null;
      await Promise.all(
        writes.map((w) =>
          w.then(() => {
            resolvedInTransaction ??= store.inTransaction;
          }),
        ),
      );
      assert.equal(resolvedInTransaction, false);
      const afterCommit = committedCopy(path);
      assert.deepEqual(
        afterCommit
          .prepare('SELECT id FROM jobs ORDER BY id')
          .all()
          .map((r) => (r as { id: string }).id),
        [one.id, two.id],
      );
      afterCommit.close();
    } finally {
      await store.close();
    }
  });

  it('answers a claim before its commit (at-least-once allows losing it)', async () => {
    const store = SqliteStore.open(freshPath(), { capacity: 10 });
    try {
      await insertOne(store);
      const claimed = await store.claim(1, lease(), T0);
      assert.equal(claimed.length, 1);
      assert.equal(store.inTransaction, true);
    } finally {
      await store.close();
    }
  });

  it('commits what is open at close', async () => {
    const path = freshPath();
    const store = SqliteStore.open(path, { capacity: 10 });
    const job = newJob();
    const write = store.insert([job], T0);
    await store.close();
    assert.equal((await write).ok, true);
    const reopened = SqliteStore.open(path, { capacity: 10 });
    try {
      assert.equal((await mustGet(reopened, job.id)).status, 'queued');
    } finally {
      await reopened.close();
    }
  });

  it('creates the directory of the file', async () => {
    const path = join(dir, 'nested', 'deeper', 'kiln.db');
    const store = SqliteStore.open(path, { capacity: 10, synchronous: 'normal' });
    await store.close();
    assert.ok(existsSync(path));
  });
});
