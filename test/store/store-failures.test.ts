import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { resumeAndExpectEachRanOnce, startServer } from '../support/kiln.js';

/**
 * Resolves when the store has started a new thread and rebuilt its index (its `ready`
 * event); subscribe before stopping the thread so the event cannot come first.
 */
function restarted(store: SqliteStore): Promise<void> {
  const back = new Promise<void>((resolve, reject) => {
    const deadline = setTimeout(() => {
      unsubscribe();
      reject(new Error('the store never started a new thread'));
    }, 60_000);
    deadline.unref();
    const unsubscribe = store.subscribe((event) => {
      if (event.kind !== 'ready') return;
      clearTimeout(deadline);
      unsubscribe();
      resolve();
    });
  });
  // A test that fails before it waits for this does not leave a rejection nobody handles.
  back.catch(() => {});
  return back;
}

describe('the store failing under the HTTP API', () => {
  it('answers 503 store_unavailable when the file is full, keeps every job it accepted, runs each once', async () => {
    const server = await startServer({ KILN_STORE: 'sqlite', KILN_THREADS: '1' }, (dir) =>
      // About 1.2 MB of pages: a few batches of jobs with 3 KiB of metadata fill it.
      SqliteStore.open(join(dir, 'full.db'), { capacity: 100_000, maxPageCount: 300 }),
    );
    try {
      await server.request('POST', '/v1/queue/pause');
      const accepted: string[] = [];
      let refused = 0;
      for (let batch = 0; batch < 40 && refused === 0; batch++) {
        const jobs = Array.from({ length: 50 }, (_, i) => ({
          type: 'test.quick',
          payload: { n: batch * 50 + i },
          metadata: { pad: 'x'.repeat(3000) },
        }));
        const response = await server.request('POST', '/v1/jobs/batch', { jobs });
        if (response.status === 201) {
          for (const job of response.body.jobs as { id: string }[]) accepted.push(job.id);
          continue;
        }
        assert.equal(response.status, 503, response.text);
        assert.equal(response.body.code, 'store_unavailable');
        assert.ok(response.headers.get('retry-after'), 'Retry-After is set');
        refused += 1;
      }
      assert.equal(refused, 1, 'the file filled up');
      assert.ok(accepted.length > 0);
      const ready = await server.request('GET', '/ready');
      assert.equal(ready.status, 503);
      assert.match(ready.body.reason, /store/);

      // Nothing of the refused batch was stored; everything accepted is there.
      const queue = await server.request('GET', '/v1/queue');
      assert.equal(queue.body.pending, accepted.length);

      await resumeAndExpectEachRanOnce(server, accepted);
    } finally {
      await server.close();
    }
  });

  it('answers 503 while the store thread is down, starts a new one, and loses nothing', async () => {
    let store: SqliteStore | null = null;
    // Two threads: one holds the job that runs through the restart, the other runs the rest.
    const server = await startServer({ KILN_STORE: 'sqlite', KILN_THREADS: '2' }, async (dir) => {
      store = await SqliteStore.open(join(dir, 'kiln.db'), { capacity: 1000, restartDelayMs: 20 });
      return store;
    });
    try {
      const running = await server.request('POST', '/v1/jobs', { type: 'test.progress' });
      assert.equal(running.status, 201, running.text);
      await server.whenStatus(running.body.id, 'running');
      const before = await server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { n: 1 } });
      assert.equal(before.status, 201);
      await server.waitForJob(before.body.id);

      const opened = store as SqliteStore | null;
      const thread = opened?.thread;
      assert.ok(opened && thread);
      const back = restarted(opened);
      await thread.terminate();

      const refused = await server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { n: 2 } });
      // The restart may already have happened on a fast machine; a 201 then must be a stored job.
      if (refused.status === 503) {
        assert.equal(refused.body.code, 'store_unavailable');
      } else {
        assert.equal(refused.status, 201, refused.text);
      }
      await back;
      assert.equal((await server.request('GET', '/ready')).status, 200);

      // The attempt that ran through the restart still holds its lease: cancel ends it, once.
      const cancelled = await server.request('POST', `/v1/jobs/${running.body.id}/cancel`);
      assert.equal(cancelled.status, 200, cancelled.text);
      assert.equal(cancelled.body.status, 'cancelled');
      assert.equal(cancelled.body.attempts, 1, JSON.stringify(cancelled.body));

      const after = await server.request('POST', '/v1/jobs', { type: 'test.quick', payload: { n: 3 } });
      assert.equal(after.status, 201, after.text);
      const done = await server.waitForJob(after.body.id);
      assert.equal(done.status, 'completed');
      const earlier = await server.request('GET', `/v1/jobs/${before.body.id}`);
      assert.equal(earlier.body.status, 'completed');
      assert.equal(earlier.body.attempts, 1);
    } finally {
      await server.close();
    }
  });

  it('keeps an outcome that ends while the store thread is down, and writes it once it is back', async () => {
    let store: SqliteStore | null = null;
    const dir = mkdtempSync(join(tmpdir(), 'kiln-outcome-'));
    const release = join(dir, 'go');
    const server = await startServer({ KILN_STORE: 'sqlite', KILN_THREADS: '1' }, async (data) => {
      // A restart slow enough that the attempt ends while no store thread runs.
      store = await SqliteStore.open(join(data, 'kiln.db'), { capacity: 100, restartDelayMs: 300 });
      return store;
    });
    try {
      const submitted = await server.request('POST', '/v1/jobs', {
        type: 'test.hold',
        maxAttempts: 1,
        payload: { release },
      });
      assert.equal(submitted.status, 201, submitted.text);
      const id = submitted.body.id as string;
      await server.whenStatus(id, 'running');
      const opened = store as SqliteStore | null;
      const thread = opened?.thread;
      assert.ok(opened && thread);
      const back = restarted(opened);
      await thread.terminate();
      writeFileSync(release, '');
      await back;
      assert.equal((await server.request('GET', '/ready')).status, 200);
      const job = await server.waitForJob(id);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.equal(job.attempts, 1, 'ran once: its outcome waited for the store instead of being lost');
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
