import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { type KilnProcess, killAllKilns, spawnKiln } from '../support/kiln-process.js';

/**
 * A server killed while jobs are claimed ahead of its busy threads: their handlers never
 * started, so they show `queued` as before their claim, and the restart gives their
 * attempts back instead of counting them against `maxAttempts`.
 */
describe('SIGKILL with jobs claimed ahead of the threads (SQLite store)', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-crash-look-ahead-'));
  const env = { KILN_STORE: `sqlite:${join(dir, 'kiln.db')}`, KILN_THREADS: '2' };
  after(async () => {
    await killAllKilns();
    rmSync(dir, { recursive: true, force: true });
  });

  async function submit(kiln: KilnProcess, body: object): Promise<string> {
    const response = await kiln.request('POST', '/v1/jobs', body);
    assert.equal(response.status, 201, response.text);
    return response.body.id;
  }

  it('runs the claimed jobs after the restart without using an attempt, even with maxAttempts 1', async () => {
    const first = await spawnKiln(env);
    const quick = { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' };
    // One held job per thread, each started for certain before the next is submitted.
    const held: string[] = [];
    for (let thread = 0; thread < 2; thread++) {
      const id = await submit(first, {
        type: 'test.steps',
        payload: { dir, steps: 1 },
        maxAttempts: 3,
        backoff: quick,
      });
      // test.steps reports 0 % as its handler starts.
      await first.waitForProgress(id);
      held.push(id);
    }
    // One claimed job per thread, waiting in the server's queue while both threads are busy.
    const lookAheads: string[] = [];
    for (const label of ['a', 'b']) {
      lookAheads.push(await submit(first, { type: 'test.sequence', payload: { label }, maxAttempts: 1 }));
    }
    await first.waitForClaimed('test.sequence', 2);
    // A write answered after the claims: they are in the file by now (they ride with the next write).
    await submit(first, { type: 'noop', payload: {}, runAt: new Date(Date.now() + 3_600_000).toISOString() });
    for (const id of lookAheads) {
      // Claimed, not started: shown as before the claim.
      const stored = await first.request('GET', `/v1/jobs/${id}`);
      assert.equal(stored.body.status, 'queued', stored.text);
      assert.equal(stored.body.attempts, 0, stored.text);
      assert.equal(stored.body.startedAt, null, stored.text);
    }
    const running = await first.request('GET', '/v1/jobs?status=running');
    assert.deepEqual(running.body.jobs.map((job: { id: string }) => job.id).sort(), [...held].sort(), running.text);
    const queue = await first.request('GET', '/v1/queue');
    assert.equal(queue.body.threads.busy, 2, queue.text);
    assert.equal(queue.body.byStatus.running, 2, queue.text);

    first.child.kill('SIGKILL');
    assert.equal((await first.exited).signal, 'SIGKILL');

    // The held jobs run again too; released now, they do not hold the threads after the restart.
    writeFileSync(join(dir, 'step-1'), '');
    const second = await spawnKiln(env);
    for (const id of lookAheads) {
      const job = await second.waitForJob(id);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.equal(job.attempts, 1, `only the attempt after the restart counts: ${JSON.stringify(job)}`);
      assert.equal(job.error, null, JSON.stringify(job));
    }
    for (const id of held) {
      const job = await second.waitForJob(id);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      // Their handlers had started, and the store had heard so before the kill: that attempt counts.
      assert.equal(job.attempts, 2, `the started attempt and the one after the restart: ${JSON.stringify(job)}`);
    }
    second.child.kill('SIGTERM');
    assert.deepEqual(await second.exited, { code: 0, signal: null });
  });

  it('counts the attempt of a claimed job a thread started as the job ahead of it ended', async () => {
    const oneThread = { ...env, KILN_STORE: `sqlite:${join(dir, 'one-thread.db')}`, KILN_THREADS: '1' };
    const aheadDir = mkdtempSync(join(dir, 'ahead-'));
    const nextDir = mkdtempSync(join(dir, 'next-'));
    const quick = { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' };
    const first = await spawnKiln(oneThread);
    const ahead = await submit(first, { type: 'test.steps', payload: { dir: aheadDir, steps: 1 } });
    await first.waitForProgress(ahead);
    // The only thread is busy: this one is claimed and waits for it.
    const next = await submit(first, {
      type: 'test.steps',
      payload: { dir: nextDir, steps: 1 },
      maxAttempts: 3,
      backoff: quick,
    });
    await first.waitForClaimed('test.steps', 1);
    writeFileSync(join(aheadDir, 'step-1'), '');
    await first.waitForStatus(ahead, 'completed');
    await first.waitForStatus(next, 'running');
    // A write answered after the start was heard: the start is in the file by now.
    await submit(first, { type: 'noop', payload: {} });

    first.child.kill('SIGKILL');
    assert.equal((await first.exited).signal, 'SIGKILL');

    writeFileSync(join(nextDir, 'step-1'), '');
    const second = await spawnKiln(oneThread);
    const job = await second.waitForJob(next);
    assert.equal(job.status, 'completed', JSON.stringify(job));
    assert.equal(job.attempts, 2, `the attempt started before the kill counts: ${JSON.stringify(job)}`);
    second.child.kill('SIGTERM');
    assert.deepEqual(await second.exited, { code: 0, signal: null });
  });
});
