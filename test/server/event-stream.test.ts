import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Job } from '../../src/contract/job.js';
import { writeFileSync } from 'node:fs';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { followJobEvents } from '../support/http.js';
import { startServer } from '../support/kiln.js';
import { tempFiles } from '../support/temp-files.js';

/**
 * GET /v1/jobs/{id}/events when the news of a change arrives before the read that opens
 * the stream answers, and that read is older than the news: what happens on a shared
 * store, where the news (NOTIFY, then a read by the listener) and the stream's own read
 * travel over different connections. Here the store's read is held back until the job
 * has started, then answers what it read before.
 */
describe('the event stream of a job changed while the stream opens', () => {
  const newPath = tempFiles('kiln-event-stream-');

  it('shows the change the opening read missed', { timeout: 20_000 }, async (t) => {
    const release = newPath();
    let gate: { id: string; opened: () => void; started: Promise<unknown> } | null = null;
    const server = await startServer({ KILN_THREADS: '1' }, async () => {
      const store = await SqliteStore.open(':memory:', { capacity: 1000, synchronous: 'normal' });
      const read = store.get.bind(store);
      store.get = async (id: string): Promise<Job | null> => {
        const job = await read(id);
        const held = gate;
        if (held !== null && held.id === id) {
          gate = null;
          held.opened();
          await held.started;
        }
        return job;
      };
      return store;
    });
    const stream = new Promise<string[]>((resolve, reject) => {
      void (async () => {
        await server.request('POST', '/v1/queue/pause');
        const created = await server.request('POST', '/v1/jobs', { type: 'test.hold', payload: { release } });
        assert.equal(created.status, 201, created.text);
        const id = created.body.id as string;
        let opened!: () => void;
        const open = new Promise<void>((resolve) => (opened = resolve));
        const started = new Promise<void>((resolve) => {
          const unsubscribe = server.kiln.scheduler.events.subscribe(id, (job) => {
            if (job?.status !== 'running') return;
            unsubscribe();
            resolve();
          });
        });
        gate = { id, opened, started };
        const events = followJobEvents(server.url, id, (job) => {
          // Released only once the stream has shown the attempt.
          if (job.status === 'running') writeFileSync(release, '');
          if (job.status === 'completed') events.stop();
        });
        events.ended.then((shown) => resolve(shown.map((job) => job.status)), reject);
        // Should the stream rest on the missed state, the test's timeout ends it and the assertion tells.
        t.signal.addEventListener('abort', () => events.stop(), { once: true });
        // The stream's read has the job queued; now the job starts.
        await open;
        await server.request('POST', '/v1/queue/resume');
      })().catch(reject);
    });
    try {
      const seen = await stream;
      assert.deepEqual(seen, ['queued', 'running', 'completed']);
    } finally {
      await server.close();
    }
  });
});
