import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { OWNER, newJob, insertOne, claimRequest, completed } from '../../support/store-fixtures.js';
import type { OpenStore } from './context.js';

/** Life cycle: open and close. */
export function lifeCycleFacet(openStore: OpenStore): void {
  describe('life cycle', () => {
    it('is available once open; closes twice safely and refuses calls after close', async () => {
      const { store } = await openStore();
      assert.equal(store.available, true);
      const job = await insertOne(store);
      await store.close();
      await store.close();
      assert.equal(store.available, false);
      const closed = { name: 'StoreError', code: 'store_closed' };
      await assert.rejects(store.get(job.id), closed);
      await assert.rejects(store.insert([newJob()]), closed);
      await assert.rejects(store.claim(claimRequest(1)), closed);
      await assert.rejects(store.finish([{ id: job.id, attempt: 1, owner: OWNER, outcome: completed(1) }]), closed);
      await assert.rejects(store.cancel(job.id), closed);
      await assert.rejects(store.counts(), closed);
      await assert.rejects(store.list({ limit: 1 }), closed);
    });
  });
}
