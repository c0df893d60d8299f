import type { JobStore } from '../store/store.js';

export interface LeaseKeeperOptions {
  store: JobStore;
  owner: string;
  leaseMs: number;
  /** The ids of the jobs this process runs now. */
  running(): string[];
  /** The lease of this job is gone (another process may run it): stop the attempt. */
  lost(id: string): void;
  onError(message: string, error: unknown): void;
}

/**
 * Keeps this process's leases alive: one heartbeat for all running jobs every third
 * of a lease, from the main thread. If renewals keep failing until the leases would
 * be about to run out, the attempts are given up here first, so that no job runs under
 * a lease that the store (and every other server) already counts as dead.
 */
export class LeaseKeeper {
  readonly #options: LeaseKeeperOptions;
  #timer: NodeJS.Timeout | null = null;
  #renewedAt = 0;
  #beating = false;

  constructor(options: LeaseKeeperOptions) {
    this.#options = options;
  }

  start(): void {
    if (this.#timer !== null) return;
    this.#renewedAt = Date.now();
    this.#timer = setInterval(() => void this.beat(), Math.max(50, Math.floor(this.#options.leaseMs / 3)));
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** One heartbeat now. */
  async beat(): Promise<void> {
    if (this.#beating) return;
    this.#beating = true;
    const { store, owner, leaseMs } = this.#options;
    const started = Date.now();
    try {
      const lost = await store.heartbeat(owner, this.#options.running(), leaseMs);
      this.#renewedAt = started;
      for (const id of lost) this.#options.lost(id);
    } catch (error) {
      this.#options.onError('heartbeat failed', error);
      // Give up before the store would: at five sixths of a lease without a renewal.
      if (Date.now() - this.#renewedAt > (leaseMs * 5) / 6) {
        for (const id of this.#options.running()) this.#options.lost(id);
      }
    } finally {
      this.#beating = false;
    }
  }
}
