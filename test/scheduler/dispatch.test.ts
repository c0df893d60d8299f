import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { takeSseJobs } from '../support/http.js';
import { startServer, type TestServer } from '../support/kiln.js';

const quickBackoff = { initialMs: 1, factor: 2, maxMs: 5, jitter: 'none' };

describe('dispatch through HTTP and real worker threads (one thread)', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_THREADS: '1' });
  });
  after(async () => {
    await server.close();
  });

  it('runs higher priorities first and FIFO within a priority', async () => {
    await server.request('POST', '/v1/queue/pause');
    const plan = [
      { label: 'p1-a', priority: 1 },
      { label: 'p5-a', priority: 5 },
      { label: 'p9-a', priority: 9 },
      { label: 'p5-b', priority: 5 },
      { label: 'p1-b', priority: 1 },
      { label: 'p9-b', priority: 9 },
      { label: 'p5-c', priority: 5 },
      { label: 'p0-a', priority: 0 },
    ];
    const ids: string[] = [];
    for (const item of plan) {
      const response = await server.request('POST', '/v1/jobs', {
        type: 'test.sequence',
        priority: item.priority,
        payload: { label: item.label },
      });
      assert.equal(response.status, 201, response.text);
      assert.equal(response.body.status, 'queued');
      ids.push(response.body.id);
    }
    const queue = await server.request('POST', '/v1/queue/resume');
    assert.equal(queue.body.paused, false);
    const finished = await Promise.all(ids.map((id) => server.waitForJob(id)));
    const order = finished
      .map((job: any) => ({ seq: job.result.seq as number, label: job.result.label as string }))
      .sort((a, b) => a.seq - b.seq)
      .map((entry) => entry.label);
    assert.deepEqual(order, ['p9-a', 'p9-b', 'p5-a', 'p5-b', 'p5-c', 'p1-a', 'p1-b', 'p0-a']);
  });

  it('retries with backoff and then succeeds', async () => {
    const created = await server.request('POST', '/v1/jobs', {
      type: 'test.flaky',
      payload: { failTimes: 2 },
      maxAttempts: 3,
      backoff: quickBackoff,
    });
    assert.equal(created.status, 201);
    const job = await server.waitForJob(created.body.id);
    assert.equal(job.status, 'completed');
    assert.equal(job.attempts, 3);
    assert.deepEqual(job.result, { attempt: 3 });
  });

  it('fails the job when the retries are exhausted', async () => {
    const created = await server.request('POST', '/v1/jobs', {
      type: 'test.flaky',
      payload: { failTimes: 5 },
      maxAttempts: 2,
      backoff: quickBackoff,
    });
    const job: any = await server.waitForJob(created.body.id);
    assert.equal(job.status, 'failed');
    assert.equal(job.attempts, 2);
    assert.equal(job.error.code, 'handler_error');
    assert.equal(job.error.attempt, 2);
    assert.match(job.error.message, /attempt 2 fails on purpose/);
  });

  it('fails at once on a non-retryable error', async () => {
    const created = await server.request('POST', '/v1/jobs', { type: 'test.fatal', maxAttempts: 5 });
    const job: any = await server.waitForJob(created.body.id);
    assert.equal(job.status, 'failed');
    assert.equal(job.attempts, 1);
    assert.equal(job.error.code, 'handler_error');
    assert.match(job.error.message, /can never succeed/);
  });

  it('terminates a thread that blocks past its timeout, and keeps serving', async () => {
    const blocked = await server.request('POST', '/v1/jobs', { type: 'test.block', timeoutMs: 100, maxAttempts: 1 });
    const job: any = await server.waitForJob(blocked.body.id);
    assert.equal(job.status, 'failed');
    assert.equal(job.error.code, 'timeout');
    const next = await server.request('POST', '/v1/jobs', { type: 'noop' });
    assert.equal((await server.waitForJob(next.body.id)).status, 'completed');
  });

  it('cancels a running blocked job, and the next job runs at once', async () => {
    const blocked = await server.request('POST', '/v1/jobs', { type: 'test.block', timeoutMs: 3_600_000 });
    await server.whenStatus(blocked.body.id, 'running');
    const next = await server.request('POST', '/v1/jobs', { type: 'test.sequence', payload: { label: 'after' } });
    assert.equal(next.body.status, 'queued');
    const cancelled = await server.request('POST', `/v1/jobs/${blocked.body.id}/cancel`);
    assert.equal(cancelled.status, 200);
    assert.equal(cancelled.body.status, 'cancelled');
    assert.equal(cancelled.body.error.code, 'cancelled');
    const done: any = await server.waitForJob(next.body.id);
    assert.equal(done.status, 'completed');
    const again = await server.request('GET', `/v1/jobs/${blocked.body.id}`);
    assert.equal(again.body.status, 'cancelled');
    assert.equal(again.body.attempts, 1);
  });

  it('fails an attempt whose thread calls process.exit as worker_crashed, and replaces the thread', async () => {
    const created = await server.request('POST', '/v1/jobs', {
      type: 'test.exit',
      payload: { code: 7 },
      maxAttempts: 2,
      backoff: quickBackoff,
    });
    const job: any = await server.waitForJob(created.body.id);
    assert.equal(job.status, 'failed');
    assert.equal(job.attempts, 2);
    assert.equal(job.error.code, 'worker_crashed');
    const next = await server.request('POST', '/v1/jobs', { type: 'noop' });
    assert.equal((await server.waitForJob(next.body.id)).status, 'completed');
    const ready = await server.request('GET', '/ready');
    assert.equal(ready.status, 200);
  });

  it('runs a delayed job once it is due', async () => {
    const created = await server.request('POST', '/v1/jobs', { type: 'noop', delayMs: 50 });
    assert.equal(created.body.status, 'scheduled');
    assert.notEqual(created.body.runAt, null);
    const job = await server.waitForJob(created.body.id);
    assert.equal(job.status, 'completed');
  });

  it('streams progress and the terminal state over SSE', async () => {
    const created = await server.request('POST', '/v1/jobs', { type: 'test.progress', maxAttempts: 1 });
    const id = created.body.id as string;
    const response = await fetch(`${server.url}/v1/jobs/${id}/events`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /text\/event-stream/);
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    const events: any[] = [];
    let buffer = '';
    let cancelled = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const taken = takeSseJobs(buffer);
      buffer = taken.rest;
      for (const job of taken.jobs) {
        events.push(job);
        if (job.progress?.percent === 50 && !cancelled) {
          cancelled = true;
          const answer = await server.request('POST', `/v1/jobs/${id}/cancel`);
          assert.equal(answer.status, 200);
        }
      }
    }
    assert.ok(events.length >= 2, `events: ${JSON.stringify(events)}`);
    assert.equal(events[0].id, id);
    assert.ok(events.some((job) => job.progress?.message === 'half way'));
    assert.equal(events.at(-1).status, 'cancelled');
  });
});
