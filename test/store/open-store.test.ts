import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { openStore } from '../../src/store/open-store.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { insertOne, mustGet } from '../support/store-fixtures.js';

const dir = mkdtempSync(join(tmpdir(), 'kiln-open-store-'));
after(() => rmSync(dir, { recursive: true, force: true }));

describe('openStore', () => {
  it('opens the memory store', async () => {
    const store = await openStore('memory', { capacity: 5, sqliteSync: 'full' });
    try {
      const job = await insertOne(store);
      assert.equal((await mustGet(store, job.id)).id, job.id);
      // The same implementation as a file, on a private in-memory database.
      assert.ok(store instanceof SqliteStore);
      assert.equal(store.path, ':memory:');
    } finally {
      await store.close();
    }
  });

  it('opens a sqlite file from sqlite:<path> and sqlite://<path>', async () => {
    for (const url of [`sqlite:${join(dir, 'a.db')}`, `sqlite://${join(dir, 'b.db')}`]) {
      const store = await openStore(url, { capacity: 5, sqliteSync: 'normal' });
      await store.close();
    }
    assert.ok(existsSync(join(dir, 'a.db')));
    assert.ok(existsSync(join(dir, 'b.db')));
  });

  it('opens a PostgreSQL store in the schema it is given, creating it', async () => {
    const schema = freshSchemaName();
    try {
      const store = await openStore(TEST_PG_URL, { capacity: 5, sqliteSync: 'full', pgSchema: schema, pgPoolSize: 2 });
      try {
        assert.equal(store.available, true);
        assert.equal((await store.counts()).pending, 0);
      } finally {
        await store.close();
      }
    } finally {
      await dropSchema(schema);
    }
  });

  it('fails to open an unreachable PostgreSQL store as store_unavailable, without echoing the URL', async () => {
    await assert.rejects(
      openStore('postgres://kiln:s3cret@127.0.0.1:1/kiln', { capacity: 5, sqliteSync: 'full' }),
      (error) => {
        assert.ok(error instanceof Error);
        assert.equal((error as { code?: string }).code, 'store_unavailable');
        assert.doesNotMatch(error.message, /s3cret/);
        return true;
      },
    );
  });

  it('rejects anything else with invalid_store_url', async () => {
    for (const url of ['mysql://x', 'sqlite:', '']) {
      await assert.rejects(openStore(url, { capacity: 5, sqliteSync: 'full' }), { code: 'invalid_store_url' });
    }
  });
});
