import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';

describe('dedupe and result reuse', () => {
  let server: TestServer;

  before(async () => {
    server = await startServer({ KILN_THREADS: '1', KILN_STORE: 'sqlite' });
  });

  after(async () => {
    await server.close();
  });

  it('makes one job of concurrent identical submissions, and every answer names it', async () => {
    await server.request('POST', '/v1/queue/pause');
    try {
      const body = { type: 'hash.sha256', payload: { data: 'same work' }, dedupe: true };
      const answers = await Promise.all(Array.from({ length: 20 }, () => server.request('POST', '/v1/jobs', body)));
      const ids = new Set(answers.map((answer) => answer.body.id));
      assert.equal(ids.size, 1, answers.map((a) => a.text).join(' | '));
      assert.deepEqual(
        answers.map((answer) => answer.status).sort((a, b) => a - b),
        [...Array.from({ length: 19 }, () => 200), 201],
      );
      // The same payload written in another key order is the same work (canonical JSON).
      const reordered = await server.request('POST', '/v1/jobs', {
        type: 'hash.sha256',
        payload: { encoding: 'utf8', data: 'same work' },
        dedupe: true,
      });
      assert.equal(reordered.status, 200);
      assert.equal(reordered.body.id, [...ids][0]);
      const other = await server.request('POST', '/v1/jobs', {
        type: 'hash.sha256',
        payload: { data: 'other work' },
        dedupe: true,
      });
      assert.equal(other.status, 201);
      const metrics = await server.request('GET', '/metrics');
      assert.match(metrics.text, /^kiln_dedupe_hits_total\{type="hash.sha256",kind="inflight"\} 20$/m);
    } finally {
      await server.request('POST', '/v1/queue/resume');
    }
  });

  it('answers a completed result within reuseMs, and runs the work again without it', async () => {
    const body = {
      type: 'hash.sha256',
      payload: { data: 'cache me' },
      dedupe: { key: 'sha:cache-me', reuseMs: 3_600_000 },
    };
    const first = await server.request('POST', '/v1/jobs', body);
    assert.equal(first.status, 201);
    const done = await server.waitForJob(first.body.id);
    assert.equal(done.status, 'completed');
    const reused = await server.request('POST', '/v1/jobs', body);
    assert.equal(reused.status, 200);
    assert.equal(reused.body.id, first.body.id);
    assert.deepEqual(reused.body.result, done.result);
    const fresh = await server.request('POST', '/v1/jobs', { ...body, dedupe: { key: 'sha:cache-me' } });
    assert.equal(fresh.status, 201, 'without reuseMs a finished job is not reused');
    const metrics = await server.request('GET', '/metrics');
    assert.match(metrics.text, /^kiln_dedupe_hits_total\{type="hash.sha256",kind="result"\} 1$/m);
  });

  it('lets a batch item stand for an existing job, its ref naming that job', async () => {
    await server.request('POST', '/v1/queue/pause');
    try {
      const existing = await server.request('POST', '/v1/jobs', {
        type: 'noop',
        payload: { echo: 'shared parent' },
        dedupe: true,
      });
      assert.equal(existing.status, 201);
      const batch = await server.request('POST', '/v1/jobs/batch', {
        jobs: [
          { ref: 'p', type: 'noop', payload: { echo: 'shared parent' }, dedupe: true },
          { type: 'noop', dependsOn: ['ref:p'] },
        ],
      });
      assert.equal(batch.status, 201, batch.text);
      assert.equal(batch.body.jobs[0].id, existing.body.id);
      assert.deepEqual(batch.body.jobs[1].dependsOn, [existing.body.id]);
    } finally {
      await server.request('POST', '/v1/queue/resume');
    }
  });

  it('refuses a malformed dedupe with a problem document', async () => {
    for (const dedupe of [false, { key: '' }, { reuseMs: -1 }, { reuseMs: 2_592_000_001 }, { other: 1 }, 'yes']) {
      const response = await server.request('POST', '/v1/jobs', { type: 'noop', dedupe });
      assert.equal(response.status, 400, JSON.stringify(dedupe));
      assert.equal(response.body.code, 'validation_error');
    }
  });
});
