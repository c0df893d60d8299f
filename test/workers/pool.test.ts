import assert from 'node:assert/strict';
import { EventEmitter, once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { classifyRunFailure, type ProgressMessage, WorkerPool } from '../../src/workers/pool.js';
import type { AttemptInput, AttemptResult, TaskAnswer, ThreadTask } from '../../src/workers/protocol.js';
import { loadTasks, type TaskRegistry } from '../../src/workers/registry.js';

const fixturesDir = fileURLToPath(new URL('../../../test/fixtures/tasks/', import.meta.url));

let registry: TaskRegistry;
let nextId = 0;

function attempt(type: string, payload: unknown = {}, extra: Partial<AttemptInput> = {}): AttemptInput {
  nextId += 1;
  return { jobId: `job-${nextId}`, type, attempt: 1, payloadText: JSON.stringify(payload), parents: [], ...extra };
}

/** Progress reports by job id, so a test can wait for "the handler is running" without sleeping. */
class ProgressLog extends EventEmitter {
  readonly messages: ProgressMessage[] = [];
  readonly record = (message: ProgressMessage): void => {
    this.messages.push(message);
    this.emit(message.jobId, message);
  };
  async next(jobId: string): Promise<ProgressMessage> {
    const [message] = (await whileAwaiting(once(this, jobId))) as [ProgressMessage];
    return message;
  }
}

/**
 * The pool's channel is unref()ed (a server's sockets keep its process alive), so a test
 * that awaits only a channel message holds the event loop open itself meanwhile.
 */
async function whileAwaiting<T>(promise: Promise<T>): Promise<T> {
  const hold = setInterval(() => {}, 60_000);
  try {
    return await promise;
  } finally {
    clearInterval(hold);
  }
}

type Decoded = { ok: true; result: unknown } | Omit<Extract<AttemptResult, { ok: false }>, 'ms'>;

/** A result without its timing (after checking the timing is a duration), its JSON text decoded. */
function untimed(result: AttemptResult): Decoded {
  const { ms, ...rest } = result;
  assert.ok(typeof ms === 'number' && ms >= 0, `ms is a duration: ${ms}`);
  if (!rest.ok) return rest;
  assert.equal(typeof rest.resultText, 'string');
  return { ok: true, result: JSON.parse(rest.resultText) as unknown };
}

/** A task in a fresh slot of the pool's attempt slots. */
function task(pool: WorkerPool, attempts: AttemptInput[]): ThreadTask {
  return { attempts, slot: slotOf(pool) };
}

function slotOf(pool: WorkerPool): number {
  const slot = pool.slots.acquire();
  assert.ok(slot !== null, 'a free attempt slot');
  return slot;
}

/** The results of a task that was not recalled. */
function answered(answer: TaskAnswer): AttemptResult[] {
  assert.notEqual(answer, 'recalled');
  return answer as AttemptResult[];
}

async function runOne(pool: WorkerPool, input: AttemptInput): Promise<Decoded> {
  const [result] = answered(await pool.run(task(pool, [input]), new AbortController().signal));
  assert.ok(result);
  return untimed(result);
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  assert.fail('expected a rejection');
}

before(async () => {
  registry = await loadTasks({ tasksDir: fixturesDir });
});

describe('WorkerPool', () => {
  let pool: WorkerPool;
  const progress = new ProgressLog();

  before(() => {
    pool = new WorkerPool({ threads: 1, maxMemoryMb: 128, registry, onProgress: progress.record });
    pool.start();
    pool.start();
  });
  after(async () => {
    await pool.close();
    await pool.close();
  });

  test('runs a built-in task and several attempts in order', async () => {
    const results = await pool.run(
      {
        slot: slotOf(pool),
        attempts: [attempt('math.primes', { limit: 100 }), attempt('noop', { echo: [1, 'two'] }), attempt('noop')],
      },
      new AbortController().signal,
    );
    assert.deepEqual(answered(results).map(untimed), [
      { ok: true, result: { limit: 100, count: 25, largest: 97 } },
      { ok: true, result: [1, 'two'] },
      { ok: true, result: { ok: true } },
    ]);
    assert.equal(pool.threads, 1);
    assert.equal(pool.liveThreads, 1);
  });

  test('answers of every size come back whole: in the slot, and over 64 KiB on the thread’s port', async () => {
    for (const n of [10, 60_000, 70_000, 3_000_000]) {
      // Quotes are escaped in the answer's JSON, so the text is larger than the result.
      assert.deepEqual(await runOne(pool, attempt('fixture.big-result', { char: '"', n })), {
        ok: true,
        result: '"'.repeat(n),
      });
    }
  });

  test('a handler that throws fails the attempt, retryable', async () => {
    assert.deepEqual(await runOne(pool, attempt('fixture.throws', { n: 1 })), {
      ok: false,
      error: { name: 'Error', message: 'boom 1', retryable: true },
    });
  });

  test('an error with retryable = false keeps its name and is not retryable', async () => {
    assert.deepEqual(await runOne(pool, attempt('fixture.throws', { kind: 'fatal', n: 2 })), {
      ok: false,
      error: { name: 'BadInputError', message: 'fatal 2', retryable: false },
    });
  });

  test('a thrown non-Error becomes a message', async () => {
    assert.deepEqual(await runOne(pool, attempt('fixture.throws', { kind: 'string', n: 3 })), {
      ok: false,
      error: { name: 'Error', message: 'plain string 3', retryable: true },
    });
  });

  test('a handler that returns or throws ctx.snooze(ms) answers a snooze, its ms as asked', async () => {
    const snooze = (ms: number) => ({
      ok: false,
      code: 'snoozed',
      snoozeMs: ms,
      error: { name: 'Snooze', message: `asked to run again in ${ms} ms`, retryable: true },
    });
    // One message of several attempts: each ends on its own. Its slot is given back after.
    const message = task(pool, [
      attempt('fixture.snooze', { how: 'return', ms: 250 }),
      attempt('fixture.snooze', { how: 'throw', ms: 0 }),
      attempt('fixture.snooze', { how: 'return', ms: -5 }),
      attempt('fixture.snooze', { how: 'called', ms: 5 }),
      attempt('fixture.snooze', { how: 'lookalike', ms: 5 }),
    ]);
    const results = await pool.run(message, new AbortController().signal);
    pool.slots.release(message.slot);
    assert.deepEqual(answered(results).map(untimed), [
      snooze(250),
      snooze(0),
      snooze(-5),
      // Only what ctx.snooze answered is a snooze: calling it alone, or a look-alike, is a result.
      { ok: true, result: { called: true } },
      { ok: true, result: { snoozeMs: 5 } },
    ]);
  });

  test('a payload the task schema rejects fails without retry', async () => {
    const result = await runOne(pool, attempt('math.primes', { limit: 1 }));
    assert.equal(result.ok, false);
    assert.ok(!result.ok);
    assert.equal(result.error.retryable, false);
    assert.match(result.error.message, /payload\.limit/);
  });

  test('an unknown task type fails without retry', async () => {
    const result = await runOne(pool, attempt('no.such.task'));
    assert.deepEqual(result, {
      ok: false,
      error: { name: 'Error', message: 'unknown task type "no.such.task"', retryable: false },
    });
  });

  test('process.exit in a handler rejects run(), is classified as a crash, and the pool recovers', async () => {
    const signal = new AbortController().signal;
    const err = await rejection(pool.run(task(pool, [attempt('fixture.exit', { code: 3 })]), signal));
    assert.match(String((err as Error).message), /worker exited with code: 3/);
    assert.equal(classifyRunFailure(err, signal), 'crashed');
    assert.deepEqual(await runOne(pool, attempt('noop')), { ok: true, result: { ok: true } });
    assert.equal(pool.liveThreads, 1);
  });

  test('aborting the signal terminates a thread stuck in a synchronous loop', async () => {
    const controller = new AbortController();
    const input = attempt('fixture.block');
    const running = pool.run(task(pool, [input]), controller.signal);
    const started = await progress.next(input.jobId);
    assert.equal(started.message, 'blocking');
    controller.abort(new Error('timeout'));
    const err = await rejection(running);
    assert.match((err as Error).message, /worker exited/);
    assert.equal(classifyRunFailure(err, controller.signal), 'aborted');
    assert.deepEqual(await runOne(pool, attempt('noop')), { ok: true, result: { ok: true } });
    assert.equal(pool.liveThreads, 1);
  });

  test('progress reports reach onProgress with the job id, clamped and coerced', async () => {
    const input = attempt('fixture.progress', {}, { attempt: 2 });
    const seen: ProgressMessage[] = [];
    const listener = (message: ProgressMessage) => seen.push(message);
    progress.on(input.jobId, listener);
    const last = new Promise<void>((resolve) => {
      progress.on(input.jobId, (message: ProgressMessage) => {
        if (message.percent === 0) resolve();
      });
    });
    assert.deepEqual(await runOne(pool, input), { ok: true, result: 'done' });
    await whileAwaiting(last);
    progress.removeAllListeners(input.jobId);
    assert.deepEqual(
      seen.map(({ kind, jobId, attempt, percent, message }) => ({ kind, jobId, attempt, percent, message })),
      [
        { kind: 'progress', jobId: input.jobId, attempt: 2, percent: 10, message: null },
        { kind: 'progress', jobId: input.jobId, attempt: 2, percent: 50, message: 'half' },
        { kind: 'progress', jobId: input.jobId, attempt: 2, percent: 100, message: '42' },
        { kind: 'progress', jobId: input.jobId, attempt: 2, percent: 0, message: null },
      ],
    );
  });

  test('the handler sees jobId, attempt and parents', async () => {
    const parents = [
      { id: 'p1', type: 'math.primes', result: { count: 25 } },
      { id: 'p2', type: 'noop', result: null },
    ];
    const input = attempt('fixture.context', { x: 1 }, { attempt: 3, parents });
    assert.deepEqual(await runOne(pool, input), {
      ok: true,
      result: { jobId: input.jobId, attempt: 3, parents, payload: { x: 1 }, aborted: false },
    });
  });

  test('notifyAbort aborts ctx.signal of a handler that awaits', async () => {
    const input = attempt('fixture.await-abort');
    const running = runOne(pool, input);
    await progress.next(input.jobId);
    pool.notifyAbort('some-other-job', 'not this one');
    pool.notifyAbort(input.jobId, 'cancelled by client');
    assert.deepEqual(await running, {
      ok: true,
      result: { aborted: true, reason: 'cancelled by client', name: 'AbortError' },
    });
  });

  test('a result JSON cannot represent fails the attempt without retry', async () => {
    for (const kind of ['function', 'bigint', 'cyclic']) {
      const result = await runOne(pool, attempt('fixture.unserializable', { kind }));
      assert.equal(result.ok, false, kind);
      assert.ok(!result.ok);
      assert.equal(result.error.name, 'TypeError');
      assert.equal(result.error.retryable, false);
      assert.match(result.error.message, /^result is not JSON-serializable: /);
    }
    assert.deepEqual(await runOne(pool, attempt('fixture.unserializable', { kind: 'undefined' })), {
      ok: true,
      result: null,
    });
  });

  test('a signal aborted before run() rejects at once', async () => {
    const controller = new AbortController();
    controller.abort();
    const err = await rejection(pool.run(task(pool, [attempt('noop')]), controller.signal));
    assert.equal(classifyRunFailure(err, controller.signal), 'aborted');
  });
});

describe('WorkerPool queue (one thread)', () => {
  let pool: WorkerPool;
  let progress: ProgressLog;
  before(() => {
    progress = new ProgressLog();
    pool = new WorkerPool({ threads: 1, maxMemoryMb: 64, registry, onProgress: progress.record });
  });
  after(async () => {
    await pool.close();
  });

  test('a thread takes the next queued message when the one before it ends, and says when', async () => {
    const first = attempt('fixture.await-abort');
    const running = pool.run(task(pool, [first]), new AbortController().signal);
    await progress.next(first.jobId);
    const next = task(pool, [attempt('noop')]);
    const queued = pool.run(next, new AbortController().signal);
    assert.equal(pool.slots.startedAt(next.slot), null, 'held, not started, while the first runs');
    const before = Date.now();
    pool.notifyAbort(first.jobId, 'done waiting');
    await running;
    const [result] = answered(await queued);
    assert.deepEqual(untimed(result as AttemptResult), { ok: true, result: { ok: true } });
    const started = pool.slots.startedAt(next.slot);
    assert.ok(started !== null && started >= before - 1, `started at ${started}`);
  });

  test('a recalled message is skipped: it answers "recalled" and nothing of it runs', async () => {
    const first = attempt('fixture.await-abort');
    const running = pool.run(task(pool, [first]), new AbortController().signal);
    await progress.next(first.jobId);
    const ahead = attempt('fixture.context');
    const next = task(pool, [ahead]);
    const queued = pool.run(next, new AbortController().signal);
    assert.equal(pool.slots.recall(next.slot), true);
    pool.notifyAbort(first.jobId, 'done waiting');
    await running;
    assert.equal(await queued, 'recalled');
    assert.equal(pool.slots.startedAt(next.slot), null);
  });

  test('a message queued behind one whose thread is terminated runs on the thread that replaces it', async () => {
    const first = attempt('fixture.block');
    const controller = new AbortController();
    const running = pool.run(task(pool, [first]), controller.signal);
    await progress.next(first.jobId);
    const next = task(pool, [attempt('noop')]);
    const queued = pool.run(next, new AbortController().signal);
    assert.equal(pool.slots.startedAt(next.slot), null, 'queued while the only thread is blocked');
    controller.abort();
    await rejection(running);
    const [result] = answered(await queued);
    assert.deepEqual(untimed(result as AttemptResult), { ok: true, result: { ok: true } });
    assert.notEqual(pool.slots.startedBy(next.slot), null);
  });
});

describe('WorkerPool queue (two threads)', () => {
  let pool: WorkerPool;
  let progress: ProgressLog;
  before(() => {
    progress = new ProgressLog();
    pool = new WorkerPool({ threads: 2, maxMemoryMb: 64, registry, onProgress: progress.record });
  });
  after(async () => {
    await pool.close();
  });

  test('no message waits behind a long one while the other thread is free, and they start in order', async () => {
    const long = attempt('fixture.await-abort');
    const longMessage = task(pool, [long]);
    const running = pool.run(longMessage, new AbortController().signal);
    await progress.next(long.jobId);
    const shorts = Array.from({ length: 8 }, () => task(pool, [attempt('noop')]));
    const answers = shorts.map((message) => pool.run(message, new AbortController().signal));
    for (const answer of answers) answered(await answer);
    const starts = shorts.map((message) => pool.slots.startedAt(message.slot));
    const threads = new Set(shorts.map((message) => pool.slots.startedBy(message.slot)));
    assert.equal(threads.size, 1, 'every short message ran on the thread that was free');
    assert.equal(threads.has(pool.slots.startedBy(longMessage.slot)), false, "none on the long one's thread");
    for (let i = 1; i < starts.length; i++) {
      assert.ok((starts[i] ?? 0) >= (starts[i - 1] ?? Infinity), `message ${i} started after message ${i - 1}`);
    }
    pool.notifyAbort(long.jobId, 'done waiting');
    await running;
  });
});

describe('WorkerPool heap limit', () => {
  test('a thread over its heap limit rejects its run() and is replaced', async () => {
    const pool = new WorkerPool({ threads: 1, maxMemoryMb: 32, registry, onProgress: () => {} });
    try {
      const signal = new AbortController().signal;
      const err = await rejection(pool.run(task(pool, [attempt('fixture.oom')]), signal));
      assert.match(String((err as Error).message), /memory/i);
      assert.equal(classifyRunFailure(err, signal), 'crashed');
      assert.deepEqual(await runOne(pool, attempt('math.primes', { limit: 100 })), {
        ok: true,
        result: { limit: 100, count: 25, largest: 97 },
      });
    } finally {
      await pool.close();
    }
  });
});

describe('WorkerPool life cycle', () => {
  test('several pools in one process keep their progress apart; close rejects work in flight', async () => {
    const first = new ProgressLog();
    const second = new ProgressLog();
    const a = new WorkerPool({ threads: 2, maxMemoryMb: 64, registry, onProgress: first.record });
    const b = new WorkerPool({ threads: 1, maxMemoryMb: 64, registry, onProgress: second.record });
    try {
      assert.equal(a.threads, 2);
      const input = attempt('fixture.progress');
      const done = new Promise<void>((resolve) => {
        first.on(input.jobId, (message: ProgressMessage) => {
          if (message.percent === 0) resolve();
        });
      });
      await runOne(a, input);
      await whileAwaiting(done);
      assert.equal(first.messages.length, 4);

      const blocked = attempt('fixture.block');
      const running = b.run(task(b, [blocked]), new AbortController().signal);
      await second.next(blocked.jobId);
      assert.equal(
        first.messages.some((m) => m.jobId === blocked.jobId),
        false,
      );
      const closed = rejection(running);
      await b.close();
      assert.match(String((await closed) as Error), /closed/);
      assert.equal(b.liveThreads, 0);
      await rejection(b.run(task(b, [attempt('noop')]), new AbortController().signal));
      assert.throws(() => b.start(), /closed/);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
