import type { ParentResult } from '../jobs/model.js';

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
}

export type AttemptResult =
  /** `resultText`: the result as JSON text, as it is stored. */
  ({ ok: true; resultText: string } | { ok: false; error: { name: string; message: string; retryable: boolean } }) & {
    /** How long the attempt took inside the thread, in milliseconds (the dispatcher learns job costs from it). */
    ms?: number;
  };

/** The message a pool task carries: one or more attempts, run in order in one thread. */
export interface ThreadTask {
  attempts: AttemptInput[];
  /** Its word in the pool's attempt slots (see slots.ts). */
  slot: number;
}

/** What a thread answers for a task: the attempts' results, or that the task was recalled before it started. */
export type TaskAnswer = AttemptResult[] | 'recalled';

export type ChannelMessage =
  | { kind: 'progress'; jobId: string; attempt: number; percent: number; message: string | null }
  /** Sent by the main thread just before it terminates a thread, so handlers that await see ctx.signal abort. */
  | { kind: 'abort'; jobId: string; reason: string };

/** The pool's workerData. */
export interface ThreadData {
  /** task name → file URL of the module whose default export is the task. */
  modules: Record<string, string>;
  channelName: string;
  /** The attempt slots' shared memory. */
  slots: SharedArrayBuffer;
  /** How much lower than the process's other threads each worker thread runs (nice increment; 0: the same). */
  nice: number;
}
