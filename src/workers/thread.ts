/**
 * The piscina worker entry: runs attempts inside a worker thread.
 *
 * Opening the pool's BroadcastChannel at module load is deliberate: this module is only
 * ever loaded as a thread's entry. The channel is unref()ed so it never keeps the thread
 * alive. Each running attempt registers its Abort under its job id, so an `abort`
 * message from the main thread reaches the handler's ctx.signal.
 *
 * Crashes: every attempt runs in an AsyncLocalStorage context, which timers, promises
 * and I/O callbacks it schedules inherit, so an error no handler caught (a throw from a
 * timer, an unhandled rejection) names the attempt whose work raised it. That attempt
 * fails as `worker_crashed` if its outcome is still open (not yet answered); the attempt
 * running at that moment, if another, ends `interrupted` (not its fault, not counted).
 * A thread that saw such an error is no longer trusted: it answers what it holds,
 * starts nothing more and asks the pool to replace it (a Retirement). It asks the same
 * after `maxJobs` attempts and after an isolated task's attempt.
 *
 * Snoozes: `ctx.snooze(ms)` answers an object this thread remembers (a WeakSet); a handler
 * that returns or throws one of them ends its attempt as a snooze, whatever module it
 * imported Kiln from. The thread passes `ms` on as asked: the retry policy checks it.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { inspect } from 'node:util';
import { BroadcastChannel, type MessagePort, threadId, workerData } from 'node:worker_threads';
import type {
  AttemptError,
  AttemptResult,
  ChannelMessage,
  LoopMessage,
  Retirement,
  SlotAnswer,
  ThreadAttempt,
  ThreadData,
  ThreadLoop,
} from './protocol.js';
import { Abort } from './abort.js';
import { encodeAnswer } from './protocol.js';
import { endSlot, slotPosted, startSlot } from './slots.js';
import { WorkQueueReader } from './work-queue.js';
import type { Snooze, TaskContext, TaskDefinition } from './task.js';

type Failure = AttemptError;

/** One attempt of the message this thread runs, as the crash handler sees it. */
interface AttemptRun {
  readonly input: ThreadAttempt;
  /** Its outcome so far; null while it has none. */
  result: AttemptResult | null;
  /** Its message was answered: an error its work raises now comes too late to be its outcome. */
  answered: boolean;
  /** Ends a running attempt at once with `result` (its handler may still be awaiting). */
  cut(result: AttemptResult): void;
}

/** The reason ctx.signal carries when the pool aborts an attempt or its time runs out. */
class AbortedByPoolError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'AbortError';
  }
}

const data = workerData as ThreadData | null;
lowerThreadPriority(data?.nice ?? 0);
const channel = data === null ? null : new BroadcastChannel(data.channelName);
const slots = data === null ? null : new BigInt64Array(data.slots);
const queue = data === null ? null : new WorkQueueReader(data.queue);
const running = new Map<string, Abort>();
const loaded = new Map<string, Promise<TaskDefinition>>();
const attemptContext = new AsyncLocalStorage<AttemptRun>();
/** What ctx.snooze answered, for the handlers of this thread to return or throw. */
const snoozeRequests = new WeakSet<object>();
/** The attempts of the message running now; null between messages. */
let current: AttemptRun[] | null = null;
/** Attempts this thread has run. */
let attemptsRun = 0;
/** The loop's port, where the thread's hello, retirement and progress go (see runLoop). */
let loopPort: MessagePort | null = null;
/** Set once this thread must be replaced: it starts no message after that. */
let retirement: Retirement | null = null;

/**
 * Stops the code that called process.exit from a leftover of an attempt already
 * answered; the crash was charged before it was thrown, so the handlers ignore it.
 */
class LeftoverExit extends Error {}

process.on('uncaughtException', (err, origin) => {
  if (!(err instanceof LeftoverExit)) onUncaught(err, origin);
});
// An unhandled rejection would otherwise end the thread as an uncaught exception.
process.on('unhandledRejection', (reason) => {
  if (!(reason instanceof LeftoverExit)) onUncaught(reason, 'unhandledRejection');
});

/**
 * process.exit ends the thread at once, and the attempt running then would be charged
 * for it. Called by the attempt running (its handler, or work of its own), it does so, as
 * it always did; called by a leftover of an attempt already answered (a timer its handler
 * left), it is that attempt's crash: it is charged to it like an uncaught error, the
 * attempt running goes back uncounted, and the thread retires instead of exiting.
 */
const exitThread = process.exit.bind(process);
process.exit = ((code?: number | string | null) => {
  const caller = attemptContext.getStore();
  if (caller === undefined || !caller.answered) return exitThread(code);
  onUncaught(new Error(`process.exit(${code ?? ''}) after its handler returned`), 'process.exit');
  throw new LeftoverExit('process.exit from an answered attempt');
}) as typeof process.exit;

if (channel !== null) {
  (channel as BroadcastChannel & { unref(): void }).unref();
  channel.onmessage = (event) => {
    const message = event.data as ChannelMessage;
    if (message.kind === 'abort') running.get(message.jobId)?.abort(new AbortedByPoolError(message.reason));
  };
}

/**
 * Gives this worker thread a higher nice value than the process's other threads, so
 * that when the main thread or the store thread wakes up (a request, a commit, a
 * finished job to hand over) Linux runs it at once instead of after a time slice of a
 * spinning handler. On Linux a thread's nice value is its own: setpriority on its
 * thread id (read from /proc/thread-self). Elsewhere, or if refused, nothing changes.
 */
function lowerThreadPriority(nice: number): void {
  if (nice === 0) return;
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, nice);
  } catch {
    // Not Linux, or not allowed: the thread keeps the process's priority.
  }
}

/**
 * The thread's life: take the oldest message from the work queue whenever nothing runs
 * here, run it, write its answer in its slot (work-queue.ts). Nothing is sent to this
 * thread per job, and the main thread is not woken per answer: it reads the slots when it
 * drains (pool.ts).
 * Resolves never: the thread ends when the pool terminates it (after a retirement, a
 * timeout, a cancel) or closes.
 */
export default async function runLoop(loop: ThreadLoop): Promise<never> {
  const port = loop.port;
  loopPort = port;
  const post = postToMain;
  post({ kind: 'hello', threadId });
  if (data === null || slots === null || queue === null) throw new Error('the thread runs only inside the pool');
  const runnable = (slot: number) => slotPosted(slots, slot);
  for (;;) {
    if (retirement !== null) return new Promise<never>(() => {});
    if (!queue.inUse(loop.seat)) {
      await queue.seatsChanged(loop.seat);
      continue;
    }
    const taken = queue.take(attemptsRun === 0, runnable);
    if (taken === null) {
      await queue.published();
      continue;
    }
    if (taken === 'isolated') {
      // An isolated task needs a thread that has run nothing: this one is replaced, and
      // the message waits in the queue for a fresh thread, its attempt not counted.
      retirement = retire('isolated', 'an isolated task runs on a fresh thread');
      post({ kind: 'retire', retirement });
      continue;
    }
    // The main thread took the message back (a better job arrived) as this thread took it.
    if (!startSlot(slots, taken.slot, threadId)) continue;
    const answer = await runMessage(JSON.parse(taken.text) as ThreadAttempt[]);
    // The answer goes over the message's text, then the slot is ended: DONE is what tells
    // the main thread, on its next drain, that the answer is there. If the main thread is
    // terminating this thread for this message (timeout, cancel), the answer is not read:
    // the thread waits for its end here rather than take another.
    const text = encodeAnswer(answer);
    if (!queue.answer(taken.slot, text)) post({ kind: 'answer', slot: taken.slot, text });
    if (!endSlot(slots, taken.slot)) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  }
}

/** Posts on the loop's port, and counts it so that the main thread's next drain reads the port. */
function postToMain(message: LoopMessage): void {
  loopPort?.postMessage(message);
  queue?.posted();
}

async function runMessage(attempts: ThreadAttempt[]): Promise<SlotAnswer> {
  const isolated = await isolatedType(attempts);
  const runs: AttemptRun[] = attempts.map((input) => ({ input, result: null, answered: false, cut: () => {} }));
  current = runs;
  for (const run of runs) {
    // An attempt cut short before it began (another attempt crashed the thread) stays so.
    if (run.result !== null) continue;
    const started = performance.now();
    const result = await execute(run);
    result.ms = performance.now() - started;
    attemptsRun += 1;
  }
  current = null;
  const results = runs.map((run) => {
    run.answered = true;
    return run.result ?? interrupted();
  });
  if (retirement === null && data?.maxJobs != null && attemptsRun >= data.maxJobs) {
    retirement = retire('recycled', `ran ${attemptsRun} attempts (KILN_THREAD_MAX_JOBS)`);
  }
  if (retirement === null && isolated !== null) retirement = retire('isolated', `task "${isolated}" ran`);
  // The heap grew to hold a result that was refused; a new thread gives that memory back.
  if (retirement === null && results.some((result) => !result.ok && result.code === 'result_too_large')) {
    retirement = retire('recycled', 'an attempt built a result over KILN_MAX_RESULT_BYTES');
  }
  return { results, retire: retirement };
}

/** The first task type of these attempts that asks for a fresh thread, or null. */
async function isolatedType(attempts: ThreadAttempt[]): Promise<string | null> {
  for (const input of attempts) {
    const definition = await loadTask(input.type).catch(() => null);
    if (definition?.isolate === true) return input.type;
  }
  return null;
}

/** Runs one attempt in its own async context; resolves with its result, or when it is cut short. */
function execute(run: AttemptRun): Promise<AttemptResult> {
  return new Promise((resolve) => {
    run.cut = (result) => {
      run.result ??= result;
      resolve(run.result);
    };
    void attemptContext.run(run, () => runAttempt(run.input)).then(run.cut);
  });
}

/**
 * An error no handler caught. The attempt whose work raised it (its async context) is
 * charged if its outcome is still open; the others of the running message end
 * `interrupted`; the thread retires (see the header).
 */
function onUncaught(err: unknown, origin: string): void {
  const culprit = attemptContext.getStore() ?? soleSuspect();
  const described = describeError(err);
  const kind =
    origin === 'unhandledRejection'
      ? 'an unhandled rejection'
      : origin === 'process.exit'
        ? 'process.exit'
        : 'an uncaught exception';
  const cause = `${described.name}: ${described.message} (${kind})`;
  const first = retirement?.reason !== 'crashed';
  if (first) {
    retirement = {
      ...retire('crashed', cause),
      culprit: culprit === null ? null : { jobId: culprit.input.jobId, attempt: culprit.input.attempt },
      late: culprit?.answered ?? false,
    };
  }
  if (culprit !== null && !culprit.answered) {
    const failure: AttemptResult = {
      ok: false,
      code: 'worker_crashed',
      error: { name: described.name, message: `${described.message} (${kind} outside the handler)`, retryable: true },
    };
    if (culprit.result === null) culprit.cut(failure);
    else culprit.result = { ...failure, ...(culprit.result.ms === undefined ? {} : { ms: culprit.result.ms }) };
  }
  if (current === null) {
    // No message to answer: the pool learns of the retirement on the channel.
    if (first && retirement !== null) channel?.postMessage({ kind: 'retire', retirement } satisfies ChannelMessage);
    return;
  }
  for (const run of current) {
    if (run.result !== null) continue;
    running.get(run.input.jobId)?.abort(new AbortedByPoolError('another attempt crashed this thread'));
    run.result = interrupted();
    run.cut(run.result);
  }
}

/**
 * Whom to charge when the error carries no attempt's context (a queueMicrotask callback,
 * say): the first attempt a thread runs is the only work it has ever done, so it is
 * charged; on a thread that ran others, nobody is, and the attempt running goes back
 * uncounted. So a job that keeps crashing this way is charged once it meets a fresh
 * thread, which a crash provides, instead of being given back forever.
 */
function soleSuspect(): AttemptRun | null {
  const first = current?.[0];
  return attemptsRun === 0 && first !== undefined && first.result === null ? first : null;
}

function retire(reason: Retirement['reason'], cause: string): Retirement {
  return { reason, threadId, cause, culprit: null, late: false };
}

function interrupted(): AttemptResult {
  return {
    ok: false,
    code: 'interrupted',
    error: { name: 'Interrupted', message: 'another attempt crashed its thread', retryable: true },
  };
}

async function runAttempt(input: ThreadAttempt): Promise<AttemptResult> {
  let definition: TaskDefinition;
  try {
    definition = await loadTask(input.type);
  } catch (err) {
    return { ok: false, error: { ...describeError(err), retryable: false } };
  }

  // The attempt's timeout is the dispatcher's: it aborts this attempt (through the
  // channel) and then terminates the thread.
  const abort = new Abort();
  let signal: AbortSignal | null = null;
  running.set(input.jobId, abort);
  try {
    const payload = await parsePayload(definition, input.payload);
    if (!payload.ok) return { ok: false, error: payload.error };
    const ctx: TaskContext = {
      jobId: input.jobId,
      attempt: input.attempt,
      get signal() {
        return signal ?? abort.signal;
      },
      // A handler may put a signal of its own in its context (AbortSignal.any, say).
      set signal(value: AbortSignal) {
        signal = value;
      },
      progress: progressReporter(input),
      parents: input.parents,
      snooze: requestSnooze,
      traceparent: input.traceparent ?? null,
      tracestate: input.tracestate ?? null,
    };
    const result: unknown = await definition.handler(payload.value, ctx);
    return snoozed(result) ?? toJsonResult(result, data?.maxResultBytes ?? Number.POSITIVE_INFINITY);
  } catch (err) {
    return snoozed(err) ?? { ok: false, error: describeError(err) };
  } finally {
    if (running.get(input.jobId) === abort) running.delete(input.jobId);
  }
}

function requestSnooze(ms: number): Snooze {
  const request: Snooze = Object.freeze({ snoozeMs: typeof ms === 'number' ? ms : Number.NaN });
  snoozeRequests.add(request);
  return request;
}

/** The snooze a handler returned or threw, as its outcome; null for anything else. */
function snoozed(value: unknown): AttemptResult | null {
  if (typeof value !== 'object' || value === null || !snoozeRequests.has(value)) return null;
  const ms = (value as Snooze).snoozeMs;
  return {
    ok: false,
    code: 'snoozed',
    snoozeMs: ms,
    error: { name: 'Snooze', message: `asked to run again in ${ms} ms`, retryable: true },
  };
}

function loadTask(type: string): Promise<TaskDefinition> {
  let promise = loaded.get(type);
  if (promise === undefined) {
    const url = data?.modules[type];
    if (url === undefined) return Promise.reject(new Error(`unknown task type "${type}"`));
    promise = import(url).then((namespace: { default?: TaskDefinition }) => {
      const definition = namespace.default;
      if (definition === undefined || typeof definition.handler !== 'function') {
        throw new Error(`task module ${url} has no default export with a handler`);
      }
      return definition;
    });
    // A failed import is not cached: the next attempt tries again.
    promise.catch(() => loaded.delete(type));
    loaded.set(type, promise);
  }
  return promise;
}

/**
 * Parses the payload with the task's schema again inside the thread, so the handler gets
 * the schema's output (defaults applied, values coerced) whatever form the store kept.
 */
async function parsePayload(
  definition: TaskDefinition,
  payload: unknown,
): Promise<{ ok: true; value: unknown } | { ok: false; error: Failure }> {
  if (definition.schema === undefined) return { ok: true, value: payload };
  const result = await definition.schema['~standard'].validate(payload);
  if (result.issues === undefined) return { ok: true, value: result.value };
  const text = result.issues
    .map((issue) => {
      const path = (issue.path ?? [])
        .map((segment) => String(typeof segment === 'object' && segment !== null ? segment.key : segment))
        .join('.');
      return path === '' ? issue.message : `payload.${path}: ${issue.message}`;
    })
    .join('; ');
  return { ok: false, error: { name: 'ValidationError', message: `invalid payload: ${text}`, retryable: false } };
}

function progressReporter(input: ThreadAttempt): TaskContext['progress'] {
  let lastPercent = Number.NaN;
  let lastMessage: string | null = null;
  return (percent, message) => {
    const value = Number(percent);
    const clamped = Number.isFinite(value) ? Math.min(100, Math.max(0, value)) : 0;
    const text = message === undefined || message === null ? null : String(message);
    if (clamped === lastPercent && text === lastMessage) return;
    lastPercent = clamped;
    lastMessage = text;
    const report: ChannelMessage = {
      kind: 'progress',
      jobId: input.jobId,
      attempt: input.attempt,
      percent: clamped,
      message: text,
    };
    // On the loop's port, posted before the attempt's answer is written, so a drain reads
    // its last report ahead of the outcome.
    if (loopPort !== null) postToMain(report);
    else channel?.postMessage(report);
  };
}

/**
 * The result as JSON text, measured here so that one over the limit is never copied to
 * the main thread. Retrying would give the same result again, so it is not retried.
 */
function toJsonResult(result: unknown, maxBytes: number): AttemptResult {
  if (result === undefined) return { ok: true, resultText: 'null' };
  let text: string | undefined;
  try {
    text = JSON.stringify(result);
  } catch (err) {
    return notSerializable(err instanceof Error ? err.message : String(err));
  }
  if (text === undefined) return notSerializable(`a ${typeof result} has no JSON form`);
  // A UTF-8 byte per character at least: the length alone rules out most of a huge result.
  const bytes = text.length > maxBytes ? text.length : Buffer.byteLength(text, 'utf8');
  if (bytes > maxBytes) {
    const size = text.length > maxBytes ? `at least ${bytes}` : String(bytes);
    return {
      ok: false,
      code: 'result_too_large',
      error: {
        name: 'ResultTooLargeError',
        message: `the result is ${size} bytes of JSON, over the limit of ${maxBytes} (KILN_MAX_RESULT_BYTES)`,
        retryable: false,
      },
    };
  }
  return { ok: true, resultText: text };
}

function notSerializable(reason: string): AttemptResult {
  return {
    ok: false,
    error: { name: 'TypeError', message: `result is not JSON-serializable: ${reason}`, retryable: false },
  };
}

function describeError(err: unknown): Failure {
  const retryable = !(typeof err === 'object' && err !== null && (err as { retryable?: unknown }).retryable === false);
  if (err instanceof Error) return { name: err.name, message: err.message, retryable };
  if (typeof err === 'string') return { name: 'Error', message: err, retryable };
  return { name: 'Error', message: inspect(err, { depth: 2, breakLength: Number.POSITIVE_INFINITY }), retryable };
}
