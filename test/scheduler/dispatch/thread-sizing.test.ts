import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Dispatcher } from '../../../src/scheduler/dispatch/dispatcher.js';
import { MAIN_MS_PER_JOB, threadsFor, WorkAhead } from '../../../src/scheduler/dispatch/thread-sizing.js';
import { KilnMetrics } from '../../../src/scheduler/statistics/metrics.js';
import { SqliteStore } from '../../../src/store/sqlite/store.js';
import type { NewJob } from '../../../src/contract/job.js';
import { WorkerPool } from '../../../src/workers/pool.js';
import { loadTasks } from '../../../src/workers/registry.js';
import { silentLog } from '../../../src/fault-log.js';
import { fixtureTasksDir } from '../../support/paths.js';
import { pollUntil } from '../../support/poll.js';
import { insertOk, newJob } from '../../support/store-fixtures.js';

describe('WorkAhead', () => {
  /** The pool's side as WorkAhead reads it: threads in use and free slots. */
  const poolOf = (threads: number, slots = 1000) => ({
    threadsInUse: threads,
    slots: { available: slots },
    useThreads(count: number) {
      this.threadsInUse = count;
    },
  });

  it('sizes the work ahead to about 10 ms a thread and refills it once half is taken', () => {
    const pool = poolOf(1);
    const ahead = new WorkAhead(pool, { threads: 2, maxAhead: 7 });
    assert.equal(ahead.sizeTo(2), true, 'two threads and five messages ahead each: room for more');
    assert.equal(pool.threadsInUse, 2);
    // 2 threads × (1 running + 5 ahead) = 12 messages at most.
    assert.equal(ahead.room(0), 12);
    assert.equal(ahead.room(11), 0, 'one taken of ten ahead: not refilled yet');
    assert.equal(ahead.room(8), 0, 'four taken');
    assert.equal(ahead.room(7), 5, 'half taken: refilled to the full depth');
    assert.equal(ahead.sizeTo(2), false, 'the same jobs again: nothing more');
  });

  it('claims at once for a thread that would run dry, and never past the free slots', () => {
    const ahead = new WorkAhead(poolOf(4, 3), { threads: 4, maxAhead: 7 });
    ahead.sizeTo(1); // ten ahead each, at most seven
    assert.equal(ahead.room(3), 3, 'a thread without a message: as many as there are slots');
    const roomy = new WorkAhead(poolOf(4), { threads: 4, maxAhead: 7 });
    roomy.sizeTo(1);
    assert.equal(roomy.room(3), 29);
  });

  it('keeps one message ahead for long jobs, refilled as each is taken', () => {
    const ahead = new WorkAhead(poolOf(2), { threads: 2, maxAhead: 7 });
    ahead.sizeTo(1000);
    assert.equal(ahead.room(4), 0);
    assert.equal(ahead.room(3), 1);
  });
});

describe('threadsFor', () => {
  it('gives jobs not measured yet every thread', () => {
    assert.equal(threadsFor(null, 4), 4);
  });

  it('gives jobs shorter than the main thread takes to hand one out a single thread', () => {
    assert.equal(threadsFor(0.001, 4), 1);
    assert.equal(threadsFor(MAIN_MS_PER_JOB * 1.4, 4), 1);
  });

  it('gives as many threads as a job is longer than its hand-out, within the pool', () => {
    assert.equal(threadsFor(MAIN_MS_PER_JOB * 2.5, 4), 3);
    assert.equal(threadsFor(5, 4), 4);
    assert.equal(threadsFor(5, 1), 1);
  });
});

describe('threads in use, through real threads', () => {
  let store: SqliteStore;
  let pool: WorkerPool;
  let dispatcher: Dispatcher;
  let completed = 0;

  before(async () => {
    const registry = await loadTasks({ tasksDir: fixtureTasksDir });
    store = await SqliteStore.open(':memory:', { capacity: 10_000, synchronous: 'normal' });
    pool = new WorkerPool({ threads: 2, maxMemoryMb: 64, registry, onProgress() {} });
    dispatcher = new Dispatcher({
      store,
      pool,
      metrics: new KilnMetrics({
        counts: () => store.counts(),
        capacity: 10_000,
        threads: () => 2,
        busyThreads: () => 0,
      }),
      threads: 2,
      // A noop takes a few µs in its thread, but milliseconds now and then on a loaded
      // machine (its run time is wall time): a wide margin keeps the decisions the same
      // from run to run. 20 ms jobs call for four threads at this cost per job.
      mainMsPerJob: 5,
      maxSnoozes: 100,
      leaseMs: 60_000,
      onError: (message, error) => assert.fail(`${message}: ${String(error)}`),
      log: silentLog,
    });
    await dispatcher.start();
  });

  after(async () => {
    await dispatcher.stop(1000);
    await pool.close();
    await store.close();
  });

  /** Runs the jobs to completion; answers how many messages each thread started meanwhile. */
  async function run(jobs: NewJob[]): Promise<Map<number, number>> {
    const before = new Map(pool.startedByThread());
    for (let i = 0; i < jobs.length; i += 500) {
      await insertOk(store, jobs.slice(i, i + 500));
      dispatcher.pump();
    }
    completed += jobs.length;
    await pollUntil(
      () => store.counts(),
      (counts) => counts.byStatus.completed === completed,
      { what: `${completed} completed jobs` },
    );
    const started = new Map<number, number>();
    for (const [threadId, count] of pool.startedByThread()) {
      const more = count - (before.get(threadId) ?? 0);
      if (more > 0) started.set(threadId, more);
    }
    return started;
  }

  const noops = (n: number) => Array.from({ length: n }, () => newJob({ type: 'noop', payload: {} }));
  const spins = (n: number) => Array.from({ length: n }, () => newJob({ type: 'cpu.spin', payload: { ms: 20 } }));

  it('runs noop micro-batches on one thread, and larger jobs on every thread', async () => {
    // Until a type's run time is measured its jobs get every thread.
    const first = await run(noops(4));
    assert.equal(first.size, 2, `unmeasured jobs went to both threads: ${JSON.stringify([...first])}`);
    for (let round = 0; round < 20 && pool.threadsInUse !== 1; round++) await run(noops(10));
    assert.equal(pool.threadsInUse, 1, 'once noop is measured, one thread is enough');

    const tiny = await run(noops(2000));
    assert.equal(tiny.size, 1, `noop messages went to one thread: ${JSON.stringify([...tiny])}`);
    const messages = [...tiny.values()].reduce((sum, n) => sum + n, 0);
    assert.ok(messages < 2000, `the noops shared messages (${messages} messages for 2000 jobs)`);

    const large = await run(spins(12));
    assert.equal(large.size, 2, `20 ms jobs went to both threads: ${JSON.stringify([...large])}`);
    assert.equal(pool.threadsInUse, 2);
  });
});
