import { FaultLog, type FaultLogger } from '../fault-log.js';
import type { JobStore } from '../store/store.js';
import type { FinishedAnswers } from './finished-answers.js';

const RETENTION_INTERVAL_MS = 60_000;
/** Terminal jobs deleted per store call by the retention purge. */
const PURGE_CHUNK = 1000;

export interface RetentionOptions {
  store: JobStore;
  retainCompletedMs: number;
  /** For failed and cancelled jobs. */
  retainFailedMs: number;
  log: FaultLogger;
  /** Forgets what it kept once jobs are deleted. */
  answers: FinishedAnswers;
}

/** The retention purge: terminal jobs past their retention are deleted at start and every minute. */
export class Retention {
  readonly #options: RetentionOptions;
  readonly #fault: FaultLog;
  #timer: NodeJS.Timeout | null = null;

  constructor(options: RetentionOptions) {
    this.#options = options;
    this.#fault = new FaultLog(options.log, { what: 'retention purge' });
  }

  start(): void {
    if (this.#timer !== null) return;
    this.#timer = setInterval(() => void this.purgeExpired(), RETENTION_INTERVAL_MS);
    this.#timer.unref();
    void this.purgeExpired();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** Delete terminal jobs past their retention, a chunk per store call. */
  async purgeExpired(): Promise<number> {
    const plan = [
      ['completed', this.#options.retainCompletedMs],
      ['failed', this.#options.retainFailedMs],
      ['cancelled', this.#options.retainFailedMs],
    ] as const;
    let total = 0;
    try {
      for (const [status, ageMs] of plan) {
        for (;;) {
          const deleted = await this.#options.store.purge(status, ageMs, PURGE_CHUNK);
          if (deleted > 0) this.#options.answers.forgetAll();
          total += deleted;
          if (deleted < PURGE_CHUNK) break;
        }
      }
      this.#fault.succeeded();
    } catch (error) {
      // A purge the store did but could not answer (its thread died after the commit) deleted jobs too.
      this.#options.answers.forgetAll();
      this.#fault.failed(error);
    }
    return total;
  }
}
