import type { ThreadEnd } from '../workers/pool.js';
import type { FaultLogger } from '../fault-log.js';
import { readStoredTrace, traceLogFields } from '../tracing/trace-context.js';

export interface ThreadEndLine {
  level: 'info' | 'warn';
  fields: Record<string, unknown>;
  message: string;
}

/**
 * The one log line of a worker thread's end. A thread the pool retired on purpose
 * (recycled, isolated) or stopped (cancel, shutdown, lost lease) is routine; a crash,
 * the heap limit and a timeout are warnings, and a late crash names its job first.
 */
export function threadEndLine(end: ThreadEnd): ThreadEndLine {
  const fields = {
    reason: end.reason,
    cause: end.cause,
    attempts: end.attempts,
    ...(end.culprit === null ? {} : { culprit: end.culprit }),
  };
  if (end.reason === 'recycled' || end.reason === 'isolated' || end.reason === 'stopped') {
    return { level: 'info', fields, message: `worker thread replaced (${end.reason})` };
  }
  if (end.culprit?.late === true) {
    const { jobId, attempt } = end.culprit;
    return {
      level: 'warn',
      fields,
      message: `job ${jobId} (attempt ${attempt}) raised an uncaught error after its outcome was recorded; its worker thread was replaced`,
    };
  }
  return { level: 'warn', fields, message: `worker thread replaced (${end.reason})` };
}

/**
 * Writes the line of a thread's end. A line naming a job carries the job's trace, read
 * back first; should the store not answer, the line goes without it.
 */
export function logThreadEnd(
  end: ThreadEnd,
  log: FaultLogger,
  readJob: (id: string) => Promise<{ trace: string | null } | null>,
): void {
  const line = threadEndLine(end);
  const culprit = end.culprit?.jobId;
  if (culprit === undefined) {
    log[line.level](line.fields, line.message);
    return;
  }
  void readJob(culprit)
    .catch(() => null)
    .then((job) => {
      log[line.level]({ ...line.fields, ...traceLogFields(readStoredTrace(job?.trace ?? null)) }, line.message);
    });
}
