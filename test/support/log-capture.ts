import { Writable } from 'node:stream';
import type { FastifyBaseLogger } from 'fastify';
import { pino } from 'pino';

/** A log line as pino writes it: its level, message and fields. */
export type LogLine = Record<string, unknown> & { level: number; msg: string };

/**
 * A real pino logger whose JSON lines a test reads: `lines` holds every line so far, and
 * `next(match)` resolves with the first line (already written or still to come) that
 * `match` accepts, or rejects after `deadlineMs`.
 */
export function captureLog(level = 'info'): {
  logger: FastifyBaseLogger;
  lines: LogLine[];
  next(match: (line: LogLine) => boolean, deadlineMs?: number): Promise<LogLine>;
} {
  const lines: LogLine[] = [];
  const waiters = new Set<{ match: (line: LogLine) => boolean; resolve: (line: LogLine) => void }>();
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString('utf8').split('\n')) {
        if (text === '') continue;
        const line = JSON.parse(text) as LogLine;
        lines.push(line);
        for (const waiter of waiters) {
          if (!waiter.match(line)) continue;
          waiters.delete(waiter);
          waiter.resolve(line);
        }
      }
      done();
    },
  });
  const logger = pino({ level }, stream) as FastifyBaseLogger;
  return {
    logger,
    lines,
    next(match, deadlineMs = 30_000) {
      const seen = lines.find(match);
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const waiter = {
          match,
          resolve: (line: LogLine) => {
            clearTimeout(timer);
            resolve(line);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(new Error(`no log line matched within ${deadlineMs} ms`));
        }, deadlineMs);
        timer.unref();
        waiters.add(waiter);
      });
    },
  };
}
