import assert from 'node:assert/strict';
import { mkdirSync, renameSync, rmdirSync } from 'node:fs';
import { describe, it } from 'node:test';
import { isStoreError } from '../../src/store/errors.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import {
  allJobs,
  assertCountsExact,
  claimJobs,
  claimRequest,
  completed,
  finishOne,
  insertOk,
  insertOne,
  LEASE_MS,
  mustGet,
  newJob,
  recordEvents,
  T0,
} from '../support/store-fixtures.js';
import { FakeClock } from '../support/fake-clock.js';
import { pollUntil } from '../support/poll.js';
import { captureLog, LEVELS } from '../support/log-lines.js';
import { tempFiles } from '../support/temp-files.js';

const freshPath = tempFiles('kiln-sqlite-failures-');

const unavailable = { name: 'StoreError', code: 'store_unavailable' };

/** Waits for the store to be available again by itself (a new store thread coming up). */
async function untilAvailable(store: SqliteStore, what: string): Promise<void> {
  await pollUntil(
    async () => store.available,
    (available) => available,
    { what, deadlineMs: 10_000, everyMs: 2 },
  );
}

describe('sqlite store: the disk is full', () => {
  it('refuses the insert that does not fit as store_unavailable, stores nothing of it, and keeps reading', async () => {
    const path = freshPath();
    const clock = new FakeClock(T0);
    // About 1.2 MB of pages: a few batches of jobs with 3 KiB of metadata fill it.
    const store = await SqliteStore.open(path, { capacity: 100_000, maxPageCount: 300, clock: clock.now });
    const accepted: string[] = [];
    let refused: { ids: string[]; error: unknown } | null = null;
    try {
      for (let batch = 0; batch < 100 && refused === null; batch++) {
        const jobs = Array.from({ length: 50 }, (_, i) =>
          newJob({ payload: { n: batch * 50 + i }, metadata: { pad: 'x'.repeat(3000) } }),
        );
        try {
          const inserted = await insertOk(store, jobs);
          accepted.push(...inserted.map((j) => j.id));
        } catch (error) {
          refused = { ids: jobs.map((j) => j.id), error };
        }
      }
      assert.ok(refused, 'the file filled up');
      assert.ok(accepted.length >= 100, `only ${accepted.length} jobs fit`);
      assert.ok(isStoreError(refused.error, 'store_unavailable'), `got ${String(refused.error)}`);
      assert.match((refused.error as Error).message, /full/);
      assert.equal(store.available, false);

      // Reads still work, and say what the file holds.
      assert.equal((await mustGet(store, accepted[0] as string)).status, 'queued');
      assert.equal(await store.get(refused.ids[0] as string), null);
      const counts = await store.counts();
      assert.equal(counts.pending, accepted.length);
      await assertCountsExact(store);
      assert.deepEqual((await allJobs(store)).map((j) => j.id).sort(), [...accepted].sort());
    } finally {
      await store.close();
    }

    const reopened = await SqliteStore.open(path, { capacity: 100_000, clock: clock.now });
    try {
      assert.equal(reopened.available, true);
      assert.deepEqual((await allJobs(reopened)).map((j) => j.id).sort(), [...accepted].sort());
      await assertCountsExact(reopened);
      // Without the limit there is room again: the refused batch is stored whole.
      const retried = await insertOk(
        reopened,
        refused.ids.map((id) => newJob({ id, metadata: { pad: 'x'.repeat(3000) } })),
      );
      assert.equal(retried.length, refused.ids.length);
      assert.equal((await reopened.counts()).pending, accepted.length + refused.ids.length);
    } finally {
      await reopened.close();
    }
  });

  it('answers the reads that share a transaction with a write that does not fit', async () => {
    const path = freshPath();
    const store = await SqliteStore.open(path, { capacity: 100_000, maxPageCount: 100 });
    try {
      const accepted: string[] = [];
      let full = false;
      for (let batch = 0; batch < 100 && !full; batch++) {
        try {
          const jobs = await insertOk(
            store,
            Array.from({ length: 20 }, () => newJob({ metadata: { pad: 'z'.repeat(3000) } })),
          );
          accepted.push(...jobs.map((job) => job.id));
        } catch (error) {
          assert.ok(isStoreError(error, 'store_unavailable'), String(error));
          full = true;
        }
      }
      assert.ok(full, 'the file filled up');
      const first = accepted[0] as string;
      for (let round = 0; round < 5; round++) {
        // One event-loop turn: one message to the store thread, one transaction for all of it.
        const [inserted, got, counts, page] = await Promise.allSettled([
          store.insert(Array.from({ length: 20 }, () => newJob({ metadata: { pad: 'z'.repeat(3000) } }))),
          store.get(first),
          store.counts(),
          store.list({ limit: 5 }),
        ]);
        assert.equal(inserted.status, 'rejected');
        assert.ok(isStoreError(inserted.reason, 'store_unavailable'), String(inserted.reason));
        assert.equal(got.status, 'fulfilled', `get: ${String(got.status === 'rejected' ? got.reason : '')}`);
        assert.equal(got.value?.id, first);
        assert.equal(
          counts.status,
          'fulfilled',
          `counts: ${String(counts.status === 'rejected' ? counts.reason : '')}`,
        );
        assert.equal(counts.value.pending, accepted.length);
        assert.equal(page.status, 'fulfilled', `list: ${String(page.status === 'rejected' ? page.reason : '')}`);
        assert.equal(page.value.jobs.length, 5);
      }
      await assertCountsExact(store);
    } finally {
      await store.close();
    }
  });

  it('is available again once a write succeeds', async () => {
    const path = freshPath();
    const store = await SqliteStore.open(path, { capacity: 100_000, maxPageCount: 100 });
    try {
      let full = false;
      for (let batch = 0; batch < 100 && !full; batch++) {
        try {
          await store.insert(Array.from({ length: 20 }, () => newJob({ metadata: { pad: 'y'.repeat(3000) } })));
        } catch (error) {
          assert.ok(isStoreError(error, 'store_unavailable'), String(error));
          full = true;
        }
      }
      assert.ok(full, 'the file filled up');
      assert.equal(store.available, false);
      // Small writes that change no page count still fit.
      await store.setPaused(true);
      assert.equal(store.available, true);
      assert.equal(await store.paused(), true);
    } finally {
      await store.close();
    }
  });
});

describe('sqlite store: the store thread dies', () => {
  it('fails writes as store_unavailable until a new thread is up, reports unstored claims lost, hands nothing out twice', async () => {
    const path = freshPath();
    const clock = new FakeClock(T0);
    const store = await SqliteStore.open(path, { capacity: 1000, restartDelayMs: 10, clock: clock.now });
    try {
      const jobs = await insertOk(
        store,
        Array.from({ length: 10 }, (_, i) => newJob({ payload: { n: i } })),
      );
      const events = recordEvents(store);
      const lost = () => events.seen.filter((e) => e.kind === 'lost');

      // Stored claims: the heartbeat is answered after the commit that holds them.
      const held = await claimJobs(store, 3, 'w');
      assert.deepEqual(
        await store.heartbeat(
          'w',
          held.map((j) => j.id),
          LEASE_MS,
        ),
        [],
      );

      // First death: claims answered but still waiting for a message to carry them (claims
      // of jobs whose type is known to be tiny; any other claim waits for its commit).
      const tiny = { costs: new Map([[jobs[0]?.type ?? '', 0.05]]), budgetMs: 2, maxJobs: 1, solo: new Set<string>() };
      const queuedClaims = (await store.claim(claimRequest(2, { owner: 'w', micro: tiny }))).flat();
      assert.equal(queuedClaims.length, 2);
      const first = store.thread;
      assert.ok(first);
      await first.terminate();
      assert.equal(store.available, false);
      assert.deepEqual(
        lost(),
        queuedClaims.map((j) => ({ kind: 'lost', id: j.id, attempt: 1 })),
      );
      await assert.rejects(store.insert([newJob()]), unavailable);
      await assert.rejects(store.get(jobs[0]?.id as string), unavailable);
      await assert.rejects(store.heartbeat('w', [held[0]?.id as string], LEASE_MS), unavailable);
      assert.deepEqual(await store.claim({ owner: 'w', leaseMs: LEASE_MS, batches: 10, micro: null }), []);
      await untilAvailable(store, 'a new store thread to be up');
      assert.notEqual(store.thread, first);

      // Second death: a write sent to the thread, not answered. After a restart the ready
      // index holds no copies, so these claims read their jobs from the file in the same
      // step that stores them: they are stored claims, not lost ones.
      const sentClaims = await claimJobs(store, 2, 'w');
      const inFlight = newJob();
      const write = store.insert([inFlight]);
      const second = store.thread;
      assert.ok(second);
      await second.terminate();
      await assert.rejects(write, unavailable);
      assert.equal(store.available, false);
      assert.deepEqual(
        lost(),
        queuedClaims.map((j) => ({ kind: 'lost', id: j.id, attempt: 1 })),
      );
      await untilAvailable(store, 'a new store thread to be up again');
      held.push(...sentClaims);

      // Everything stored before the deaths is there; the refused write is not.
      assert.equal(await store.get(inFlight.id), null);
      assert.deepEqual((await allJobs(store)).map((j) => j.id).sort(), jobs.map((j) => j.id).sort());
      await assertCountsExact(store);
      // The stored claims still hold their leases across the restarts.
      assert.deepEqual(
        await store.heartbeat(
          'w',
          held.map((j) => j.id),
          LEASE_MS,
        ),
        [],
      );
      for (const job of held) assert.equal((await mustGet(store, job.id)).status, 'running');

      const again = await claimJobs(store, 100, 'w2');
      const againIds = new Set(again.map((j) => j.id));
      for (const job of held) assert.equal(againIds.has(job.id), false, `${job.id} was handed out twice`);
      // Only the claims reported lost are handed out again, with the rest of the queue.
      const heldIds = new Set(held.map((j) => j.id));
      assert.deepEqual(
        [...againIds].sort(),
        jobs
          .map((j) => j.id)
          .filter((id) => !heldIds.has(id))
          .sort(),
      );
      // Each lost claim was handed out again: after the first restart, or now.
      const sentIds = new Set(sentClaims.map((j) => j.id));
      for (const job of queuedClaims) assert.ok(againIds.has(job.id) || sentIds.has(job.id), job.id);

      for (const job of held) {
        assert.deepEqual(await finishOne(store, { id: job.id, attempts: 1 }, completed(job.id), 'w'), {
          status: 'completed',
          others: 0,
        });
      }
      // An outcome of a lost claim's attempt is refused (the job was handed out again).
      for (const job of queuedClaims) {
        if (sentIds.has(job.id)) continue;
        assert.equal(await finishOne(store, { id: job.id, attempts: 1 }, completed('abandoned'), 'w'), null);
      }
      await assertCountsExact(store);
      assert.equal(lost().length, queuedClaims.length);
      events.stop();
    } finally {
      await store.close();
    }
  });

  it('does not restart the store thread of an in-memory store: a new one would hold none of its jobs', async () => {
    const store = await SqliteStore.open(':memory:', { capacity: 10, restartDelayMs: 1 });
    try {
      await insertOk(store, [newJob()]);
      const thread = store.thread;
      assert.ok(thread);
      await thread.terminate();
      assert.equal(store.available, false);
      // Fifty times the restart delay later (a wait for something that must not happen):
      // still no thread, still refusing writes.
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(store.thread, null);
      assert.equal(store.available, false);
      await assert.rejects(store.insert([newJob()]), (error: unknown) => isStoreError(error, 'store_unavailable'));
    } finally {
      await store.close();
    }
  });

  it('closes cleanly while its thread is down', async () => {
    const store = await SqliteStore.open(freshPath(), { capacity: 10, restartDelayMs: 60_000 });
    const thread = store.thread;
    assert.ok(thread);
    await thread.terminate();
    assert.equal(store.available, false);
    await store.close();
    await assert.rejects(store.get('x'), { code: 'store_closed' });
    assert.equal(store.thread, null);
  });

  it('logs a thread that died when it dies, when the cause changes and when a new one is up, not per restart', async () => {
    const path = freshPath();
    const log = captureLog();
    const store = await SqliteStore.open(path, { capacity: 100, restartDelayMs: 5, log: log.logger });
    const away = `${path}.away`;
    try {
      const job = await insertOne(store);
      const thread = store.thread;
      assert.ok(thread);
      await thread.terminate();
      // Before any restart can run: the file is gone and a directory stands in its place,
      // so every new thread fails to open it.
      renameSync(path, away);
      mkdirSync(path);
      await log.waitFor((line) => line.fault === 'store thread' && line.failures === 2, 'a restart failed');
      rmdirSync(path);
      renameSync(away, path);
      const end = await log.waitFor(
        (line) => line.fault === 'store thread' && line.level === LEVELS.info,
        'a new thread is up',
      );
      assert.ok((end.failures as number) >= 2, `failures: ${String(end.failures)}`);
      assert.deepEqual(
        log.lines.filter((line) => line.fault === 'store thread').map((line) => [line.level, line.msg]),
        [
          [LEVELS.error, 'store thread failed; retrying'],
          [LEVELS.error, 'store thread still failing, with another cause'],
          [LEVELS.info, 'store thread works again'],
        ],
      );
      assert.equal((await mustGet(store, job.id)).status, 'queued');
    } finally {
      await store.close();
    }
  });
});
