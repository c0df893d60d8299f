import { FaultLog, type FaultLogger } from '../fault-log.js';
import type { JobStore } from '../store/store.js';

export interface LeaseKeeperOptions {
  store: JobStore;
  owner: string;
  leaseMs: number;
  /** The ids of the jobs this process runs now. */
  running(): string[];
  /** The lease of this job is gone (another process may run it): stop the attempt. */
  lost(id: string): void;
  /** The attempt this process runs of the job now, and when it claimed it (undefined: none). */
  held(id: string): { attempt: number; claimedAt: number } | undefined;
  log: FaultLogger;
}

/**
 * Keeps this process's leases alive: one heartbeat for all running jobs every third
 * of a lease, from the main thread. If renewals keep failing until the leases would
 * be about to run out, the attempts are given up here first, so that no job runs under
 * a lease that the store (and every other server) already counts as dead. A failing
 * heartbeat is not backed off: renewals have a deadline, and the interval already
 * bounds how often they are tried.
 */
export class LeaseKeeper {
  readonly #options: LeaseKeeperOptions;
  readonly #fault: FaultLog;
  #timer: NodeJS.Timeout | null = null;
  #renewedAt = 0;
  #beating = false;
  #again = false;

  constructor(options: LeaseKeeperOptions) {
    this.#options = options;
    this.#fault = new FaultLog(options.log, { what: 'heartbeat' });
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

  /** One heartbeat now (or right after the one in flight, which may have been sent before the caller's news). */
  async beat(): Promise<void> {
    // A heartbeat that hangs (a silent network) must not keep attempts alive either.
    this.#giveUpStale();
    if (this.#beating) {
      this.#again = true;
      return;
    }
    this.#beating = true;
    const { store, owner, leaseMs } = this.#options;
    const started = Date.now();
    const sent = this.#options.running();
    const attempts = new Map(sent.map((id) => [id, this.#options.held(id)?.attempt]));
    try {
      const lost = await store.heartbeat(owner, sent, leaseMs);
      this.#renewedAt = started;
      this.#fault.succeeded();
      for (const id of lost) {
        // Only the attempt the heartbeat asked about: the job may have been given back and
        // claimed again while it was on its way.
        if (this.#options.held(id)?.attempt === attempts.get(id)) this.#options.lost(id);
      }
    } catch (error) {
      this.#fault.failed(error);
      this.#giveUpStale();
    } finally {
      this.#beating = false;
      if (this.#again) {
        this.#again = false;
        void this.beat();
      }
    }
  }

  /**
   * Gives up, before the store would, every attempt whose lease was last renewed (or
   * taken) five sixths of a lease ago: no job runs here under a lease the other servers
   * may already count as dead.
   */
  #giveUpStale(): void {
    const limit = (this.#options.leaseMs * 5) / 6;
    const now = Date.now();
    for (const id of this.#options.running()) {
      const held = this.#options.held(id);
      if (held === undefined) continue;
      if (now - Math.max(this.#renewedAt, held.claimedAt) > limit) this.#options.lost(id);
    }
  }
}
