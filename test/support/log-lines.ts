import type { FastifyBaseLogger } from 'fastify';
import pino from 'pino';

/** One JSON line pino wrote. */
export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export const LEVELS = { info: 30, warn: 40, error: 50 } as const;

export interface CapturedLog {
  /** A real pino logger whose lines land in `lines`. */
  logger: FastifyBaseLogger;
  lines: LogLine[];
  /** Resolves with the first line (already written or to come) that matches. */
  waitFor(match: (line: LogLine) => boolean, what: string, timeoutMs?: number): Promise<LogLine>;
}

/** A logger at `level` (the level LOG_LEVEL would give it) whose lines are kept. */
export function captureLog(level: pino.LevelWithSilent = 'info'): CapturedLog {
  const lines: LogLine[] = [];
  const waiters = new Set<{ match: (line: LogLine) => boolean; resolve: (line: LogLine) => void }>();
  const stream = {
    write(text: string) {
      const line = JSON.parse(text) as LogLine;
      lines.push(line);
      for (const waiter of waiters) {
        if (!waiter.match(line)) continue;
        waiters.delete(waiter);
        waiter.resolve(line);
      }
    },
  };
  const logger = pino({ level }, stream) as FastifyBaseLogger;
  return {
    logger,
    lines,
    waitFor(match, what, timeoutMs = 30_000) {
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
          reject(new Error(`timed out waiting for the log line: ${what}`));
        }, timeoutMs);
        waiters.add(waiter);
      });
    },
  };
}
