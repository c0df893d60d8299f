import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { type KilnProcess, killAllKilns, mapLimit, spawnKiln } from '../support/kiln-process.js';

/**
 * Shutdown as DESIGN.md ("Shutdown") promises it, on a real process and a real SQLite
 * file: SIGTERM drains within the grace period and exits 0; what the grace period
 * cannot finish is released as `interrupted` without using up an attempt; a second
 * signal exits at once; nothing accepted is lost either way.
 */

const quickBackoff = { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' };

function freshStore(dirs: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-shutdown-'));
  dirs.push(dir);
  return `sqlite:${join(dir, 'kiln.db')}`;
}

async function submit(kiln: KilnProcess, body: unknown): Promise<string> {
  const response = await kiln.request('POST', '/v1/jobs', body);
  assert.equal(response.status, 201, response.text);
  return response.body.id;
}

async function assertShuttingDown(kiln: KilnProcess): Promise<void> {
  const refused = await kiln.request('POST', '/v1/jobs', { type: 'noop' });
  assert.equal(refused.status, 503, refused.text);
  assert.match(refused.headers.get('content-type') ?? '', /^application\/problem\+json/);
  assert.equal(refused.body.code, 'shutting_down');
  assert.equal(refused.body.status, 503);
  assert.match(refused.headers.get('retry-after') ?? '', /^\d+$/);
  const batch = await kiln.request('POST', '/v1/jobs/batch', {
    jobs: [{ type: 'noop' }],
  });
  assert.equal(batch.status, 503, batch.text);
  assert.equal(batch.body.code, 'shutting_down');
  const ready = await kiln.request('GET', '/ready');
  assert.equal(ready.status, 503, ready.text);
}

describe('shutdown of a real process on SQLite', { timeout: 60_000 }, () => {
  const dirs: string[] = [];
  after(async () => {
    await killAllKilns();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('SIGTERM lets running attempts finish within the grace period, keeps the queue, exits 0', async () => {
    const env = {
      KILN_STORE: freshStore(dirs),
      KILN_THREADS: '2',
      KILN_SHUTDOWN_GRACE_MS: '10000',
    };
    const first = await spawnKiln(env);
    const running = [
      await submit(first, {
        type: 'cpu.spin',
        priority: 9,
        payload: { ms: 1500 },
      }),
      await submit(first, {
        type: 'cpu.spin',
        priority: 9,
        payload: { ms: 1500 },
      }),
    ];
    const queued: string[] = [];
    for (let i = 0; i < 6; i++) queued.push(await submit(first, { type: 'cpu.spin', payload: { ms: 10 } }));
    await Promise.all(running.map((id) => first.waitForStatus(id, 'running')));
    const before = await first.request('GET', '/v1/queue');
    assert.equal(before.body.byStatus.queued, queued.length, before.text);

    first.child.kill('SIGTERM');
    // The log line is written in the same turn that starts the drain.
    await first.waitForLog('shutting down: draining running attempts');
    await assertShuttingDown(first);
    // Reads still answer while draining.
    const read = await first.request('GET', `/v1/jobs/${queued[0]}`);
    assert.equal(read.status, 200, read.text);
    assert.equal(read.body.status, 'queued', 'dispatch stopped at the signal');

    assert.deepEqual(await first.exited, { code: 0, signal: null }, first.stderr());
    assert.ok(
      first.logs.some((line) => line.msg === 'stopped'),
      'the process logged that it stopped',
    );

    const second = await spawnKiln(env);
    for (const id of running) {
      const job = await second.waitForJob(id);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.equal(job.attempts, 1, `finished within the grace period, not run again: ${JSON.stringify(job)}`);
      assert.equal(job.error, null);
    }
    for (const id of queued) {
      const job = await second.waitForJob(id);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.equal(job.attempts, 1, JSON.stringify(job));
    }
    second.child.kill('SIGTERM');
    assert.deepEqual(await second.exited, { code: 0, signal: null }, second.stderr());
  });

  it('releases what the grace period cannot finish as interrupted, without using up an attempt', async () => {
    const env = {
      KILN_STORE: freshStore(dirs),
      KILN_THREADS: '2',
      KILN_SHUTDOWN_GRACE_MS: '200',
    };
    const first = await spawnKiln(env);
    const lastChance = await submit(first, {
      type: 'cpu.spin',
      priority: 9,
      payload: { ms: 3000 },
      maxAttempts: 1,
    });
    const withRetries = await submit(first, {
      type: 'cpu.spin',
      priority: 9,
      payload: { ms: 3000 },
      maxAttempts: 2,
      backoff: quickBackoff,
    });
    const started = new Map<string, string>();
    for (const id of [lastChance, withRetries]) {
      const job = await first.waitForStatus(id, 'running');
      assert.equal(job.attempts, 1);
      started.set(id, job.startedAt);
    }

    first.child.kill('SIGTERM');
    await first.waitForLog('shutting down: draining running attempts');
    await assertShuttingDown(first);
    assert.deepEqual(await first.exited, { code: 0, signal: null }, first.stderr());

    const second = await spawnKiln(env);
    for (const id of [lastChance, withRetries]) {
      const job = await second.waitForJob(id);
      assert.equal(job.status, 'completed', JSON.stringify(job));
      assert.notEqual(job.startedAt, started.get(id), 'the completing attempt started after the restart');
      assert.equal(job.attempts, 1, `the attempt released at shutdown is not counted: ${JSON.stringify(job)}`);
      assert.ok(job.result.spunMs >= 3000, JSON.stringify(job.result));
      if (job.error !== null) assert.equal(job.error.code, 'interrupted');
    }
    second.child.kill('SIGTERM');
    assert.deepEqual(await second.exited, { code: 0, signal: null }, second.stderr());
  });

  it('a second signal exits at once with a non-zero code, and loses nothing accepted', async () => {
    const env = {
      KILN_STORE: freshStore(dirs),
      KILN_THREADS: '2',
      KILN_SHUTDOWN_GRACE_MS: '60000',
    };
    const first = await spawnKiln(env);
    const accepted: string[] = [];
    const long = {
      type: 'cpu.spin',
      priority: 9,
      payload: { ms: 2500 },
      backoff: quickBackoff,
    };
    accepted.push(await submit(first, long), await submit(first, long));
    const batch = await first.request('POST', '/v1/jobs/batch', {
      jobs: Array.from({ length: 50 }, (_, i) => ({
        type: 'cpu.spin',
        payload: { ms: 1 + (i % 5) },
      })),
    });
    assert.equal(batch.status, 201, batch.text);
    for (const job of batch.body.jobs) accepted.push(job.id);
    const dependent = await first.request('POST', '/v1/jobs', {
      type: 'test.sum',
      payload: { value: 1 },
      dependsOn: accepted.slice(0, 3),
    });
    assert.equal(dependent.status, 201, dependent.text);
    assert.equal(dependent.body.status, 'waiting');
    accepted.push(dependent.body.id);
    const delayed = await submit(first, { type: 'noop', delayMs: 500 });
    accepted.push(delayed);
    await Promise.all(accepted.slice(0, 2).map((id) => first.waitForStatus(id, 'running')));

    first.child.kill('SIGTERM');
    await first.waitForLog('shutting down: draining running attempts');
    await assertShuttingDown(first);
    first.child.kill('SIGINT');
    const exit = await first.exited;
    assert.equal(exit.signal, null, first.stderr());
    assert.notEqual(exit.code, 0, 'the second signal does not wait for the drain');
    assert.ok(first.logs.some((line) => line.msg.startsWith('second signal')));
    assert.ok(!first.logs.some((line) => line.msg === 'stopped'), 'the drain did not complete');

    const second = await spawnKiln(env);
    const finished = await mapLimit(accepted, 16, (id) => second.waitForJob(id));
    const notCompleted = finished.filter((job) => job.status !== 'completed');
    assert.deepEqual(notCompleted, [], 'every accepted job completes after the restart');
    for (const job of finished.slice(0, 2)) {
      assert.ok(job.attempts >= 2, `the attempt cut off by the exit ran again: ${JSON.stringify(job)}`);
    }
    const sum = finished.find((job) => job.id === dependent.body.id);
    assert.equal(sum.result.total, 1);
    const queue = await second.request('GET', '/v1/queue');
    assert.equal(queue.body.pending, 0, queue.text);
    assert.equal(queue.body.byStatus.completed, accepted.length, queue.text);
    second.child.kill('SIGTERM');
    assert.deepEqual(await second.exited, { code: 0, signal: null }, second.stderr());
  });
});
