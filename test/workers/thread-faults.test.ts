import { spawnSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { EventEmitter, once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { type ProgressMessage, type ThreadEnd, WorkerPool, type WorkerPoolOptions } from '../../src/workers/pool.js';
import type { AttemptInput, AttemptResult, TaskAnswer } from '../../src/workers/protocol.js';
import { loadTasks, type TaskRegistry } from '../../src/workers/registry.js';

/**
 * What a thread does with errors no handler caught, how it is recycled or isolated, and
 * the result ceiling: real worker threads, with the fixtures in test/fixtures/tasks.
 */

const fixturesDir = fileURLToPath(new URL('../../../test/fixtures/tasks/', import.meta.url));
let registry: TaskRegistry;
let nextId = 0;

before(async () => {
  registry = await loadTasks({ tasksDir: fixturesDir });
});

function attempt(type: string, payload: unknown = {}): AttemptInput {
  nextId += 1;
  return { jobId: `job-${nextId}`, type, attempt: 1, payloadText: JSON.stringify(payload), parents: [] };
}

/** A pool whose thread ends and progress reports can be awaited, each with the test's own deadline. */
class TestPool {
  readonly pool: WorkerPool;
  readonly ends: ThreadEnd[] = [];
  /** pool.liveThreads as each end was reported. */
  readonly liveAtEnd: number[] = [];
  readonly #events = new EventEmitter();

  constructor(options: Partial<WorkerPoolOptions> = {}) {
    this.pool = new WorkerPool({
      threads: 1,
      maxMemoryMb: 64,
      registry,
      onProgress: (message: ProgressMessage) => this.#events.emit(`progress:${message.jobId}`, message),
      onThreadEnd: (end) => {
        this.ends.push(end);
        this.liveAtEnd.push(this.pool.liveThreads);
        this.#events.emit('end', end);
      },
      ...options,
    });
  }

  /** The next thread end, or one already seen. */
  async nextEnd(seen: number): Promise<ThreadEnd> {
    const end = this.ends[seen];
    if (end !== undefined) return end;
    const [next] = (await holdingLoop(once(this.#events, 'end'))) as [ThreadEnd];
    return next;
  }

  progress(jobId: string): Promise<unknown> {
    return holdingLoop(once(this.#events, `progress:${jobId}`));
  }

  /** Sends one message; `started` is whether its thread started it. */
  async send(attempts: AttemptInput[]): Promise<{ results: AttemptResult[]; started: boolean }> {
    const slot = this.pool.slots.acquire();
    assert.ok(slot !== null, 'a free attempt slot');
    try {
      const answer: TaskAnswer = await this.pool.run({ attempts, slot }, new AbortController().signal);
      assert.notEqual(answer, 'recalled');
      return { results: answer as AttemptResult[], started: this.pool.slots.startedAt(slot) !== null };
    } finally {
      this.pool.slots.release(slot);
    }
  }

  async one(input: AttemptInput): Promise<AttemptResult> {
    const { results } = await this.send([input]);
    const [result] = results;
    assert.ok(result, 'one result');
    return result;
  }
}

/** The pool's channel is unref()ed; a test that awaits only a channel message holds the loop open itself. */
async function holdingLoop<T>(promise: Promise<T>): Promise<T> {
  const hold = setInterval(() => {}, 60_000);
  try {
    return await promise;
  } finally {
    clearInterval(hold);
  }
}

function withoutMs(result: AttemptResult | undefined): unknown {
  assert.ok(result);
  const { ms: _ms, ...rest } = result;
  return rest;
}

function codeOf(result: AttemptResult): string | null {
  return result.ok ? null : (result.code ?? null);
}

function valueOf(result: AttemptResult): unknown {
  assert.ok(result.ok, JSON.stringify(result));
  return JSON.parse(result.resultText) as unknown;
}

describe('an error no handler caught', () => {
  let pool: TestPool;
  before(() => {
    pool = new TestPool();
  });
  after(() => pool.pool.close());

  test('thrown from a timer after its attempt answered: the running attempt is interrupted, the late one logged', async () => {
    const culprit = attempt('fixture.late-throw', { n: 1 });
    assert.deepEqual(withoutMs(await pool.one(culprit)), { ok: true, resultText: '{"returned":1}' });
    const innocent = attempt('fixture.fire');
    const seen = pool.ends.length;
    assert.deepEqual(withoutMs(await pool.one(innocent)), {
      ok: false,
      code: 'interrupted',
      error: { name: 'Interrupted', message: 'another attempt crashed its thread', retryable: true },
    });
    assert.deepEqual(await pool.nextEnd(seen), {
      reason: 'crashed',
      cause: 'Error: late throw 1 (an uncaught exception)',
      attempts: [{ jobId: innocent.jobId, attempt: 1 }],
      culprit: { jobId: culprit.jobId, attempt: 1, late: true },
    });
    // The thread was replaced: the next attempt runs on a fresh one, with no timer left.
    assert.deepEqual(valueOf(await pool.one(attempt('noop'))), { ok: true });
  });

  test('thrown from a timer while its attempt is still open: that attempt fails as worker_crashed', async () => {
    const culprit = attempt('fixture.late-throw', { n: 2, fire: true, wait: true });
    const seen = pool.ends.length;
    assert.deepEqual(withoutMs(await pool.one(culprit)), {
      ok: false,
      code: 'worker_crashed',
      error: { name: 'Error', message: 'late throw 2 (an uncaught exception outside the handler)', retryable: true },
    });
    const end = await pool.nextEnd(seen);
    assert.equal(end.reason, 'crashed');
    assert.deepEqual(end.culprit, { jobId: culprit.jobId, attempt: 1, late: false });
  });

  test('within one message, an earlier attempt that answered is charged and the one running is interrupted', async () => {
    const culprit = attempt('fixture.late-throw', { n: 3, reject: true });
    const innocent = attempt('fixture.fire');
    const notRun = attempt('fixture.thread-state', { mark: 'never' });
    const seen = pool.ends.length;
    const { results } = await pool.send([culprit, innocent, notRun]);
    assert.deepEqual(results.map(withoutMs), [
      {
        ok: false,
        code: 'worker_crashed',
        error: {
          name: 'Error',
          message: 'late rejection 3 (an unhandled rejection outside the handler)',
          retryable: true,
        },
      },
      {
        ok: false,
        code: 'interrupted',
        error: { name: 'Interrupted', message: 'another attempt crashed its thread', retryable: true },
      },
      {
        ok: false,
        code: 'interrupted',
        error: { name: 'Interrupted', message: 'another attempt crashed its thread', retryable: true },
      },
    ]);
    const end = await pool.nextEnd(seen);
    assert.equal(end.cause, 'Error: late rejection 3 (an unhandled rejection)');
    assert.deepEqual(end.culprit, { jobId: culprit.jobId, attempt: 1, late: false });
    const fresh = valueOf(await pool.one(attempt('fixture.thread-state', { mark: 'after' })));
    assert.deepEqual((fresh as { seen: unknown }).seen, null, 'the replacement thread never saw the batch');
  });

  test('an error that names no attempt is charged to the first attempt of a fresh thread, else to nobody', async () => {
    const fresh = new TestPool();
    try {
      const first = attempt('fixture.late-throw', { n: 5, microtask: true, wait: true });
      assert.deepEqual(withoutMs(await fresh.one(first)), {
        ok: false,
        code: 'worker_crashed',
        error: {
          name: 'Error',
          message: 'microtask throw 5 (an uncaught exception outside the handler)',
          retryable: true,
        },
      });
      assert.deepEqual((await fresh.nextEnd(0)).culprit, { jobId: first.jobId, attempt: 1, late: false });
      assert.equal((await fresh.one(attempt('noop'))).ok, true);
      const second = attempt('fixture.late-throw', { n: 6, microtask: true, wait: true });
      if (microtaskErrorsKeepTheirContext()) {
        // Node.js 24 (AsyncContextFrame): the error names its attempt after all, which is charged.
        assert.equal(codeOf(await fresh.one(second)), 'worker_crashed');
        assert.deepEqual((await fresh.nextEnd(1)).culprit, { jobId: second.jobId, attempt: 1, late: false });
        return;
      }
      // On a thread that ran another job first, the error could be that job's: nobody is charged.
      assert.equal(codeOf(await fresh.one(second)), 'interrupted');
      const end = await fresh.nextEnd(1);
      assert.equal(end.culprit, null);
      assert.deepEqual(end.attempts, [{ jobId: second.jobId, attempt: 1 }]);
      // Given back, it runs again on the replacement thread, where it is the first attempt.
      assert.equal(codeOf(await fresh.one(second)), 'worker_crashed');
    } finally {
      await fresh.pool.close();
    }
  });

  test('a thread that exits in a handler is reported with the attempt it ran, and replaced', async () => {
    const seen = pool.ends.length;
    const exiting = attempt('fixture.exit', { code: 7 });
    await assert.rejects(pool.one(exiting), /worker exited with code: 7/);
    assert.deepEqual(await pool.nextEnd(seen), {
      reason: 'crashed',
      cause: 'worker exited with code: 7',
      attempts: [{ jobId: exiting.jobId, attempt: 1 }],
      culprit: null,
    });
    assert.equal(pool.liveAtEnd[seen], 0, 'the dead thread is not counted while its replacement starts');
    assert.deepEqual(valueOf(await pool.one(attempt('noop'))), { ok: true });
    assert.equal(pool.pool.liveThreads, 1);
  });
});

describe('thread recycling and isolation', () => {
  test('a thread is replaced after maxJobsPerThread attempts; state left on globalThis goes with it', async () => {
    const pool = new TestPool({ maxJobsPerThread: 2 });
    try {
      const first = valueOf(await pool.one(attempt('fixture.thread-state', { mark: 'a' }))) as Record<string, unknown>;
      const second = valueOf(await pool.one(attempt('fixture.thread-state', { mark: 'b' }))) as Record<string, unknown>;
      assert.equal(second.threadId, first.threadId);
      assert.equal(second.seen, 'a', 'one thread shares globalThis between its jobs');
      const end = await pool.nextEnd(0);
      assert.equal(end.reason, 'recycled');
      assert.match(end.cause, /ran 2 attempts/);
      const third = valueOf(await pool.one(attempt('fixture.thread-state', { mark: 'c' }))) as Record<string, unknown>;
      assert.notEqual(third.threadId, first.threadId);
      assert.equal(third.seen, null);
    } finally {
      await pool.pool.close();
    }
  });

  test('an isolated task runs on a thread that ran nothing else, and its thread is replaced after it', async () => {
    const pool = new TestPool();
    try {
      const before = valueOf(await pool.one(attempt('fixture.thread-state', { mark: 'left' }))) as Record<
        string,
        unknown
      >;
      // The used thread does not take it: it is replaced, and the message waits in the queue for the fresh one.
      const isolated = valueOf(await pool.one(attempt('fixture.isolated', { mark: 'isolated' }))) as Record<
        string,
        unknown
      >;
      assert.equal((await pool.nextEnd(0)).reason, 'isolated');
      assert.notEqual(isolated.threadId, before.threadId);
      assert.equal(isolated.seen, null, 'nothing another job left reaches it');
      assert.equal((await pool.nextEnd(1)).reason, 'isolated');
      const afterwards = valueOf(await pool.one(attempt('fixture.thread-state', { mark: 'x' }))) as Record<
        string,
        unknown
      >;
      assert.notEqual(afterwards.threadId, isolated.threadId);
      assert.equal(afterwards.seen, null, 'nothing it left reaches another job');
    } finally {
      await pool.pool.close();
    }
  });
});

describe('the result ceiling', () => {
  let pool: TestPool;
  before(() => {
    pool = new TestPool({ maxResultBytes: 1024 });
  });
  after(() => pool.pool.close());

  test('a JSON result over maxResultBytes fails without retry; one at the limit passes', async () => {
    // 1022 characters and two quotes: 1024 bytes of JSON.
    const fits = await pool.one(attempt('fixture.big-result', { char: 'x', n: 1022 }));
    assert.equal(fits.ok, true);
    assert.deepEqual(withoutMs(await pool.one(attempt('fixture.big-result', { char: 'x', n: 1023 }))), {
      ok: false,
      code: 'result_too_large',
      error: {
        name: 'ResultTooLargeError',
        message: 'the result is at least 1025 bytes of JSON, over the limit of 1024 (KILN_MAX_RESULT_BYTES)',
        retryable: false,
      },
    });
    // Counted in UTF-8 bytes: 600 two-byte characters are 1202 bytes.
    const wide = await pool.one(attempt('fixture.big-result', { char: 'é', n: 600 }));
    assert.equal(wide.ok, false);
    assert.ok(!wide.ok);
    assert.equal(wide.code, 'result_too_large');
    assert.match(wide.error.message, /is 1202 bytes/);
    const huge = await pool.one(attempt('fixture.big-result', { char: 'x', n: 5 * 1024 * 1024 }));
    assert.ok(!huge.ok);
    assert.equal(huge.code, 'result_too_large');
    // Each thread that built an oversized result is replaced, so that its heap is given back.
    assert.deepEqual(
      pool.ends.map(({ reason, cause }) => ({ reason, cause })),
      Array.from({ length: 3 }, () => ({
        reason: 'recycled',
        cause: 'an attempt built a result over KILN_MAX_RESULT_BYTES',
      })),
    );
  });
});

/**
 * Whether an error thrown by a queueMicrotask callback still has its async context when it
 * reaches process.on('uncaughtException'): so from Node.js 24, whose AsyncLocalStorage keeps the
 * context in the frame the error escapes from; before, the hooks' stack is emptied first.
 */
function microtaskErrorsKeepTheirContext(): boolean {
  const probe = `const { AsyncLocalStorage } = require('node:async_hooks');
const als = new AsyncLocalStorage();
process.on('uncaughtException', () => process.stdout.write(String(als.getStore() === 'job')));
als.run('job', () => queueMicrotask(() => { throw new Error('probe'); }));`;
  const result = spawnSync(process.execPath, ['-e', probe], { encoding: 'utf8' });
  assert.match(result.stdout, /^(true|false)$/, `the probe of queueMicrotask's context: ${result.stderr}`);
  return result.stdout === 'true';
}
