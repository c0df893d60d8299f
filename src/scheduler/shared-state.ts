import { FaultLog, type FaultLogger } from '../fault-log.js';

/**
 * How often a server of a shared store reads again what other servers change (task limit
 * overrides, schedules) and the jobs watched here, in case a notification went missing.
 */
const SHARED_READ_MS = 1000;

export interface SharedStateOptions {
  log: FaultLogger;
  /** Reads again what other servers change: task limit overrides, group limits, schedules. */
  reload(): Promise<unknown>;
  /** Reads the watched jobs again and tells their watchers what they did not hear (JobEvents.sweep). */
  sweepWatched(): Promise<void>;
}

/**
 * What another server changed reaching this one without a notification: on a store shared
 * by several servers, once a second, the shared settings and the jobs long polls and
 * event streams watch here are read again; each read's faults are logged as they start and
 * end. A store of one process only sweeps the watched jobs, when its events ask for it.
 */
export class SharedStateReader {
  readonly #options: SharedStateOptions;
  readonly #sharedFault: FaultLog;
  readonly #sweepFault: FaultLog;
  #timer: NodeJS.Timeout | null = null;

  constructor(options: SharedStateOptions) {
    this.#options = options;
    this.#sharedFault = new FaultLog(options.log, { what: 'reading shared state' });
    this.#sweepFault = new FaultLog(options.log, { what: 'reading watched jobs' });
  }

  /** Reads it all again once a second from now on. */
  start(): void {
    if (this.#timer !== null) return;
    this.#timer = setInterval(() => {
      Promise.all([this.#options.reload(), this.#options.sweepWatched()]).then(
        () => this.#sharedFault.succeeded(),
        (error: unknown) => this.#sharedFault.failed(error),
      );
    }, SHARED_READ_MS);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** Reads the watched jobs again now. */
  sweep(): void {
    this.#options.sweepWatched().then(
      () => this.#sweepFault.succeeded(),
      (error: unknown) => this.#sweepFault.failed(error),
    );
  }
}
