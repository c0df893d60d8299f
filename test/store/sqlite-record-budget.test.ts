import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import {
  assertCountsExact,
  claimOne,
  claimRequest,
  completed,
  finishOne,
  insertOk,
  insertOne,
  mustGet,
  newJob,
} from '../support/store-fixtures.js';
import { runStoreConformance } from './conformance/index.js';
import { tempFiles } from '../support/temp-files.js';

const freshPath = tempFiles('kiln-sqlite-record-budget-');

// The ready index keeps no copy of any job: every claim reads its jobs from the file.
runStoreConformance('sqlite store (file, no job copies in memory)', (options) =>
  SqliteStore.open(freshPath(), { ...options, recordBudget: 0 }),
);

describe('sqlite store: the ready index keeps copies within its budget', () => {
  it('claims whole jobs, payload and parents, whether their copy was kept or not', async () => {
    // Room for the copies of a few small jobs, not for the large ones.
    const store = await SqliteStore.open(freshPath(), { capacity: 100, recordBudget: 2000 });
    try {
      const parent = await insertOne(store, { type: 'test.parent' });
      assert.ok(await finishOne(store, await claimOne(store), completed({ from: 'parent' })));
      const large = { text: 'z'.repeat(5000) };
      const made = await insertOk(store, [
        newJob({ payload: { n: 0 } }),
        newJob({ payload: large }),
        newJob({ payload: { n: 2 }, dependsOn: [parent.id] }),
        newJob({ payload: large, dependsOn: [parent.id] }),
        newJob({ payload: { n: 4 } }),
        newJob({ payload: { n: 5 } }),
        newJob({ payload: { n: 6 } }),
      ]);
      const claimed = (await store.claim(claimRequest(10))).flat();
      assert.deepEqual(
        claimed.map((j) => j.id),
        made.map((j) => j.id),
      );
      const parents = [{ id: parent.id, type: 'test.parent', result: { from: 'parent' } }];
      assert.deepEqual(
        claimed.map((j) => [JSON.parse(j.payloadText), j.parents, j.status, j.attempts]),
        [
          [{ n: 0 }, [], 'running', 1],
          [large, [], 'running', 1],
          [{ n: 2 }, parents, 'running', 1],
          [large, parents, 'running', 1],
          [{ n: 4 }, [], 'running', 1],
          [{ n: 5 }, [], 'running', 1],
          [{ n: 6 }, [], 'running', 1],
        ],
      );
      // Claimed, not started: shown as before the claim.
      for (const job of made) assert.equal((await mustGet(store, job.id)).status, 'queued');
      await assertCountsExact(store);
    } finally {
      await store.close();
    }
  });

  it('claims a job it reads from the file in the same step, so a cancel after it is seen as one', async () => {
    const store = await SqliteStore.open(freshPath(), { capacity: 10, recordBudget: 0 });
    try {
      const job = await insertOne(store);
      const seen: string[] = [];
      store.subscribe((event) => {
        if (event.kind === 'changed' && event.id === job.id) seen.push(event.status);
      });
      // The claim goes first: it takes the job, and the cancel then cancels a running job,
      // which its event tells the dispatcher (that abandons the attempt).
      const [claimed, cancelled] = await Promise.all([store.claim(claimRequest(1)), store.cancel(job.id)]);
      assert.ok(cancelled !== null && 'job' in cancelled);
      assert.equal(cancelled.job.status, 'cancelled');
      assert.equal(cancelled.job.error?.attempt, 1, 'cancelled while its first attempt was claimed');
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => [j.id, j.attempts])),
        [[[job.id, 1]]],
      );
      // A claim is no change a reader sees (the job shows queued until its handler starts).
      assert.deepEqual(seen, ['cancelled']);
      await assertCountsExact(store);
      // A cancel first: the claim finds nothing to hand out.
      const other = await insertOne(store);
      const [cancelledFirst, none] = await Promise.all([store.cancel(other.id), store.claim(claimRequest(1))]);
      assert.ok(cancelledFirst !== null && 'job' in cancelledFirst);
      assert.deepEqual(none, []);
      await assertCountsExact(store);
    } finally {
      await store.close();
    }
  });
});
