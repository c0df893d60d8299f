import type { ThreadEnd } from '../workers/pool.js';

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
