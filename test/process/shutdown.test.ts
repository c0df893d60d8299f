import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { type KilnProcess, killAllKilns, mapLimit, spawnKiln } from '../support/kiln-process.js';
import { assertExitedCleanly, freshDir, startDrain, stopCleanly, submit } from '../support/shutdown.js';

/**
 * Shutdown as DESIGN.md ("Shutdown") promises it, on a real process and a real SQLite
 * file: SIGTERM drains within the grace period and exits 0; what the grace period
 * cannot finish is released as `interrupted` without using up an attempt; a second
 * signal exits at once; nothing accepted is lost either way.
 *
 * Running attempts are test.hold jobs: they end when the test creates their release
 * file (or when they are aborted), so whether an attempt is still running at the
 * signal, or outlives the grace period, never depends on the machine's speed.
 */

const quickBackoff = { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' };

/** While the drain lasts: submissions are refused with 503 shutting_down, /ready is 503. */
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

/**
 * After the signal a submission is never accepted: it is refused with 503
 * shutting_down while the drain lasts, or finds no server once the process is gone.
 */
async function assertNotAccepted(kiln: KilnProcess): Promise<void> {
  let refused: Awaited<ReturnType<KilnProcess['request']>>;
  try {
    refused = await kiln.request('POST', '/v1/jobs', { type: 'noop' });
  } catch (error) {
    assert.ok(error instanceof TypeError, `not a network error: ${String(error)}`); // fetch failed: no server
    return;
  }
  assert.equal(refused.status, 503, refused.text);
  assert.equal(refused.body.code, 'shutting_down');
}

/** Waits for each job to finish on `kiln`; each must be completed, and `check` looks at it further. */
async function eachCompleted(kiln: KilnProcess, ids: string[], check: (job: any) => void): Promise<void> {
  for (const id of ids) {
    const job = await kiln.waitForJob(id);
    assert.equal(job.status, 'completed', JSON.stringify(job));
    check(job);
  }
}

describe('shutdown of a real process on SQLite', { timeout: 60_000 }, () => {
  const dirs: string[] = [];
  after(async () => {
    await killAllKilns();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('SIGTERM lets running attempts finish within the grace period, keeps the queue, exits 0', async () => {
    const { store, release } = freshDir(dirs);
    const env = {
      KILN_STORE: store,
      KILN_THREADS: '2',
      KILN_SHUTDOWN_GRACE_MS: '60000',
    };
    const first = await spawnKiln(env);
    const hold = { type: 'test.hold', payload: { release } };
    const running = [await submit(first, { ...hold, priority: 9 }), await submit(first, { ...hold, priority: 9 })];
    // Held jobs too: had dispatch gone on after the signal, they would have run in this process.
    const queued: string[] = [];
    for (let i = 0; i < 6; i++) queued.push(await submit(first, hold));
    await Promise.all(running.map((id) => first.waitForStatus(id, 'running')));
    const before = await first.request('GET', '/v1/queue');
    // Each thread may hold one look-ahead (claimed, not started) beyond the job it runs.
    assert.equal(before.body.byStatus.queued + before.body.byStatus.running, queued.length + 2, before.text);
    assert.ok(before.body.byStatus.queued >= queued.length - 2, before.text);

    await startDrain(first);
    await assertShuttingDown(first);
    // Reads still answer while draining.
    const read = await first.request('GET', `/v1/jobs/${queued[queued.length - 1]}`);
    assert.equal(read.status, 200, read.text);
    assert.equal(read.body.status, 'queued', 'dispatch stopped at the signal');
    // The running attempts end now, well within the grace period, and the drain with them.
    writeFileSync(release, '');

    await assertExitedCleanly(first);
    assert.ok(
      first.logs.some((line) => line.msg === 'stopped'),
      'the process logged that it stopped',
    );

    const second = await spawnKiln(env);
    await eachCompleted(second, running, (job) => {
      assert.equal(job.attempts, 1, `finished within the grace period, not run again: ${JSON.stringify(job)}`);
      assert.equal(job.result.pid, first.child.pid, `finished by the first process: ${JSON.stringify(job)}`);
      assert.equal(job.error, null);
    });
    await eachCompleted(second, queued, (job) => {
      assert.equal(job.attempts, 1, JSON.stringify(job));
      assert.equal(job.result.pid, second.child.pid, `not dispatched after the signal: ${JSON.stringify(job)}`);
    });
    await stopCleanly(second);
  });

  it('releases what the grace period cannot finish as interrupted, without using up an attempt', async () => {
    const { store, release } = freshDir(dirs);
    const env = {
      KILN_STORE: store,
      KILN_THREADS: '2',
      // Short, and certain to expire: the held attempts are not released in this process.
      KILN_SHUTDOWN_GRACE_MS: '200',
    };
    const first = await spawnKiln(env);
    const hold = { type: 'test.hold', priority: 9, payload: { release } };
    const lastChance = await submit(first, { ...hold, maxAttempts: 1 });
    const withRetries = await submit(first, { ...hold, maxAttempts: 2, backoff: quickBackoff });
    const started = new Map<string, string>();
    for (const id of [lastChance, withRetries]) {
      const job = await first.waitForStatus(id, 'running');
      assert.equal(job.attempts, 1);
      started.set(id, job.startedAt);
    }

    await startDrain(first);
    // The drain may already be over (the grace period is short): the refusals while it
    // lasts are checked by the tests around this one, whose drains the test ends.
    await assertNotAccepted(first);
    await assertExitedCleanly(first);

    writeFileSync(release, '');
    const second = await spawnKiln(env);
    await eachCompleted(second, [lastChance, withRetries], (job) => {
      assert.notEqual(job.startedAt, started.get(job.id), 'the completing attempt started after the restart');
      assert.equal(job.attempts, 1, `the attempt released at shutdown is not counted: ${JSON.stringify(job)}`);
      assert.equal(job.result.pid, second.child.pid, `completed by the restarted process: ${JSON.stringify(job)}`);
      if (job.error !== null) assert.equal(job.error.code, 'interrupted');
    });
    await stopCleanly(second);
  });

  it('a second signal exits at once with a non-zero code, and loses nothing accepted', async () => {
    const { store, release } = freshDir(dirs);
    const env = {
      KILN_STORE: store,
      KILN_THREADS: '2',
      KILN_SHUTDOWN_GRACE_MS: '60000',
    };
    const first = await spawnKiln(env);
    const accepted: string[] = [];
    // Held until the restart: the drain cannot end before the second signal. Each is
    // started for certain (test.steps reports 0 % as its handler starts), and the
    // submissions that follow store its start, so its cut-off attempt counts.
    const steps = join(release, '..');
    const long = {
      type: 'test.steps',
      priority: 9,
      payload: { dir: steps, steps: 1 },
      maxAttempts: 3,
      backoff: quickBackoff,
    };
    for (let thread = 0; thread < 2; thread++) {
      const id = await submit(first, long);
      await first.waitForProgress(id);
      accepted.push(id);
    }
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

    await startDrain(first);
    await assertShuttingDown(first);
    first.child.kill('SIGINT');
    const exit = await first.exited;
    assert.equal(exit.signal, null, first.stderr());
    assert.notEqual(exit.code, 0, 'the second signal does not wait for the drain');
    assert.ok(first.logs.some((line) => line.msg.startsWith('second signal')));
    assert.ok(!first.logs.some((line) => line.msg === 'stopped'), 'the drain did not complete');

    writeFileSync(join(steps, 'step-1'), '');
    const restartedAt = Date.now();
    const second = await spawnKiln(env);
    const finished = await mapLimit(accepted, 16, (id) => second.waitForJob(id));
    const notCompleted = finished.filter((job) => job.status !== 'completed');
    assert.deepEqual(notCompleted, [], 'every accepted job completes after the restart');
    for (const job of finished.slice(0, 2)) {
      assert.ok(job.attempts >= 2, `the attempt cut off by the exit ran again: ${JSON.stringify(job)}`);
      assert.ok(Date.parse(job.finishedAt) >= restartedAt, `completed after the restart: ${JSON.stringify(job)}`);
    }
    const sum = finished.find((job) => job.id === dependent.body.id);
    assert.equal(sum.result.total, 1);
    const queue = await second.request('GET', '/v1/queue');
    assert.equal(queue.body.pending, 0, queue.text);
    assert.equal(queue.body.byStatus.completed, accepted.length, queue.text);
    await stopCleanly(second);
  });
});
