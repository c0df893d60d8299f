import { retryDelayMs } from './jobs/backoff.js';
import type { Backoff } from './contract/job.js';

/** The part of the process's logger (pino) a FaultLog writes to. */
export interface FaultLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Logs nothing: for a part built without a logger (tests). */
export const silentLog: FaultLogger = { info() {}, warn() {}, error() {} };

export interface FaultLogOptions {
  /** What fails, as log lines name it (their `fault` field): 'dispatch', 'heartbeat', … */
  what: string;
  /** The level of the start and change lines (default error); the end is info. */
  level?: 'warn' | 'error';
  /** The wait before the next try after n failures in a row (default FAULT_BACKOFF). */
  backoff?: Backoff;
  now?: () => number;
  random?: () => number;
}

/** 50 ms, doubling, at most 5 s: a store that is back is used again within seconds. */
export const FAULT_BACKOFF: Backoff = { initialMs: 50, factor: 2, maxMs: 5000, jitter: 'equal' };

/**
 * One retry loop's fault as the log tells it, and how long the loop waits before its
 * next try.
 *
 * States: healthy → failing (a cause) → healthy. The log gets one line when a fault
 * starts (with its cause), one when its cause changes, and one when it ends (info,
 * with how many failures it lasted and for how long); never one per retry, so a loop
 * that fails thousands of times a minute still writes three lines. `failed` answers the
 * wait before the next try (exponential with a cap); `succeeded` resets it.
 */
export class FaultLog {
  readonly #log: FaultLogger;
  readonly #options: FaultLogOptions;
  #failures = 0;
  #since = 0;
  #cause: string | null = null;

  constructor(log: FaultLogger, options: FaultLogOptions) {
    this.#log = log;
    this.#options = options;
  }

  /** Failures in a row so far (0 when healthy). */
  get failures(): number {
    return this.#failures;
  }

  /** One more failure; answers how long to wait before trying again. */
  failed(error: unknown): number {
    const { what, level = 'error', backoff = FAULT_BACKOFF, random } = this.#options;
    const cause = causeOf(error);
    this.#failures += 1;
    if (this.#failures === 1) {
      this.#since = this.#now();
      this.#log[level]({ fault: what, err: error }, `${what} failed; retrying`);
    } else if (cause !== this.#cause) {
      this.#log[level](
        { fault: what, err: error, failures: this.#failures },
        `${what} still failing, with another cause`,
      );
    }
    this.#cause = cause;
    return retryDelayMs(backoff, this.#failures, random);
  }

  /** The loop worked: a fault, if there was one, has ended. */
  succeeded(): void {
    if (this.#failures === 0) return;
    const durationMs = Math.max(0, this.#now() - this.#since);
    this.#log.info(
      { fault: this.#options.what, failures: this.#failures, durationMs },
      `${this.#options.what} works again`,
    );
    this.#failures = 0;
    this.#cause = null;
  }

  #now(): number {
    return (this.#options.now ?? Date.now)();
  }
}

/** What tells one cause from another: the error's code (a StoreError's, SQLite's, PostgreSQL's) and its message. */
function causeOf(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error as { code?: unknown }).code;
  return `${typeof code === 'string' ? code : error.name}: ${error.message}`;
}
