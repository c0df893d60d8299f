import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';

describe('priority aging (KILN_PRIORITY_AGING_MS)', () => {
  let server: TestServer;

  before(async () => {
    server = await startServer({ KILN_THREADS: '1', KILN_PRIORITY_AGING_MS: '20' });
  });

  after(async () => {
    await server.close();
  });

  it('runs a priority-0 job under a saturating stream of priority-9 jobs', { timeout: 120_000 }, async () => {
    const spin = { type: 'cpu.spin', priority: 9, payload: { ms: 5 } };
    const first = await server.request('POST', '/v1/jobs/batch', { jobs: Array.from({ length: 50 }, () => spin) });
    assert.equal(first.status, 201);
    const low = await server.request('POST', '/v1/jobs', { type: 'noop', priority: 0 });
    assert.equal(low.status, 201);
    // Keep the queue full of newer priority-9 work until the low job is done: without
    // aging it would wait for all of them; with it, it is priority 9 after 180 ms and
    // older than every one submitted after it.
    let queuedAtEnd: number;
    for (let round = 0; ; round++) {
      assert.ok(round < 2000, 'the priority-0 job never ran');
      const more = await server.request('POST', '/v1/jobs/batch', { jobs: Array.from({ length: 10 }, () => spin) });
      assert.equal(more.status, 201);
      const job = await server.request('GET', `/v1/jobs/${low.body.id}?wait=0`);
      if (job.body.status === 'completed') {
        queuedAtEnd = (await server.request('GET', '/v1/queue')).body.byPriority['9'];
        assert.equal(job.body.priority, 0, 'the job keeps the priority it was submitted with');
        break;
      }
    }
    assert.ok(queuedAtEnd > 0, 'priority-9 jobs were still queued when the priority-0 job ran');
    await server.request('POST', '/v1/queue/pause');
  });
});
