import type { AttemptMetricOutcome } from '../statistics/metrics.js';
import type { AttemptOutcome, ExpiredAttempt } from '../../store/store.js';
import type { AttemptResult } from '../../workers/protocol.js';
import type { Backoff, JobError } from '../../contract/job.js';
import { retryDelayMs } from '../../jobs/backoff.js';

/**
 * The retry policy, in one place: how an attempt's end becomes a transition of its
 * job. Pure (the clock and the random source are arguments), so every branch has a
 * unit test; the dispatcher applies it to what threads answer and the rescuer to
 * attempts whose lease ran out.
 */

export interface AttemptJob {
  attempts: number;
  maxAttempts: number;
  /** Snoozes so far (`ctx.snooze`), each with its attempt given back. */
  snoozes: number;
  timeoutMs: number;
  backoff: Backoff;
}

export type AttemptEnd =
  /** The thread answered for this job. */
  | { kind: 'answered'; result: AttemptResult }
  /** The message was aborted by the dispatcher. */
  | { kind: 'aborted'; reason: 'timeout' | 'shutdown' }
  /** The thread died (exit, uncaught error, heap limit). */
  | { kind: 'crashed'; cause: string };

export interface Decision {
  outcome: AttemptOutcome;
  metric: AttemptMetricOutcome;
}

/** The longest snooze a handler may ask for: a day. */
export const MAX_SNOOZE_MS = 86_400_000;

/**
 * `alone`: the attempt ran alone in its message. A micro-batch that times out or loses
 * its thread cannot say which job was at fault, so its jobs are released (the attempt
 * is not counted) and run alone next, where a timeout or crash is their own.
 * `maxSnoozes`: how many snoozes a job may make (KILN_MAX_SNOOZES).
 */
export function decideAttempt(
  job: AttemptJob,
  end: AttemptEnd,
  alone: boolean,
  now: number,
  random: () => number,
  maxSnoozes: number,
): Decision {
  if (end.kind === 'answered') {
    const { result } = end;
    if (result.ok) return { outcome: { kind: 'completed', resultText: result.resultText }, metric: 'success' };
    if (result.code === 'snoozed') return decideSnooze(job, result.snoozeMs, maxSnoozes, now, random);
    if (result.code === 'interrupted') {
      const message = 'another attempt crashed the thread this one ran on; it runs again';
      return {
        outcome: { kind: 'released', error: { code: 'interrupted', message, attempt: job.attempts }, retryAt: now },
        metric: 'crash',
      };
    }
    if (result.code === 'worker_crashed') {
      const error: JobError = {
        code: 'worker_crashed',
        message: `attempt ${job.attempts} crashed its worker thread: ${result.error.name}: ${result.error.message}`,
        attempt: job.attempts,
      };
      return { outcome: failure(job, error, true, now, random), metric: 'crash' };
    }
    const error: JobError = {
      code: result.code ?? 'handler_error',
      message: `${result.error.name}: ${result.error.message}`,
      attempt: job.attempts,
    };
    return { outcome: failure(job, error, result.error.retryable, now, random), metric: 'error' };
  }
  const metric: AttemptMetricOutcome = end.kind === 'aborted' && end.reason === 'timeout' ? 'timeout' : 'crash';
  if ((end.kind === 'aborted' && end.reason === 'shutdown') || !alone) {
    const message =
      end.kind === 'aborted' && end.reason === 'shutdown'
        ? 'the server shut down during the attempt'
        : `the batch this attempt ran in ${end.kind === 'aborted' ? 'timed out' : 'lost its thread'}; it runs again alone`;
    return {
      outcome: { kind: 'released', error: { code: 'interrupted', message, attempt: job.attempts }, retryAt: now },
      metric,
    };
  }
  if (end.kind === 'aborted') {
    const error: JobError = {
      code: 'timeout',
      message: `attempt ${job.attempts} ran longer than ${job.timeoutMs} ms; its thread was terminated`,
      attempt: job.attempts,
    };
    return { outcome: failure(job, error, true, now, random), metric };
  }
  const error: JobError = {
    code: 'worker_crashed',
    message: `the worker thread died during attempt ${job.attempts}: ${end.cause}`,
    attempt: job.attempts,
  };
  return { outcome: failure(job, error, true, now, random), metric };
}

/**
 * A handler's `ctx.snooze(ms)`, in one place for both stores: a `ms` outside 0 to
 * MAX_SNOOZE_MS fails the attempt as the handler's error (retried like any other); a job
 * that has snoozed `maxSnoozes` times fails for good (`snooze_limit`, whatever attempts it
 * has left, this snooze not counted); otherwise the job is `scheduled` at now + ms (whole
 * milliseconds, rounded up), its attempt given back and its `snoozes` one more.
 */
export function decideSnooze(
  job: AttemptJob,
  ms: number,
  maxSnoozes: number,
  now: number,
  random: () => number,
): Decision {
  if (!(Number.isFinite(ms) && ms >= 0 && ms <= MAX_SNOOZE_MS)) {
    const error: JobError = {
      code: 'handler_error',
      message: `SnoozeError: ctx.snooze(ms) takes a number of milliseconds from 0 to ${MAX_SNOOZE_MS}, got ${ms}`,
      attempt: job.attempts,
    };
    return { outcome: failure(job, error, true, now, random), metric: 'error' };
  }
  if (job.snoozes >= maxSnoozes) {
    const error: JobError = {
      code: 'snooze_limit',
      message: `the job snoozed ${job.snoozes} times, the most KILN_MAX_SNOOZES allows (${maxSnoozes}); it fails instead of snoozing again`,
      attempt: job.attempts,
    };
    return { outcome: { kind: 'failed', error, retryAt: null }, metric: 'error' };
  }
  return { outcome: { kind: 'snoozed', runAt: now + Math.ceil(ms) }, metric: 'snoozed' };
}

/**
 * An attempt whose lease ran out (its server died or stopped answering while it held it).
 * Every such rescue counts one interruption on the job, whether the attempt counted or
 * not: a job whose handler takes its process down (a native crash, runaway memory, a
 * `process.kill` of its own) before its start is recorded would otherwise be given back
 * uncounted after every crash, for ever. So the rescue that makes `maxInterruptions`
 * (KILN_MAX_INTERRUPTIONS) fails the job for good (`too_many_interruptions`), whatever
 * attempts it has left. Otherwise: if its handler never started (a job claimed
 * when its server died), the attempt is given back; else `interrupted`, retried after
 * backoff unless it was the last.
 */
export function decideExpired(
  expired: ExpiredAttempt,
  now: number,
  random: () => number,
  maxInterruptions: number,
): AttemptOutcome {
  const interruptions = expired.interruptions + 1;
  if (interruptions >= maxInterruptions) {
    const servers = [...expired.interruptedBy, expired.owner];
    const error: JobError = {
      code: 'too_many_interruptions',
      message: `the job was interrupted ${interruptions} times, the most KILN_MAX_INTERRUPTIONS allows (${maxInterruptions}): its server stopped or stalled while it ran each time (${servers.join(', ')}); it fails instead of running again`,
      attempt: expired.attempt,
    };
    return { kind: 'failed', error, retryAt: null };
  }
  if (!expired.started) return { kind: 'unstarted' };
  const error: JobError = {
    code: 'interrupted',
    message: 'the lease expired before the attempt finished (its server stopped or stalled)',
    attempt: expired.attempt,
  };
  return failure(
    { attempts: expired.attempt, maxAttempts: expired.maxAttempts, backoff: expired.backoff },
    error,
    true,
    now,
    random,
  );
}

function failure(
  job: Pick<AttemptJob, 'attempts' | 'maxAttempts' | 'backoff'>,
  error: JobError,
  retryable: boolean,
  now: number,
  random: () => number,
): AttemptOutcome {
  if (!retryable || job.attempts >= job.maxAttempts) return { kind: 'failed', error, retryAt: null };
  return { kind: 'failed', error, retryAt: now + retryDelayMs(job.backoff, job.attempts, random) };
}
