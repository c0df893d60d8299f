import type { ClaimRequest } from '../../store/store.js';

/** Attempts shorter than this (mean, inside the thread) are batched. */
export const TINY_JOB_MS = 0.5;
/** Weight of a new sample in a type's moving mean. */
const COST_WEIGHT = 0.2;
/** Samples before a type's mean is trusted. */
const MIN_SAMPLES = 3;

export interface MicroBatchOptions {
  /** Upper bound of one batch's expected run time (default 2 ms). */
  budgetMs?: number;
  /** Largest batch (default 100). */
  maxJobs?: number;
  /** Types whose mean attempt time is at most this are batched (default TINY_JOB_MS). */
  tinyMs?: number;
}

/**
 * Micro-batch sizing: learns each task type's mean attempt time from what threads
 * measure, and says which types are tiny enough to share one message to a thread.
 * Jobs given back by a batch that broke (timed out, lost its thread) run alone next.
 */
export class MicroBatching {
  readonly #costs = new Map<string, { meanMs: number; samples: number }>();
  /** Tiny types → their mean cost; what a claim request carries. */
  readonly #tiny = new Map<string, number>();
  readonly #solo = new Set<string>();
  readonly #budgetMs: number;
  readonly #maxJobs: number;
  readonly #tinyMs: number;

  constructor(options: MicroBatchOptions) {
    this.#budgetMs = options.budgetMs ?? 2;
    this.#maxJobs = options.maxJobs ?? 100;
    this.#tinyMs = options.tinyMs ?? TINY_JOB_MS;
  }

  /** What a claim needs to size batches; null when batching cannot apply. */
  request(): ClaimRequest['micro'] {
    if (this.#tiny.size === 0 || this.#maxJobs <= 1) return null;
    return { costs: this.#tiny, budgetMs: this.#budgetMs, maxJobs: this.#maxJobs, solo: this.#solo };
  }

  /** The mean attempt time of `type` in ms, or null until enough attempts have been measured. */
  meanMs(type: string): number | null {
    const cost = this.#costs.get(type);
    return cost === undefined || cost.samples < MIN_SAMPLES ? null : cost.meanMs;
  }

  /** One attempt of `type` took `ms` inside its thread. */
  learn(type: string, ms: number): void {
    let cost = this.#costs.get(type);
    if (cost === undefined) {
      cost = { meanMs: ms, samples: 1 };
      this.#costs.set(type, cost);
    } else {
      cost.meanMs += COST_WEIGHT * (ms - cost.meanMs);
      cost.samples += 1;
    }
    if (cost.samples >= MIN_SAMPLES && cost.meanMs <= this.#tinyMs) this.#tiny.set(type, Math.max(cost.meanMs, 0.001));
    else this.#tiny.delete(type);
  }

  /** The job must run alone next (its batch broke), or ran alone and is done with that. */
  setSolo(id: string, solo: boolean): void {
    if (solo) this.#solo.add(id);
    else this.#solo.delete(id);
  }
}
