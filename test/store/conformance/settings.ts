import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { OpenStore } from './context.js';

/** Settings: task limit overrides and whether dispatch is paused. */
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
