import type { MessagePort } from 'node:worker_threads';
import type { ParentResult } from '../contract/job.js';
import type { WorkQueueBuffers } from './work-queue.js';

/**
 * What crosses the thread boundary. Errors thrown in a thread lose their own
 * properties on the way back, so the thread catches a handler's error itself and
 * answers with a plain outcome; progress and abort notices travel on one
 * BroadcastChannel per pool, never one channel per call.
 */

/** One attempt of one job, as the thread receives it. */
export interface AttemptInput {
  jobId: string;
  type: string;
  /** 1-based. */
  attempt: number;
  /** The payload as JSON text; the thread parses it (the main thread never does). */
  payloadText: string;
  parents: ParentResult[];
  /** The attempt's W3C trace context (ctx.traceparent); absent: none. */
  traceparent?: string;
  tracestate?: string | null;
}

export interface AttemptError {
  name: string;
  message: string;
  retryable: boolean;
}

/**
 * Why an attempt failed, when it is not the handler's own error:
 * - `worker_crashed`: its own work threw where no handler could catch it (a timer, an
 *   unhandled rejection); its thread is replaced.
 * - `interrupted`: another attempt's crash ended its thread first; not its fault.
 * - `result_too_large`: its JSON result is over the pool's byte limit.
 */
export type AttemptFailureCode = 'worker_crashed' | 'interrupted' | 'result_too_large';

export type AttemptResult =
  /** `resultText`: the result as JSON text, as it is stored. */
  (
    | { ok: true; resultText: string }
    | { ok: false; error: AttemptError; code?: AttemptFailureCode }
    /**
     * The handler returned or threw `ctx.snooze(ms)`: `snoozeMs` as asked (the retry policy
     * checks it); `error` describes the request for logs.
     */
    | { ok: false; code: 'snoozed'; snoozeMs: number; error: AttemptError }
  ) & {
    /** How long the attempt took inside the thread, in milliseconds (the dispatcher learns job costs from it). */
    ms?: number;
  };

/** One attempt as the thread decodes it from the work queue: the payload already parsed. */
export interface ThreadAttempt extends Omit<AttemptInput, 'payloadText'> {
  payload: unknown;
}

/**
 * The message's text in the work queue: the attempts as one JSON array, each payload
 * written in as the JSON text it is stored as (never parsed on the main thread), so the
 * thread parses the whole message once.
 */
export function encodeAttempts(attempts: readonly AttemptInput[]): string {
  let text = '[';
  for (const [index, input] of attempts.entries()) {
    if (index > 0) text += ',';
    text += `{"jobId":${JSON.stringify(input.jobId)},"type":${JSON.stringify(input.type)},"attempt":${input.attempt}`;
    text += `,"payload":${input.payloadText},"parents":${input.parents.length === 0 ? '[]' : JSON.stringify(input.parents)}`;
    if (input.traceparent !== undefined) {
      text += `,"traceparent":${JSON.stringify(input.traceparent)},"tracestate":${JSON.stringify(input.tracestate ?? null)}`;
    }
    text += '}';
  }
  return `${text}]`;
}

/** A message of one or more attempts, run in order in one thread. */
export interface ThreadTask {
  attempts: AttemptInput[];
  /** Its word in the pool's attempt slots (see slots.ts), and its text's place in the work queue. */
  slot: number;
}

/**
 * The one piscina task each thread runs for its whole life: take messages from the work
 * queue and answer them on `port`. `seat` says whether it is among the threads in use.
 */
export interface ThreadLoop {
  port: MessagePort;
  seat: number;
}

/**
 * What a thread says on its loop's port, none of it once per job; the main thread reads
 * the port when it drains.
 */
export type LoopMessage =
  /** First, so the pool knows which thread the port is. */
  | { kind: 'hello'; threadId: number }
  /** The thread takes nothing more and answers nothing (an isolated task waits for a fresh thread). */
  | { kind: 'retire'; retirement: Retirement }
  /** An answer too large for its slot's text (work-queue.ts), as encodeAnswer wrote it. */
  | { kind: 'answer'; slot: number; text: string }
  /** A running attempt's progress: posted before the attempt's answer is written, so a drain reads it first. */
  | Extract<ChannelMessage, { kind: 'progress' }>;

/**
 * A message's outcome, as JSON in its slot's text in the work queue (work-queue.ts), not
 * on the port: `retire` says the thread takes nothing more.
 */
export interface SlotAnswer {
  results: AttemptResult[];
  retire: Retirement | null;
}

// Taken when the module loads, before any handler runs in the thread: a handler may replace
// JSON.stringify or give every object a toJSON, and the answer must come through all the same.
const quote: (text: string) => string = JSON.stringify;

/** A number as JSON; one JSON has no word for (NaN, ±Infinity: a snooze asked badly) as its text. */
function numberText(value: number): string {
  return Number.isFinite(value) ? `${value}` : quote(`${value}`);
}

function errorText(error: AttemptError): string {
  return `{"name":${quote(`${error.name}`)},"message":${quote(`${error.message}`)},"retryable":${error.retryable === true}}`;
}

/**
 * The answer as the thread writes it: built field by field from strings, numbers and
 * booleans (what a handler did to the thread's objects cannot change it), read with
 * decodeAnswer.
 */
export function encodeAnswer(answer: SlotAnswer): string {
  let text = '{"results":[';
  for (let index = 0; index < answer.results.length; index++) {
    const result = answer.results[index] as AttemptResult;
    if (index > 0) text += ',';
    if (result.ok) text += `{"ok":true,"resultText":${quote(result.resultText)}`;
    else {
      text += `{"ok":false,"error":${errorText(result.error)}`;
      if (result.code !== undefined) text += `,"code":${quote(result.code)}`;
      if (result.code === 'snoozed') text += `,"snoozeMs":${numberText(result.snoozeMs)}`;
    }
    if (result.ms !== undefined) text += `,"ms":${numberText(result.ms)}`;
    text += '}';
  }
  text += '],"retire":';
  const retire = answer.retire;
  if (retire === null) return `${text}null}`;
  const culprit =
    retire.culprit === null
      ? 'null'
      : `{"jobId":${quote(retire.culprit.jobId)},"attempt":${numberText(retire.culprit.attempt)}}`;
  text += `{"reason":${quote(retire.reason)},"threadId":${numberText(retire.threadId)},"cause":${quote(`${retire.cause}`)}`;
  return `${text},"culprit":${culprit},"late":${retire.late === true}}}`;
}

/** The answer encodeAnswer wrote. */
export function decodeAnswer(text: string): SlotAnswer {
  const answer = JSON.parse(text) as SlotAnswer;
  for (const result of answer.results) {
    if (typeof result.ms === 'string') result.ms = Number(result.ms);
    if (!result.ok && result.code === 'snoozed' && typeof result.snoozeMs === 'string') {
      result.snoozeMs = Number(result.snoozeMs);
    }
  }
  return answer;
}

/** What the pool answers for a task: the attempts' results, or that the task was recalled before it started. */
export type TaskAnswer = AttemptResult[] | 'recalled';

/** Why a thread asks to be replaced: a crash it survived, its job count, or an isolated task. */
export type RetireReason = 'crashed' | 'recycled' | 'isolated';

/** A thread's request to be replaced; it starts nothing more once it has made it. */
export interface Retirement {
  reason: RetireReason;
  /** The thread's threadId, for the pool to terminate it. */
  threadId: number;
  /** What happened, for the log (the uncaught error, the job count). */
  cause: string;
  /** The attempt whose work raised the uncaught error, when known. */
  culprit: { jobId: string; attempt: number } | null;
  /** The culprit's outcome was answered before its error (it completed or failed first). */
  late: boolean;
}

export type ChannelMessage =
  | { kind: 'progress'; jobId: string; attempt: number; percent: number; message: string | null }
  /** Sent by the main thread just before it terminates a thread, so handlers that await see ctx.signal abort. */
  | { kind: 'abort'; jobId: string; reason: string }
  /** Sent by an idle thread that must be replaced (an uncaught error while it ran no message). */
  | { kind: 'retire'; retirement: Retirement };

/** The pool's workerData. */
export interface ThreadData {
  /** task name → file URL of the module whose default export is the task. */
  modules: Record<string, string>;
  channelName: string;
  /** The attempt slots' shared memory. */
  slots: SharedArrayBuffer;
  /** The work queue's shared memory (work-queue.ts). */
  queue: WorkQueueBuffers;
  /** How much lower than the process's other threads each worker thread runs (nice increment; 0: the same). */
  nice: number;
  /** Attempts a thread runs before it is replaced; null: no limit. */
  maxJobs: number | null;
  /** The largest JSON result, in UTF-8 bytes, a thread sends back. */
  maxResultBytes: number;
}
