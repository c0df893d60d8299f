import { FaultLog, type FaultLogger } from '../../fault-log.js';
import type { ExpiredAttempt, JobStore } from '../../store/store.js';
import { decideExpired } from './retry-policy.js';

export interface RescuerOptions {
  store: JobStore;
  /** How often to look for expired leases. */
  intervalMs: number;
  random?: () => number;
  /** KILN_MAX_INTERRUPTIONS: the rescue that makes this many fails the job (retry-policy.ts). */
  maxInterruptions: number;
  /**
   * Runs before each pass: what this server holds is written first (its heartbeat, the
   * outcomes it kept while the store was away), so that it never rescues its own attempts.
   */
  before?: () => Promise<void>;
  /** Called after a pass that moved jobs (so dispatch can pick them up). */
  onRescued(count: number): void;
  log: FaultLogger;
}

/** Attempts taken from expired leases per store call. */
const BATCH = 500;

/**
 * Retries the attempts whose lease ran out (their server died or stalled): each becomes
 * `retrying` with error code `interrupted` after its backoff, or `failed` on its last
 * attempt, decided by the retry policy and written with a finish fenced on the lease
 * having expired (a heartbeat that renews it first wins). Each rescue that lands counts
 * an interruption on its job; the one that makes KILN_MAX_INTERRUPTIONS fails the job
 * (`too_many_interruptions`), logged here once with the servers it took down. Every store gets the same
 * rescuer; the SQLite store marks every lease dead at open, so after a crash the first
 * pass retries what was running.
 */
export class Rescuer {
  readonly #options: RescuerOptions;
  readonly #random: () => number;
  readonly #fault: FaultLog;
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<number> | null = null;

  constructor(options: RescuerOptions) {
    this.#options = options;
    this.#random = options.random ?? Math.random;
    this.#fault = new FaultLog(options.log, { what: 'rescuing expired leases' });
  }

  start(): void {
    if (this.#timer !== null) return;
    this.#timer = setInterval(() => void this.runOnce(), this.#options.intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** One pass; answers how many attempts it moved. */
  runOnce(): Promise<number> {
    this.#running ??= this.#pass().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  async #pass(): Promise<number> {
    const { store } = this.#options;
    let moved = 0;
    try {
      await this.#options.before?.();
      for (;;) {
        const expired = await store.expiredLeases(BATCH);
        if (expired.length === 0) break;
        const now = store.now();
        const items = expired.map((attempt) => ({
          id: attempt.id,
          attempt: attempt.attempt,
          owner: attempt.owner,
          outcome: decideExpired(attempt, now, this.#random, this.#options.maxInterruptions),
          expired: true,
        }));
        const finished = await store.finish(items);
        for (const [index, answer] of finished.entries()) {
          const rescued = expired[index];
          const outcome = items[index]?.outcome;
          if (answer === null || rescued === undefined || outcome?.kind !== 'failed') continue;
          // Logged once: only the rescue whose fenced finish landed gets here.
          if (outcome.error.code === 'too_many_interruptions') this.#stopped(rescued);
        }
        const count = finished.filter((answer) => answer !== null).length;
        moved += count;
        if (expired.length < BATCH || count === 0) break;
      }
      this.#fault.succeeded();
    } catch (error) {
      this.#fault.failed(error);
    }
    if (moved > 0) this.#options.onRescued(moved);
    return moved;
  }

  #stopped(rescued: ExpiredAttempt): void {
    const servers = [...rescued.interruptedBy, rescued.owner];
    this.#options.log.error(
      { job: rescued.id, type: rescued.type, interruptions: servers.length, servers },
      `job ${rescued.id} failed with too_many_interruptions: its attempts were running on ${servers.length} servers that stopped or stalled (${servers.join(', ')})`,
    );
  }
}
