import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';

/**
 * One thread: while a held job runs, the next job is already in the thread as its
 * look-ahead. A better job that arrives takes its place; the look-ahead goes back first
 * in line, its attempt not counted.
 */
describe('the look-ahead of a thread', () => {
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

  it('gives way to a better job that arrives, without running or counting the look-ahead', async () => {
    const release = join(dir, 'first');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    const low = await submit({ type: 'test.sequence', priority: 1, payload: { label: 'low' } });
    // The look-ahead is claimed (its thread holds it) but has not started.
    await server.whenStatus(low, 'running');
    const high = await submit({ type: 'test.sequence', priority: 9, payload: { label: 'high' } });
    // Taken back at once: queued again, no attempt used.
    const back = await server.whenStatus(low, 'queued');
    assert.equal(back.attempts, 0);
    writeFileSync(release, '');
    const [doneHigh, doneLow] = [await server.waitForJob(high), await server.waitForJob(low)];
    assert.equal(doneHigh.status, 'completed');
    assert.equal(doneLow.status, 'completed');
    const seqHigh = (doneHigh.result as { seq: number }).seq;
    const seqLow = (doneLow.result as { seq: number }).seq;
    assert.ok(seqHigh < seqLow, `the priority-9 job ran first (${seqHigh} before ${seqLow})`);
    assert.equal(doneLow.attempts, 1, 'the recalled look-ahead used no attempt');
  });

  it('starts the look-ahead when the job before it ends, with its own start time', async () => {
    const release = join(dir, 'second');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    const next = await submit({ type: 'test.sequence', payload: { label: 'next' } });
    await server.whenStatus(next, 'running');
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

  it('a cancel of a look-ahead takes it back without terminating the thread that runs the job before it', async () => {
    const release = join(dir, 'third');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    const next = await submit({ type: 'test.sequence', payload: { label: 'cancelled' } });
    await server.whenStatus(next, 'running');
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

  it('keeps serving when more look-aheads are recalled than there are attempt slots', async () => {
    const release = join(dir, 'fourth');
    const held = await submit({ type: 'test.hold', payload: { release } });
    await server.whenStatus(held, 'running');
    // One thread: 18 slots. Each cancel recalls the look-ahead, and the next job takes its
    // place; a recalled message keeps its slot until the thread gets to it.
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
