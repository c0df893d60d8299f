import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decideAttempt, decideExpired, MAX_SNOOZE_MS } from '../../../src/scheduler/dispatch/retry-policy.js';

const NOW = 1_700_000_000_000;
const half = () => 0.5;
const MAX_SNOOZES = 3;
const MAX_INTERRUPTIONS = 3;
const job = {
  attempts: 1,
  maxAttempts: 3,
  snoozes: 0,
  timeoutMs: 1000,
  backoff: { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 'none' as const },
};

describe('retry policy', () => {
  it('completes with the result text', () => {
    const decision = decideAttempt(
      job,
      { kind: 'answered', result: { ok: true, resultText: '{"a":1}' } },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.deepEqual(decision, { outcome: { kind: 'completed', resultText: '{"a":1}' }, metric: 'success' });
  });

  it('retries a handler error after backoff, and fails it on the last attempt or when not retryable', () => {
    const error = { name: 'Error', message: 'boom', retryable: true };
    const retry = decideAttempt(job, { kind: 'answered', result: { ok: false, error } }, true, NOW, half, MAX_SNOOZES);
    assert.deepEqual(retry, {
      outcome: {
        kind: 'failed',
        error: { code: 'handler_error', message: 'Error: boom', attempt: 1 },
        retryAt: NOW + 100,
      },
      metric: 'error',
    });
    const third = { ...job, attempts: 3 };
    const last = decideAttempt(third, { kind: 'answered', result: { ok: false, error } }, true, NOW, half, MAX_SNOOZES);
    assert.equal(last.outcome.kind === 'failed' && last.outcome.retryAt, null);
    const fatal = decideAttempt(
      job,
      { kind: 'answered', result: { ok: false, error: { ...error, retryable: false } } },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.equal(fatal.outcome.kind === 'failed' && fatal.outcome.retryAt, null);
  });

  it('grows the delay with each failed attempt, up to maxMs', () => {
    const error = { name: 'Error', message: 'boom', retryable: true };
    const second = decideAttempt(
      { ...job, attempts: 2, maxAttempts: 10 },
      { kind: 'answered', result: { ok: false, error } },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.equal(second.outcome.kind === 'failed' && second.outcome.retryAt, NOW + 200);
    const late = decideAttempt(
      { ...job, attempts: 9, maxAttempts: 10 },
      { kind: 'answered', result: { ok: false, error } },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.equal(late.outcome.kind === 'failed' && late.outcome.retryAt, NOW + 10_000);
  });

  it('fails a timed-out attempt with code timeout and a crashed one with worker_crashed, both retryable', () => {
    const timeout = decideAttempt(job, { kind: 'aborted', reason: 'timeout' }, true, NOW, half, MAX_SNOOZES);
    assert.equal(timeout.metric, 'timeout');
    assert.ok(timeout.outcome.kind === 'failed');
    assert.equal(timeout.outcome.error.code, 'timeout');
    assert.equal(timeout.outcome.retryAt, NOW + 100);
    const crash = decideAttempt(job, { kind: 'crashed', cause: 'exit 3' }, true, NOW, half, MAX_SNOOZES);
    assert.equal(crash.metric, 'crash');
    assert.ok(crash.outcome.kind === 'failed');
    assert.equal(crash.outcome.error.code, 'worker_crashed');
    assert.match(crash.outcome.error.message, /exit 3/);
  });

  it("reads the code a thread gives a failure: its own crash, another attempt's crash, a result too large", () => {
    const error = { name: 'Error', message: 'late throw', retryable: true };
    const crashed = decideAttempt(
      job,
      { kind: 'answered', result: { ok: false, code: 'worker_crashed', error } },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.equal(crashed.metric, 'crash');
    assert.ok(crashed.outcome.kind === 'failed');
    assert.equal(crashed.outcome.error.code, 'worker_crashed');
    assert.match(crashed.outcome.error.message, /crashed its worker thread: Error: late throw/);
    assert.equal(crashed.outcome.retryAt, NOW + 100);

    const interrupted = decideAttempt(
      { ...job, attempts: job.maxAttempts },
      { kind: 'answered', result: { ok: false, code: 'interrupted', error } },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.ok(interrupted.outcome.kind === 'released', 'not counted, even on the last attempt');
    assert.equal(interrupted.outcome.error.code, 'interrupted');
    assert.equal(interrupted.outcome.retryAt, NOW);

    const tooLarge = decideAttempt(
      job,
      {
        kind: 'answered',
        result: {
          ok: false,
          code: 'result_too_large',
          error: { ...error, name: 'ResultTooLargeError', retryable: false },
        },
      },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.equal(tooLarge.metric, 'error');
    assert.ok(tooLarge.outcome.kind === 'failed');
    assert.equal(tooLarge.outcome.error.code, 'result_too_large');
    assert.equal(tooLarge.outcome.retryAt, null, 'not retried');
  });

  it('releases (attempt not counted) what a shutdown or a broken batch cut short', () => {
    for (const [end, alone] of [
      [{ kind: 'aborted', reason: 'shutdown' }, true],
      [{ kind: 'aborted', reason: 'timeout' }, false],
      [{ kind: 'crashed', cause: 'exit' }, false],
    ] as const) {
      const decision = decideAttempt(job, end, alone, NOW, half, MAX_SNOOZES);
      assert.equal(decision.outcome.kind, 'released', JSON.stringify(end));
      assert.ok(decision.outcome.kind === 'released');
      assert.equal(decision.outcome.error.code, 'interrupted');
      assert.equal(decision.outcome.retryAt, NOW);
    }
  });

  it('retries an expired lease as interrupted, or fails it on the last attempt', () => {
    const expired = {
      id: 'j',
      type: 't',
      owner: 'o',
      attempt: 1,
      started: true,
      maxAttempts: 2,
      backoff: job.backoff,
      interruptions: 0,
      interruptedBy: [],
    };
    const retry = decideExpired(expired, NOW, half, MAX_INTERRUPTIONS);
    assert.ok(retry.kind === 'failed');
    assert.equal(retry.error.code, 'interrupted');
    assert.equal(retry.retryAt, NOW + 100);
    const last = decideExpired({ ...expired, attempt: 2 }, NOW, half, MAX_INTERRUPTIONS);
    assert.ok(last.kind === 'failed');
    assert.equal(last.retryAt, null);
  });

  it('gives back the attempt of an expired lease whose handler never started, even the last one', () => {
    const expired = {
      id: 'j',
      type: 't',
      owner: 'o',
      attempt: 1,
      started: false,
      maxAttempts: 1,
      backoff: job.backoff,
      interruptions: 0,
      interruptedBy: [],
    };
    assert.deepEqual(decideExpired(expired, NOW, half, MAX_INTERRUPTIONS), { kind: 'unstarted' });
  });

  it('fails the job at its KILN_MAX_INTERRUPTIONS-th rescue, started or not, whatever attempts it has left', () => {
    const rescued = (interruptions: number, started: boolean) =>
      decideExpired(
        {
          id: 'j',
          type: 't',
          owner: 'c',
          attempt: 1,
          started,
          maxAttempts: 10,
          backoff: job.backoff,
          interruptions,
          interruptedBy: ['a', 'b'].slice(0, interruptions),
        },
        NOW,
        half,
        3,
      );
    assert.deepEqual(rescued(1, false), { kind: 'unstarted' });
    assert.equal(rescued(1, true).kind, 'failed');
    assert.notEqual((rescued(1, true) as { retryAt: number | null }).retryAt, null);
    for (const started of [false, true]) {
      const stopped = rescued(2, started);
      assert.ok(stopped.kind === 'failed');
      assert.equal(stopped.retryAt, null);
      assert.equal(stopped.error.code, 'too_many_interruptions');
      assert.equal(stopped.error.attempt, 1);
      assert.match(stopped.error.message, /interrupted 3 times/);
      assert.match(stopped.error.message, /\(a, b, c\)/);
    }
    // A limit of one: the first rescue stops the job.
    const once = decideExpired(
      {
        id: 'j',
        type: 't',
        owner: 'a',
        attempt: 1,
        started: false,
        maxAttempts: 3,
        backoff: job.backoff,
        interruptions: 0,
        interruptedBy: [],
      },
      NOW,
      half,
      1,
    );
    assert.ok(once.kind === 'failed' && once.error.code === 'too_many_interruptions');
  });

  it('snoozes: scheduled at now + ms with the attempt given back, even on the last attempt', () => {
    const snooze = (ms: number) => ({
      ok: false as const,
      code: 'snoozed' as const,
      snoozeMs: ms,
      error: { name: 'Snooze', message: '', retryable: true },
    });
    const last = { ...job, attempts: job.maxAttempts };
    assert.deepEqual(decideAttempt(last, { kind: 'answered', result: snooze(250) }, true, NOW, half, MAX_SNOOZES), {
      outcome: { kind: 'snoozed', runAt: NOW + 250 },
      metric: 'snoozed',
    });
    const zero = decideAttempt(job, { kind: 'answered', result: snooze(0) }, false, NOW, half, MAX_SNOOZES);
    assert.deepEqual(zero.outcome, { kind: 'snoozed', runAt: NOW }, 'in a micro-batch too');
    const fraction = decideAttempt(job, { kind: 'answered', result: snooze(0.2) }, true, NOW, half, MAX_SNOOZES);
    assert.deepEqual(fraction.outcome, { kind: 'snoozed', runAt: NOW + 1 }, 'whole milliseconds, rounded up');
    const longest = decideAttempt(
      job,
      { kind: 'answered', result: snooze(MAX_SNOOZE_MS) },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.deepEqual(longest.outcome, { kind: 'snoozed', runAt: NOW + MAX_SNOOZE_MS });
  });

  it('fails a snooze outside 0 to a day as a handler error naming the range, retried like one', () => {
    for (const ms of [-1, MAX_SNOOZE_MS + 1, Number.NaN, Number.POSITIVE_INFINITY]) {
      const snooze = {
        ok: false as const,
        code: 'snoozed' as const,
        snoozeMs: ms,
        error: { name: 'Snooze', message: '', retryable: true },
      };
      const decision = decideAttempt(job, { kind: 'answered', result: snooze }, true, NOW, half, MAX_SNOOZES);
      assert.equal(decision.metric, 'error');
      assert.deepEqual(decision.outcome, {
        kind: 'failed',
        error: {
          code: 'handler_error',
          message: `SnoozeError: ctx.snooze(ms) takes a number of milliseconds from 0 to 86400000, got ${ms}`,
          attempt: 1,
        },
        retryAt: NOW + 100,
      });
    }
  });

  it('fails the job for good (snooze_limit) at the snooze past the limit, whatever attempts are left', () => {
    const snooze = {
      ok: false as const,
      code: 'snoozed' as const,
      snoozeMs: 10,
      error: { name: 'Snooze', message: '', retryable: true },
    };
    const below = decideAttempt(
      { ...job, snoozes: MAX_SNOOZES - 1 },
      { kind: 'answered', result: snooze },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.equal(below.outcome.kind, 'snoozed');
    const at = decideAttempt(
      { ...job, maxAttempts: 100, snoozes: MAX_SNOOZES },
      { kind: 'answered', result: snooze },
      true,
      NOW,
      half,
      MAX_SNOOZES,
    );
    assert.equal(at.metric, 'error');
    assert.ok(at.outcome.kind === 'failed');
    assert.equal(at.outcome.retryAt, null);
    assert.equal(at.outcome.error.code, 'snooze_limit');
    assert.equal(
      at.outcome.error.message,
      'the job snoozed 3 times, the most KILN_MAX_SNOOZES allows (3); it fails instead of snoozing again',
    );
    const none = decideAttempt(job, { kind: 'answered', result: snooze }, true, NOW, half, 0);
    assert.ok(
      none.outcome.kind === 'failed' && none.outcome.error.code === 'snooze_limit',
      'KILN_MAX_SNOOZES=0: no snoozes',
    );
  });
});
