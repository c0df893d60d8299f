import type { FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import pinoPretty from 'pino-pretty';
import type { Config } from './config.js';

/**
 * The process's logger: JSON lines (pino) for machines, or one readable line per entry
 * on a terminal. `LOG_FORMAT=auto` picks by whether stdout is a terminal, so a piped or
 * collected log stays JSON.
 */
export function createLogger(
  config: Pick<Config, 'logLevel' | 'logFormat'>,
  isTerminal: boolean = process.stdout.isTTY === true,
): FastifyBaseLogger {
  const pretty = config.logFormat === 'pretty' || (config.logFormat === 'auto' && isTerminal);
  if (!pretty) return pino({ level: config.logLevel }, standardOutput()) as FastifyBaseLogger;
  const stream = pinoPretty({
    colorize: isTerminal,
    singleLine: true,
    translateTime: 'SYS:HH:MM:ss.l',
    // The request line says all of `http` in its message already.
    ignore: 'pid,hostname,reqId,http',
    // Synchronous, so a line written just before an exit is not lost.
    sync: true,
  });
  return pino({ level: config.logLevel }, stream) as FastifyBaseLogger;
}

/**
 * Standard output as pino writes it by default (asynchronous, flushed at exit), except
 * that a write it cannot make (the disk under a log file full, a pipe gone) drops lines
 * instead of ending the process: pino's own stream re-emits such errors, and an 'error'
 * nobody listens to is thrown. The lines are lost; writing resumes once the output takes
 * them again.
 */
function standardOutput(): pino.DestinationStream {
  const stream = pino.destination({ dest: 1, sync: false });
  stream.on('error', () => {
    // Nowhere to say it: the log is what failed.
  });
  return stream;
}
