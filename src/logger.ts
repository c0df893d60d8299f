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
  if (!pretty) return pino({ level: config.logLevel }) as FastifyBaseLogger;
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
