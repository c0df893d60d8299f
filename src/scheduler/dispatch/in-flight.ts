import type { Batch } from './batch.js';

/**
 * The messages a dispatcher has handed to the pool and not yet settled, found by their
 * attempt slot and by their jobs. A recalled message keeps its place here (and its slot)
 * until its thread skips it, but holds no job and counts for no thread's work.
 */
export class InFlight implements Iterable<Batch> {
  readonly #batches = new Set<Batch>();
  /** attempt slot → the batch published in it. */
  readonly #bySlot = new Map<number, Batch>();
  /** job id → the batch it runs in. */
  readonly #byJob = new Map<string, Batch>();
  #recalled = 0;
  #idleWaiters: Array<() => void> = [];

  [Symbol.iterator](): Iterator<Batch> {
    return this.#batches[Symbol.iterator]();
  }

  /** Messages in flight, recalled ones aside. */
  get held(): number {
    return this.#batches.size - this.#recalled;
  }

  has(batch: Batch): boolean {
    return this.#batches.has(batch);
  }

  ofJob(id: string): Batch | undefined {
    return this.#byJob.get(id);
  }

  /** The messages published in these slots (those still here). */
  ofSlots(slots: readonly number[]): Batch[] {
    const batches: Batch[] = [];
    for (const slot of slots) {
      const batch = this.#bySlot.get(slot);
      if (batch !== undefined) batches.push(batch);
    }
    return batches;
  }

  /** The attempt of job `id` in flight here, and when it was claimed. */
  attemptOf(id: string): { attempt: number; claimedAt: number } | undefined {
    const batch = this.#byJob.get(id);
    const job = batch?.jobs.find((j) => j.id === id);
    return batch === undefined || job === undefined ? undefined : { attempt: job.attempts, claimedAt: batch.claimedAt };
  }

  /** The jobs of every message in flight. */
  jobIds(): IterableIterator<string> {
    return this.#byJob.keys();
  }

  add(batch: Batch): void {
    this.#batches.add(batch);
    this.#bySlot.set(batch.slot, batch);
    for (const job of batch.jobs) this.#byJob.set(job.id, batch);
  }

  /** The message was taken back before its thread started it (its jobs: forgetJobs). */
  recalled(batch: Batch): void {
    batch.recalled = true;
    this.#recalled += 1;
  }

  /** Its jobs are no longer this message's (given back, or settled). */
  forgetJobs(batch: Batch): void {
    for (const job of batch.jobs) {
      if (this.#byJob.get(job.id) === batch) this.#byJob.delete(job.id);
    }
  }

  /** The message settled: gone, and whoever waits for nothing held is told when that comes. */
  remove(batch: Batch): void {
    if (this.#bySlot.get(batch.slot) === batch) this.#bySlot.delete(batch.slot);
    this.#batches.delete(batch);
    if (batch.recalled) this.#recalled -= 1;
    this.forgetJobs(batch);
    if (this.held === 0) for (const resolve of this.#idleWaiters.splice(0)) resolve();
  }

  /** Resolves once no message is held (recalled ones aside). */
  whenIdle(): Promise<void> {
    if (this.held === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }
}
