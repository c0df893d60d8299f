/**
 * The piscina worker entry: runs attempts inside a worker thread.
 *
 * Opening the pool's BroadcastChannel at module load is deliberate: this module is only
 * ever loaded as a thread's entry. The channel is unref()ed so it never keeps the thread
 * alive. Each running attempt registers its AbortController under its job id, so an
 * `abort` message from the main thread reaches the handler's ctx.signal.
 */
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { inspect } from 'node:util';
import { BroadcastChannel, threadId, workerData } from 'node:worker_threads';
import type { AttemptInput, AttemptResult, ChannelMessage, TaskAnswer, ThreadData, ThreadTask } from './protocol.js';
import { endSlot, startSlot } from './slots.js';
import type { TaskContext, TaskDefinition } from './task.js';

type Failure = Extract<AttemptResult, { ok: false }>['error'];

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
const running = new Map<string, AbortController>();
const loaded = new Map<string, Promise<TaskDefinition>>();

if (channel !== null) {
  (channel as BroadcastChannel & { unref(): void }).unref();
  channel.onmessage = (event) => {
    const message = event.data as ChannelMessage;
    if (message.kind === 'abort') running.get(message.jobId)?.abort(new AbortedByPoolError(message.reason));
  };
}

/** The message this thread runs now: a look-ahead waits for it, even if its handler awaits. */
let previous: Promise<unknown> = Promise.resolve();

/** One message at a time per thread: the look-ahead starts when the one before it ends. */
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

export default function runTask(task: ThreadTask): Promise<TaskAnswer> {
  const run = previous.then(() => runAttempts(task));
  previous = run.catch(() => undefined);
  return run;
}

async function runAttempts(task: ThreadTask): Promise<TaskAnswer> {
  // A look-ahead the main thread took back (a better job arrived) before this thread got to it.
  if (slots !== null && !startSlot(slots, task.slot, threadId)) return 'recalled';
  const results: AttemptResult[] = [];
  for (const attempt of task.attempts) {
    const started = performance.now();
    const result = await runAttempt(attempt);
    result.ms = performance.now() - started;
    results.push(result);
  }
  // The main thread is terminating this thread for this message (timeout, cancel): wait
  // for the end here rather than start the look-ahead behind it.
  if (slots !== null && !endSlot(slots, task.slot)) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  return results;
}

async function runAttempt(input: AttemptInput): Promise<AttemptResult> {
  let definition: TaskDefinition;
  try {
    definition = await loadTask(input.type);
  } catch (err) {
    return { ok: false, error: { ...describeError(err), retryable: false } };
  }

  // The attempt's timeout is the dispatcher's: it aborts this controller (through the
  // channel) and then terminates the thread.
  const controller = new AbortController();
  running.set(input.jobId, controller);
  try {
    const payload = await parsePayload(definition, JSON.parse(input.payloadText) as unknown);
    if (!payload.ok) return { ok: false, error: payload.error };
    const ctx: TaskContext = {
      jobId: input.jobId,
      attempt: input.attempt,
      signal: controller.signal,
      progress: progressReporter(input),
      parents: input.parents,
    };
    const result: unknown = await definition.handler(payload.value, ctx);
    return toJsonResult(result);
  } catch (err) {
    return { ok: false, error: describeError(err) };
  } finally {
    if (running.get(input.jobId) === controller) running.delete(input.jobId);
  }
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

function progressReporter(input: AttemptInput): TaskContext['progress'] {
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
    channel?.postMessage(report);
  };
}

function toJsonResult(result: unknown): AttemptResult {
  if (result === undefined) return { ok: true, resultText: 'null' };
  let text: string | undefined;
  try {
    text = JSON.stringify(result);
  } catch (err) {
    return notSerializable(err instanceof Error ? err.message : String(err));
  }
  if (text === undefined) return notSerializable(`a ${typeof result} has no JSON form`);
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
