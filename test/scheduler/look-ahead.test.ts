import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';

/**
 * One thread: while a held job runs, the next job is already claimed, waiting in the
 * server's queue for the thread. It shows `queued`, as before its claim. A better job
 * that arrives takes its place; the claimed job goes back first in line, its attempt
 * not counted.
 */
describe('a job claimed ahead of a busy thread', () => {
  let server: TestServer;
  let dir: string;
  before(async () => {
    server = await startServer({ KILN_THREADS: '1' });
    dir = mkdtempSync(join(tmpdir(), 'kiln-look-ahead-'));
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function submit(body: object): Promise<string> {
    const response = await server.request('POST', '/v1/jobs', body);
    assert.equal(response.status, 201, response.text);
    return response.body.id;
  }

  it('shows queued until its thread starts it, and only its start makes it running', async () => {
    const release = join(dir, 'zeroth');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    const next = await submit({ type: 'test.sequence', payload: { label: 'claimed' } });
    await server.whenHeld(next);
    const claimed = await server.request('GET', `/v1/jobs/${next}`);
    assert.equal(claimed.body.status, 'queued', claimed.text);
    assert.equal(claimed.body.attempts, 0, claimed.text);
    assert.equal(claimed.body.startedAt, null, claimed.text);
    const running = await server.request('GET', '/v1/jobs?status=running');
    assert.deepEqual(
      running.body.jobs.map((job: { id: string }) => job.id),
      [held],
    );
    const queued = await server.request('GET', '/v1/jobs?status=queued');
    assert.ok(
      queued.body.jobs.some((job: { id: string }) => job.id === next),
      queued.text,
    );
    const queue = await server.request('GET', '/v1/queue');
    assert.equal(queue.body.byStatus.running, 1, queue.text);
    assert.equal(queue.body.threads.busy, 1, queue.text);
    const metrics = (await server.request('GET', '/metrics')).text;
    assert.match(metrics, /^kiln_task_running\{type="test.sequence"\} 0$/m);
    assert.match(metrics, /^kiln_task_claimed\{type="test.sequence"\} 1$/m);
    assert.match(metrics, /^kiln_task_running\{type="test.hold"\} 1$/m);
    writeFileSync(release, '');
    const done = await server.waitForJob(next);
    assert.equal(done.status, 'completed');
    assert.equal(done.attempts, 1);
  });

  it('gives way to a better job that arrives, without running or counting the claimed one', async () => {
    const release = join(dir, 'first');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    const low = await submit({ type: 'test.sequence', priority: 1, payload: { label: 'low' } });
    // Claimed, waiting for the thread.
    await server.whenHeld(low);
    const high = await submit({ type: 'test.sequence', priority: 9, payload: { label: 'high' } });
    // Taken back at once: queued again, no attempt used.
    await server.whenHeld(low, false);
    const back = await server.request('GET', `/v1/jobs/${low}`);
    assert.equal(back.body.status, 'queued', back.text);
    assert.equal(back.body.attempts, 0);
    writeFileSync(release, '');
    const [doneHigh, doneLow] = [await server.waitForJob(high), await server.waitForJob(low)];
    assert.equal(doneHigh.status, 'completed');
    assert.equal(doneLow.status, 'completed');
    const seqHigh = (doneHigh.result as { seq: number }).seq;
    const seqLow = (doneLow.result as { seq: number }).seq;
    assert.ok(seqHigh < seqLow, `the priority-9 job ran first (${seqHigh} before ${seqLow})`);
    assert.equal(doneLow.attempts, 1, 'the recalled look-ahead used no attempt');
  });

  it('starts the claimed job when the job before it ends, with its own start time', async () => {
    const release = join(dir, 'second');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    const next = await submit({ type: 'test.sequence', payload: { label: 'next' } });
    await server.whenHeld(next);
    // Claimed before this instant; its thread can start it only after the held job sees the file.
    const releasedAt = Date.now();
    writeFileSync(release, '');
    await server.waitForJob(held);
    const doneNext = await server.waitForJob(next);
    assert.equal(doneNext.status, 'completed');
    assert.equal(doneNext.attempts, 1);
    // Its attempt started when the thread got to it, not when it was claimed.
    assert.ok(
      Date.parse(doneNext.startedAt as string) >= releasedAt,
      `started ${doneNext.startedAt}, before the job ahead of it was released at ${new Date(releasedAt).toISOString()}`,
    );
  });

  it('a cancel of a claimed job takes it back without terminating the thread that runs the job before it', async () => {
    const release = join(dir, 'third');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    const next = await submit({ type: 'test.sequence', payload: { label: 'cancelled' } });
    await server.whenHeld(next);
    const cancelled = await server.request('POST', `/v1/jobs/${next}/cancel`);
    assert.equal(cancelled.status, 200, cancelled.text);
    writeFileSync(release, '');
    const doneHeld = await server.waitForJob(held);
    assert.equal(doneHeld.status, 'completed', 'the held job was not cut short');
    assert.equal(doneHeld.attempts, 1);
    const doneNext = await server.waitForJob(next);
    assert.equal(doneNext.status, 'cancelled');
    assert.equal(doneNext.result, null);
  });

  it('keeps serving when more claimed jobs are recalled than there are attempt slots', async () => {
    const release = join(dir, 'fourth');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    // One thread: 20 slots. Each cancel recalls the claimed job, and the next job takes its
    // place; a recalled message keeps its slot until a thread (or the main thread, at the
    // head of the queue) passes it.
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) ids.push(await submit({ type: 'test.sequence', payload: { label: `job-${i}` } }));
    const cancelled = new Set<string>();
    for (const id of ids.slice(0, 30)) {
      const response = await server.request('POST', `/v1/jobs/${id}/cancel`);
      assert.equal(response.status, 200, response.text);
      cancelled.add(id);
    }
    const health = await server.request('GET', '/health');
    assert.equal(health.status, 200, 'the event loop still serves');
    writeFileSync(release, '');
    for (const id of ids) {
      const job = await server.waitForJob(id);
      assert.equal(job.status, cancelled.has(id) ? 'cancelled' : 'completed', JSON.stringify(job));
      if (!cancelled.has(id)) assert.equal(job.attempts, 1);
    }
  });
});
