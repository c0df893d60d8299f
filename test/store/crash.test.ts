import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { type KilnProcess, killAllKilns, mapLimit, spawnKiln } from '../support/kiln-process.js';

/**
 * Delivery guarantee against a real process death (DESIGN.md, "Delivery guarantee"):
 * a server killed with SIGKILL mid-work loses no job it answered 201 for, and the
 * attempts it was running are recovered at the next start and run again.
 */

// Interrupted attempts come back at once, so the second run is quick.
const quickBackoff = { initialMs: 10, factor: 1, maxMs: 10, jitter: 'none' };

describe('SIGKILL on the SQLite store', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-crash-'));
  const env = {
    KILN_STORE: `sqlite:${join(dir, 'kiln.db')}`,
    KILN_THREADS: '2',
  };
  // The long jobs are test.steps jobs: running until <dir>/step-1 exists, created only
  // before the restart, so both are certainly running at the kill. Each reports 0 % as
  // its handler starts; the submissions after that store its start, so its cut-off
  // attempt counts.
  const long = { type: 'test.steps', priority: 9, payload: { dir, steps: 1 }, maxAttempts: 3, backoff: quickBackoff };
  after(async () => {
    await killAllKilns();
    rmSync(dir, { recursive: true, force: true });
  });

  it('loses no accepted job and re-runs the attempts the kill cut short', async () => {
    const first = await spawnKiln(env);
    const accepted: string[] = [];
    const submit = async (body: unknown) => {
      const response = await first.request('POST', '/v1/jobs', body);
      assert.equal(response.status, 201, response.text);
      accepted.push(response.body.id);
      return response.body.id as string;
    };
    const spin = (index: number) => ({
      type: 'cpu.spin',
      payload: { ms: 5 + (index % 16) },
      backoff: quickBackoff,
    });

    // One long job holds one thread; the other works through short ones.
    const longA = await submit(long);
    await first.waitForProgress(longA);

    // Some short jobs finish before the kill, so the file holds every status at once:
    // the second long job depends on the 21st short job, and takes the other thread as
    // soon as that one completes, leaving the rest of the short jobs queued.
    const batches = await Promise.all(
      [0, 1, 2].map((b) =>
        first.request('POST', '/v1/jobs/batch', {
          jobs: [
            ...Array.from({ length: 100 }, (_, i) => ({
              ...spin(b * 100 + i),
              ...(b === 0 && i === 20 ? { ref: 'early' } : {}),
            })),
            ...(b === 0 ? [{ ...long, dependsOn: ['ref:early'] }] : []),
          ],
        }),
      ),
    );
    for (const batch of batches) {
      assert.equal(batch.status, 201, batch.text);
      for (const job of batch.body.jobs) accepted.push(job.id);
    }
    const early = batches[0]?.body.jobs[20].id as string;
    const longB = batches[0]?.body.jobs[100].id as string;
    assert.deepEqual(batches[0]?.body.jobs[100].dependsOn, [early]);
    const singles = await mapLimit(
      Array.from({ length: 30 }, (_, i) => i),
      8,
      (i) => submit(spin(i)),
    );
    assert.equal(singles.length, 30);

    assert.equal((await first.waitForJob(early)).status, 'completed');
    const runningB = await first.waitForProgress(longB);
    const runningA = await first.request('GET', `/v1/jobs/${longA}`);
    assert.equal(runningA.body.status, 'running', 'the first long job must still run at the kill');
    const queue = await first.request('GET', '/v1/queue');
    assert.equal(queue.body.threads.busy, 2, queue.text);
    assert.ok(queue.body.byStatus.queued > 0, queue.text);
    assert.ok(queue.body.byStatus.completed > 0, queue.text);

    // Submissions in flight at the kill: every one answered 201 must survive it.
    let killed = false;
    let markRacing: () => void = () => {};
    const racingAnswered = new Promise<void>((resolve) => {
      markRacing = resolve;
    });
    const acceptedBeforeRace = accepted.length;
    const racing = mapLimit([0, 1, 2, 3], 4, async (lane) => {
      for (let i = 0; i < 200 && !killed; i++) {
        let response: Awaited<ReturnType<KilnProcess['request']>>;
        try {
          response = await first.request('POST', '/v1/jobs', spin(lane * 1000 + i));
        } catch {
          return; // the connection died with the process
        }
        assert.equal(response.status, 201, `a submission racing the kill: ${response.text}`);
        accepted.push(response.body.id);
        if (accepted.length >= acceptedBeforeRace + 8) markRacing();
      }
      markRacing();
    });
    await racingAnswered;
    killed = true;
    first.child.kill('SIGKILL');
    const exit = await first.exited;
    assert.equal(exit.signal, 'SIGKILL');
    await racing;

    writeFileSync(join(dir, 'step-1'), '');
    const restartedAt = Date.now();
    const second = await spawnKiln(env);
    const finished = await mapLimit(accepted, 32, async (id) => {
      const job = await second.waitForJob(id);
      return {
        id,
        status: job.status as string,
        attempts: job.attempts as number,
        job,
      };
    });
    const notCompleted = finished.filter((f) => f.status !== 'completed');
    assert.deepEqual(
      notCompleted.map((f) => `${f.id}: ${f.status} ${JSON.stringify(f.job.error)}`),
      [],
      `${notCompleted.length} of ${accepted.length} accepted jobs did not complete after the restart`,
    );

    for (const { id, startedBefore } of [
      { id: longA, startedBefore: runningA.body.startedAt },
      { id: longB, startedBefore: runningB.startedAt },
    ]) {
      const job = finished.find((f) => f.id === id)?.job;
      assert.ok(job.attempts >= 2, `the interrupted job ${id} ran again: ${JSON.stringify(job)}`);
      assert.notEqual(job.startedAt, startedBefore, 'the completing attempt started after the restart');
      assert.ok(Date.parse(job.finishedAt) >= restartedAt, `completed after the restart: ${JSON.stringify(job)}`);
      if (job.error !== null) assert.equal(job.error.code, 'interrupted');
    }

    // A submission the kill cut off after its commit but before its 201 is stored too,
    // and runs last: wait for those before reading the counts.
    const unanswered = await second.request('GET', '/v1/jobs?status=queued,running,retrying&limit=500');
    assert.equal(unanswered.status, 200, unanswered.text);
    assert.ok(unanswered.body.jobs.length <= 4, `only the 4 racing submissions may be unanswered: ${unanswered.text}`);
    for (const job of unanswered.body.jobs) assert.equal((await second.waitForJob(job.id)).status, 'completed');

    const settled = await second.request('GET', '/v1/queue');
    assert.equal(settled.body.pending, 0, settled.text);
    assert.equal(settled.body.byStatus.running, 0, settled.text);
    assert.equal(settled.body.byStatus.failed, 0, settled.text);
    // A submission whose 201 the kill swallowed may exist too: at least, never fewer.
    assert.ok(settled.body.byStatus.completed >= accepted.length, settled.text);
    assert.equal(new Set(accepted).size, accepted.length, 'ids are unique');

    second.child.kill('SIGTERM');
    assert.deepEqual(await second.exited, { code: 0, signal: null });
  });
});
