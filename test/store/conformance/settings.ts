import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { OpenStore } from './context.js';
import { T0, claimJobs, insertOk, newJob } from '../../support/store-fixtures.js';

/** Settings: task limit overrides, group limits and their counts, and whether dispatch is paused. */
export function settingsFacet(openStore: OpenStore): void {
  describe('settings', () => {
    it('keeps task limit overrides, and removes one', async () => {
      const { store } = await openStore();
      assert.deepEqual([...(await store.limitOverrides())], []);
      await store.setLimitOverride('test.echo', { concurrency: 2 });
      await store.setLimitOverride('test.other', { concurrency: null, rateLimit: { max: 3, perMs: 1000 } });
      assert.deepEqual([...(await store.limitOverrides())].sort(), [
        ['test.echo', { concurrency: 2 }],
        ['test.other', { concurrency: null, rateLimit: { max: 3, perMs: 1000 } }],
      ]);
      await store.setLimitOverride('test.echo', null);
      assert.deepEqual([...(await store.limitOverrides()).keys()], ['test.other']);
      assert.equal(await store.paused(), false, 'a setting of its own');
    });

    it('keeps group limits apart from task limit overrides, and removes one', async () => {
      const { store } = await openStore();
      await store.setLimitOverride('shared-name', { concurrency: 2 });
      await store.setLimitOverride('shared-name', { concurrency: 1, rateLimit: null }, 'group');
      await store.setLimitOverride('tenant-b', { concurrency: null, rateLimit: { max: 3, perMs: 1000 } }, 'group');
      assert.deepEqual([...(await store.limitOverrides('group'))].sort(), [
        ['shared-name', { concurrency: 1, rateLimit: null }],
        ['tenant-b', { concurrency: null, rateLimit: { max: 3, perMs: 1000 } }],
      ]);
      assert.deepEqual([...(await store.limitOverrides())], [['shared-name', { concurrency: 2 }]]);
      await store.setLimitOverride('shared-name', null, 'group');
      assert.deepEqual([...(await store.limitOverrides('group')).keys()], ['tenant-b']);
      assert.deepEqual([...(await store.limitOverrides()).keys()], ['shared-name'], 'the task override stays');
    });

    it('counts the queued and running jobs of each group that has any', async () => {
      const { store } = await openStore();
      await insertOk(store, [
        newJob({ group: 'tenant-a', priority: 9 }),
        newJob({ group: 'tenant-a' }),
        newJob({ group: 'tenant-b' }),
        newJob(),
        newJob({ group: 'tenant-c', runAt: T0 + 60_000 }),
      ]);
      const [claimed] = await claimJobs(store, 1);
      assert.equal(claimed?.group, 'tenant-a');
      assert.deepEqual(await store.groupCounts(), [
        { group: 'tenant-a', queued: 1, running: 1 },
        { group: 'tenant-b', queued: 1, running: 0 },
      ]);
    });

    it('keeps whether dispatch is paused', async () => {
      const { store } = await openStore();
      assert.equal(await store.paused(), false);
      await store.setPaused(true);
      assert.equal(await store.paused(), true);
      await store.setPaused(false);
      assert.equal(await store.paused(), false);
    });
  });
}
