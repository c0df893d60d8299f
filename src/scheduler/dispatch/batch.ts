import type { ClaimedJob } from '../../store/store.js';
import type { AttemptSpan, Tracing } from '../../tracing/tracing.js';
import type { AttemptInput } from '../../workers/protocol.js';
import { storedHeaders } from '../../tracing/trace-context.js';
import type { AttemptStarts } from './attempt-start.js';

export type AbortReason = 'timeout' | 'cancel' | 'shutdown' | 'lease_lost';

/** One message to one thread: one job, or a micro-batch of tiny ones. */
export interface Batch {
  jobs: ClaimedJob[];
  /** Its word in the pool's attempt slots: whether the thread has started it. */
  slot: number;
  /** Taken back before its thread started it: the jobs go back first in line. */
  recalled: boolean;
  /** The best priority in it (claims go best first: the first job's). */
  priority: number;
  abortReason: AbortReason | null;
  /** Jobs cancelled or whose lease was lost while the batch ran: their outcome is dropped. */
  dropped: Set<string>;
  timer: NodeJS.Timeout;
  /** When this process claimed its jobs (Date.now()): their leases run from then at least. */
  claimedAt: number;
  /** The attempts' spans, job by job (src/tracing/); null while tracing is off. */
  spans: AttemptSpan[] | null;
}

/** A message of `jobs` claimed now, in `slot`: its spans begun, and its one timer (the shortest timeout of its jobs) armed. */
export function newBatch(jobs: ClaimedJob[], slot: number, tracing: Tracing | null, starts: AttemptStarts): Batch {
  let timeoutMs = Number.POSITIVE_INFINITY;
  for (const job of jobs) timeoutMs = Math.min(timeoutMs, job.timeoutMs);
  const claimedAt = Date.now();
  const batch: Batch = {
    jobs,
    slot,
    claimedAt,
    spans: tracing === null ? null : jobs.map((job) => tracing.attempt(job, claimedAt)),
    recalled: false,
    priority: jobs[0]?.priority ?? 0,
    abortReason: null,
    dropped: new Set(),
    timer: starts.timeout(() => batch, timeoutMs, timeoutMs),
  };
  return batch;
}

/** Why a thread was stopped, for the log line of its end. */
const ABORT_CAUSES: Record<Exclude<AbortReason, 'timeout'>, string> = {
  cancel: 'its job was cancelled',
  shutdown: 'the server shut down before the attempt finished',
  lease_lost: "its job's lease was lost",
};

/** Why the batch's thread is stopped, for the log line of the thread's end. */
export function abortCause(batch: Batch, reason: AbortReason): string {
  return reason === 'timeout'
    ? `ran longer than its timeout of ${Math.min(...batch.jobs.map((job) => job.timeoutMs))} ms`
    : ABORT_CAUSES[reason];
}

/**
 * The message's attempts as its thread receives them. The handler's calls join the
 * attempt's trace: its span's context, or with tracing off the job's stored one.
 */
export function attemptInputs(batch: Batch): AttemptInput[] {
  return batch.jobs.map((job, index) => {
    const input: AttemptInput = {
      jobId: job.id,
      type: job.type,
      attempt: job.attempts,
      payloadText: job.payloadText,
      parents: job.parents,
    };
    const span = batch.spans?.[index];
    const headers =
      span === undefined ? storedHeaders(job.trace) : { traceparent: span.traceparent, tracestate: span.tracestate };
    if (headers !== null) {
      input.traceparent = headers.traceparent;
      input.tracestate = headers.tracestate;
    }
    return input;
  });
}
