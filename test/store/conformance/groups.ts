import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ClaimedJob } from '../../../src/store/store.js';
import type { Job } from '../../../src/contract/job.js';
import type { OpenStore } from './context.js';
import {
  claimOneUnstarted,
  claimRequest,
  insertOk,
  insertOne,
  mustGet,
  newJob,
  OWNER,
} from '../../support/store-fixtures.js';

/** Fair share between groups when claiming. */
export function groupsFacet(openStore: OpenStore): void {
  describe('claim: fair share between groups', () => {
    const ids = (claimed: ClaimedJob[][]) => claimed.flat().map((j) => j.id);

    it('takes groups in turn within a priority, FIFO inside each, a late group level with the waiting ones', async () => {
      const { store, clock } = await openStore();
      const a = (
        await insertOk(
          store,
          Array.from({ length: 30 }, () => newJob({ group: 'tenant-a' })),
        )
      ).map((j) => j.id);
      clock.advance(1);
      const b = (
        await insertOk(
          store,
          Array.from({ length: 3 }, () => newJob({ group: 'tenant-b' })),
        )
      ).map((j) => j.id);
      clock.advance(1);
      assert.deepEqual(ids(await store.claim(claimRequest(8))), [a[0], b[0], a[1], b[1], a[2], b[2], a[3], a[4]]);
      assert.deepEqual(ids(await store.claim(claimRequest(100))), a.slice(5), 'then the rest of the big group');
    });

    it('counts jobs without a group as one group of their own, and keeps priority before turns', async () => {
      const { store, clock } = await openStore();
      const plain = (await insertOk(store, [newJob(), newJob(), newJob()])).map((j) => j.id);
      clock.advance(1);
      const grouped = (await insertOk(store, [newJob({ group: 'g' }), newJob({ group: 'g' })])).map((j) => j.id);
      clock.advance(1);
      const urgent = await insertOne(store, { group: 'g', priority: 9 });
      clock.advance(1);
      assert.deepEqual(ids(await store.claim(claimRequest(10))), [
        urgent.id,
        plain[0],
        grouped[0],
        plain[1],
        grouped[1],
        plain[2],
      ]);
    });

    it('does not let a group that ran dry bank turns: it comes back level with the others', async () => {
      const { store, clock } = await openStore();
      const first = await insertOne(store, { group: 'small' });
      const big = (
        await insertOk(
          store,
          Array.from({ length: 6 }, () => newJob({ group: 'big' })),
        )
      ).map((j) => j.id);
      clock.advance(1);
      assert.deepEqual(ids(await store.claim(claimRequest(3))), [first.id, big[0], big[1]]);
      // The small group had nothing queued while the big one ran two turns: it starts
      // at the big group's current turn, not ahead of it by the turns it missed.
      const again = (await insertOk(store, [newJob({ group: 'small' }), newJob({ group: 'small' })])).map((j) => j.id);
      clock.advance(1);
      assert.deepEqual(ids(await store.claim(claimRequest(10))), [big[2], again[0], big[3], again[1], big[4], big[5]]);
    });

    it('keeps the group on the job, and takes turns again after a job goes back to queued', async () => {
      const { store, clock } = await openStore();
      const [x1, x2] = await insertOk(store, [newJob({ group: 'x' }), newJob({ group: 'x' })]);
      clock.advance(1);
      const y1 = await insertOne(store, { group: 'y' });
      assert.ok(x1 && x2);
      assert.equal((await mustGet(store, x1.id)).group, 'x');
      assert.equal((await mustGet(store, y1.id)).group, 'y');
      assert.equal((await insertOne(store, { priority: 1 })).group, null);
      const claimed = await claimOneUnstarted(store);
      assert.equal(claimed.id, x1.id);
      await store.release([{ id: claimed.id, attempt: claimed.attempts, owner: OWNER }]);
      assert.deepEqual(ids(await store.claim(claimRequest(3))), [x1.id, y1.id, x2.id]);
    });

    it('lists by group, newest first, across pages', async () => {
      const { store } = await openStore();
      const made: Job[] = [];
      for (let i = 0; i < 7; i++) made.push(await insertOne(store, i % 2 === 0 ? { group: 'even' } : {}));
      const listed: string[] = [];
      let cursor: string | undefined;
      for (;;) {
        const page = await store.list({ group: 'even', limit: 2, ...(cursor === undefined ? {} : { cursor }) });
        listed.push(...page.jobs.map((j) => j.id));
        for (const job of page.jobs) assert.equal(job.group, 'even');
        if (page.nextCursor === null) break;
        cursor = page.nextCursor;
      }
      assert.deepEqual(
        listed,
        made
          .filter((_, i) => i % 2 === 0)
          .map((j) => j.id)
          .reverse(),
      );
      assert.deepEqual(
        (await store.list({ group: 'even', statuses: ['cancelled'], limit: 10 })).jobs,
        [],
        'group and status together',
      );
    });
  });
}
