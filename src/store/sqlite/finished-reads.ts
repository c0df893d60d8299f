import { isTerminal } from '../../contract/job.js';
import type { JobWire } from '../core/rows.js';

/** How many finished jobs' reads are kept. */
const KEPT = 10_000;

/**
 * The last reads of finished jobs, kept on the main thread so that a client polling a
 * finished job's status is answered without a round trip to the store thread. A finished
 * job changes only by a retry, a removal or the retention purge, all of which pass
 * through this process (the file has one process): each change forgets the job (`changed`),
 * a purge forgets them all. A read that was in flight while its job changed is not kept,
 * so a read older than the change can never be kept after it.
 */
export class FinishedReads {
  readonly #kept = new Map<string, JobWire>();
  /** Reads in flight by job: how many, and whether the job changed meanwhile. */
  readonly #reading = new Map<string, { n: number; changed: boolean }>();

  /** The kept read of a finished job, or undefined. */
  get(id: string): JobWire | undefined {
    const wire = this.#kept.get(id);
    if (wire !== undefined) {
      // Least recently read goes first: move it to the end.
      this.#kept.delete(id);
      this.#kept.set(id, wire);
    }
    return wire;
  }

  /** Reads `id` with `read`, keeping the answer if the job is finished and did not change meanwhile. */
  async read(id: string, read: () => Promise<JobWire | null>): Promise<JobWire | null> {
    const reading = this.#reading.get(id) ?? { n: 0, changed: false };
    reading.n += 1;
    this.#reading.set(id, reading);
    try {
      const wire = await read();
      if (wire !== null && isTerminal(wire.status) && !reading.changed) {
        this.#kept.set(id, wire);
        if (this.#kept.size > KEPT) this.#kept.delete(this.#kept.keys().next().value as string);
      }
      return wire;
    } finally {
      reading.n -= 1;
      if (reading.n === 0) this.#reading.delete(id);
    }
  }

  /** The job changed (or was removed): forget it, and any read of it in flight. */
  changed(id: string): void {
    this.#kept.delete(id);
    const reading = this.#reading.get(id);
    if (reading !== undefined) reading.changed = true;
  }

  /** Jobs were purged: forget every one. */
  clear(): void {
    this.#kept.clear();
    for (const reading of this.#reading.values()) reading.changed = true;
  }
}
