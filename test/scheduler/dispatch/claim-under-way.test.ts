import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { JobStore } from '../../../src/store/store.js';
import type { Dispatcher } from '../../../src/scheduler/dispatch/dispatcher.js';
import { SqliteStore } from '../../../src/store/sqlite/store.js';
import { WorkerPool } from '../../../src/workers/pool.js';
import { fixtureTasksDir } from '../../support/paths.js';
import { pollUntil } from '../../support/poll.js';
import { insertOk, mustGet, newJob } from '../../support/store-fixtures.js';
import { loadTasks, type TaskRegistry } from '../../../src/workers/registry.js';
import { holdFirstClaim, testDispatcher } from '../../support/held-claim.js';

const ONE_AT_A_TIME = new Map([['tenant', { concurrency: 1, rateLimit: null }]]);

describe('limits that change, and a pause, while jobs are claimed', () => {
  let registry: TaskRegistry;
  let pool: WorkerPool;
  const dir = mkdtempSync(join(tmpdir(), 'kiln-claim-under-way-'));

  before(async () => {
    registry = await loadTasks({ tasksDir: fixtureTasksDir });
    pool = new WorkerPool({ threads: 2, maxMemoryMb: 64, registry, onProgress() {} });
  });

  after(async () => {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Jobs of the group `tenant` that each run until their file exists. */
  async function holds(store: JobStore, count: number) {
    const jobs = Array.from({ length: count }, (_, index) => {
      const release = join(dir, `${index}-${Math.random().toString(36).slice(2)}`);
      return { job: newJob({ type: 'test.hold', group: 'tenant', payload: { release }, timeoutMs: 60_000 }), release };
    });
    await insertOk(
      store,
      jobs.map(({ job }) => job),
    );
    return jobs.map(({ job, release }) => ({ id: job.id, release }));
  }

  /**
   * A dispatcher on `real` whose first claim, of `count` held jobs, takes them in the store
   * and holds its answer until `answer()`.
   */
  async function claimHeld(real: JobStore, count: number) {
    const held = holdFirstClaim(real);
    const dispatcher = testDispatcher(held.store, pool, 2);
    await dispatcher.start();
    const jobs = await holds(real, count);
    dispatcher.pump();
    await held.claimed;
    return { dispatcher, jobs, answer: held.answer, released: held.released };
  }

  async function finish(dispatcher: Dispatcher, store: JobStore, jobs: { id: string; release: string }[]) {
    for (const job of jobs) writeFileSync(job.release, '');
    for (const job of jobs) {
      await pollUntil(
        () => mustGet(store, job.id),
        (read) => read.status === 'completed',
        { what: `job ${job.id} to complete` },
      );
    }
    await dispatcher.stop(1000);
  }

  it('gives back the jobs of a claim answered after their group was limited, and claims again under the limit', async () => {
    const real = await SqliteStore.open(':memory:', { capacity: 100, synchronous: 'normal' });
    try {
      // Its first claim takes the jobs in the store, then its answer waits.
      const { dispatcher, jobs, answer, released } = await claimHeld(real, 3);

      dispatcher.configureLimits('group', ONE_AT_A_TIME);
      answer();
      const running = await pollUntil(
        async () =>
          (await Promise.all(jobs.map((job) => mustGet(real, job.id)))).filter((job) => job.status === 'running'),
        (list) => list.length > 0,
        { what: 'a job of the group to start under its limit' },
      );
      assert.equal(running.length, 1);
      // Before the fix the claim's three jobs ran as claimed: two started, one waiting ahead.
      assert.deepEqual([...released].sort(), jobs.map((job) => job.id).sort(), 'the claim gave back all three');
      assert.equal(dispatcher.attemptsBy('group', 'all').get('tenant'), 1, 'one job of the group is held');
      for (const job of jobs) {
        if (job.id === running[0]?.id) continue;
        const waiting = await mustGet(real, job.id);
        assert.equal(waiting.status, 'queued');
        assert.equal(waiting.attempts, 0, 'a job given back has no attempt counted');
      }
      await finish(dispatcher, real, jobs);
    } finally {
      await real.close();
    }
  });

  it('counts the running jobs against a new group limit, takes back the one claimed ahead, and runs it when the group has room', async () => {
    const real = await SqliteStore.open(':memory:', { capacity: 100, synchronous: 'normal' });
    try {
      const dispatcher = testDispatcher(real, pool, 2);
      await dispatcher.start();
      const jobs = await holds(real, 3);
      dispatcher.pump();
      // Two threads run two of them, the third waits ahead of them, claimed.
      await pollUntil(
        async () => [
          dispatcher.attemptsBy('group', 'started').get('tenant'),
          dispatcher.attemptsBy('group', 'waiting').get('tenant'),
        ],
        ([started, waiting]) => started === 2 && waiting === 1,
        { what: 'two jobs started and one claimed ahead' },
      );

      dispatcher.configureLimits('group', ONE_AT_A_TIME);
      assert.equal(
        dispatcher.attemptsBy('group', 'waiting').get('tenant'),
        undefined,
        'the waiting one was taken back',
      );
      assert.equal(dispatcher.attemptsBy('group', 'started').get('tenant'), 2, 'started attempts run on');
      // The group had no limits when they were claimed: they count against the new one at once.
      assert.equal(dispatcher.limits.byGroup.usage('tenant').running, 2);
      const taken = await pollUntil(
        async () =>
          (await Promise.all(jobs.map((job) => mustGet(real, job.id)))).filter((job) => job.status === 'queued'),
        (list) => list.length === 1,
        { what: 'the job taken back to be queued' },
      );
      assert.equal(taken[0]?.attempts, 0);

      // One running job ends: the other still holds the group's one place.
      const third = jobs.find((job) => job.id === taken[0]?.id);
      const [first, second] = jobs.filter((job) => job.id !== taken[0]?.id);
      assert.ok(first && second && third);
      writeFileSync(first.release, '');
      await pollUntil(
        () => mustGet(real, first.id),
        (read) => read.status === 'completed',
        { what: 'the first job to complete' },
      );
      assert.equal(dispatcher.limits.byGroup.usage('tenant').running, 1);
      writeFileSync(second.release, '');
      const started = await pollUntil(
        () => mustGet(real, third.id),
        (read) => read.status === 'running',
        { what: 'the third job to run once the others ended' },
      );
      const ended = await mustGet(real, second.id);
      assert.equal(ended.status, 'completed');
      assert.ok(
        (started.startedAt as number) >= (ended.finishedAt as number),
        'the third started only once the second had ended',
      );
      await finish(dispatcher, real, jobs);
    } finally {
      await real.close();
    }
  });
  it('gives back the jobs of a claim answered after dispatch was paused, and starts none until it resumes', async () => {
    const real = await SqliteStore.open(':memory:', { capacity: 100, synchronous: 'normal' });
    try {
      // Its first claim takes the jobs in the store, then its answer waits.
      const { dispatcher, jobs, answer, released } = await claimHeld(real, 2);

      await dispatcher.pause();
      answer();
      await pollUntil(
        async () => released.length,
        (count) => count === jobs.length,
        { what: 'the claim to give its jobs back' },
      );
      assert.deepEqual([...released].sort(), jobs.map((job) => job.id).sort());
      assert.equal(dispatcher.attemptsBy('group', 'all').size, 0, 'nothing is held while paused');
      for (const job of jobs) {
        const read = await mustGet(real, job.id);
        assert.equal(read.status, 'queued');
        assert.equal(read.attempts, 0);
      }

      await dispatcher.resume();
      await finish(dispatcher, real, jobs);
    } finally {
      await real.close();
    }
  });
});
