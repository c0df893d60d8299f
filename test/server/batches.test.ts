import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';

const ZERO = { waiting: 0, scheduled: 0, queued: 0, running: 0, retrying: 0, completed: 0, failed: 0, cancelled: 0 };

describe('batches over HTTP', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_THREADS: '1', KILN_STORE: 'sqlite' });
  });
  after(async () => {
    await server.close();
  });

  it('answers a batch id, counts its jobs, lists them and says when all are finished', async () => {
    await server.request('POST', '/v1/queue/pause');
    const posted = await server.request('POST', '/v1/jobs/batch', {
      jobs: [
        { ref: 'a', type: 'noop' },
        { type: 'noop', dependsOn: ['ref:a'] },
      ],
    });
    assert.equal(posted.status, 201, posted.text);
    const { batch, jobs } = posted.body;
    assert.equal(typeof batch, 'string');
    assert.deepEqual(
      jobs.map((job: { batch: string }) => job.batch),
      [batch, batch],
    );
    const read = await server.request('GET', `/v1/batches/${batch}`);
    assert.equal(read.status, 200, read.text);
    assert.deepEqual(read.body, {
      id: batch,
      total: 2,
      counts: { ...ZERO, queued: 1, waiting: 1 },
      createdAt: jobs[0].createdAt,
      finishedAt: null,
      callback: null,
    });
    const listed = await server.request('GET', `/v1/jobs?batch=${batch}`);
    assert.deepEqual(
      listed.body.jobs.map((job: { id: string }) => job.id),
      [jobs[1].id, jobs[0].id],
    );
    const single = await server.request('POST', '/v1/jobs', { type: 'noop' });
    assert.equal(single.body.batch, null);

    await server.request('POST', '/v1/queue/resume');
    const last = await server.waitForJob(jobs[1].id);
    assert.equal(last.status, 'completed');
    const done = await server.request('GET', `/v1/batches/${batch}`);
    assert.deepEqual(done.body.counts, { ...ZERO, completed: 2 });
    assert.equal(done.body.finishedAt, last.finishedAt);
  });

  it('does not count an item that replays an existing job, which keeps its own batch', async () => {
    const first = await server.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop', idempotencyKey: 'batch-replay' }],
    });
    const second = await server.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop', idempotencyKey: 'batch-replay' }, { type: 'noop' }],
    });
    assert.equal(second.status, 201, second.text);
    assert.notEqual(second.body.batch, first.body.batch);
    assert.equal(second.body.jobs[0].id, first.body.jobs[0].id);
    assert.equal(second.body.jobs[0].batch, first.body.batch);
    assert.equal(second.body.jobs[1].batch, second.body.batch);
    assert.equal((await server.request('GET', `/v1/batches/${second.body.batch}`)).body.total, 1);
  });

  it('cancels what is unfinished and answers the batch, also when nothing is', async () => {
    await server.request('POST', '/v1/queue/pause');
    try {
      const posted = await server.request('POST', '/v1/jobs/batch', {
        jobs: [{ type: 'noop' }, { type: 'noop' }, { type: 'noop', delayMs: 3_600_000 }],
      });
      const { batch, jobs } = posted.body;
      await server.request('POST', `/v1/jobs/${jobs[0].id}/cancel`);
      const cancelled = await server.request('DELETE', `/v1/batches/${batch}`);
      assert.equal(cancelled.status, 200, cancelled.text);
      assert.deepEqual(cancelled.body.counts, { ...ZERO, cancelled: 3 });
      assert.notEqual(cancelled.body.finishedAt, null);
      for (const job of jobs) {
        assert.equal((await server.request('GET', `/v1/jobs/${job.id}`)).body.status, 'cancelled');
      }
      const again = await server.request('DELETE', `/v1/batches/${batch}`);
      assert.equal(again.status, 200, again.text);
      assert.deepEqual(again.body, cancelled.body);
    } finally {
      await server.request('POST', '/v1/queue/resume');
    }
  });

  it('answers 404 for an unknown batch, and refuses a batch callback on a server without callbacks', async () => {
    const unknown = '01936f4e-8d2a-7c3b-9e1f-2a4b6c8d0e20';
    const missing = await server.request('GET', `/v1/batches/${unknown}`);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.code, 'not_found');
    assert.match(missing.body.detail, /no batch has the id/);
    assert.equal((await server.request('DELETE', `/v1/batches/${unknown}`)).status, 404);
    const withCallback = await server.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop' }],
      callback: { url: 'https://example.com/done' },
    });
    assert.equal(withCallback.status, 400);
    assert.equal(withCallback.body.code, 'callbacks_disabled');
  });
});
