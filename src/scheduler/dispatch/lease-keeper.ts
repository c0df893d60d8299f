import { FaultLog, type FaultLogger } from '../../fault-log.js';
import type { JobStore } from '../../store/store.js';
import { StoreError } from '../../store/errors.js';

export interface LeaseKeeperOptions {
  store: JobStore;
  owner: string;
  leaseMs: number;
  /**
   * A shared store's node lease (KILN_NODE_LEASE_MS): a server not heard of for this long
   * is dead for the others, who take its attempts over. Null: the store is this process's
   * alone, and only job leases count.
   */
  nodeLeaseMs?: number | null;
  /** The ids of the jobs this process runs now. */
  running(): string[];
  /** The lease of this job is gone (another process may run it): stop the attempt. */
  lost(id: string): void;
  /** The attempt this process runs of the job now, and when it claimed it (undefined: none). */
  held(id: string): { attempt: number; claimedAt: number } | undefined;
  log: FaultLogger;
}

/**
 * Keeps this process's leases alive from the main thread. On a shared store there are
 * two: the node lease (this server's row; one short statement a beat, whatever the
 * number of running jobs) and the job leases (one write per running job), renewed as
 * rarely as a third of a job lease. A beat every third of the shorter lease carries the
 * running jobs' ids only when their renewal is due; the others beat the node alone. If
 * beats keep failing until either lease would be about to run out, the attempts are
 * given up here first, so that no job runs under a lease that the store (and every
 * other server) already counts as dead.
 * A failing heartbeat is not backed off: renewals have a deadline, and the interval
 * already bounds how often they are tried.
 */
export class LeaseKeeper {
  readonly #options: LeaseKeeperOptions;
  readonly #fault: FaultLog;
  #timer: NodeJS.Timeout | null = null;
  /** When the job leases were last renewed (a beat that carried the running ids). */
  #renewedAt = 0;
  /** When the store last heard of this node (any beat). */
  #seenAt = 0;
  #beating = false;
  #again: 'all' | 'node' | null = null;
  /** The last beat failed: the store has not heard of this server since. */
  #behind = false;
  /** When this server last saw the database itself down: no lease counts the time before. */
  #downSeenAt = 0;

  constructor(options: LeaseKeeperOptions) {
    this.#options = options;
    this.#fault = new FaultLog(options.log, { what: 'heartbeat' });
  }

  start(): void {
    if (this.#timer !== null) return;
    this.#renewedAt = Date.now();
    this.#seenAt = Date.now();
    const { leaseMs, nodeLeaseMs } = this.#options;
    const period = Math.max(50, Math.floor(Math.min(leaseMs, nodeLeaseMs ?? leaseMs) / 3));
    this.#timer = setInterval(() => {
      // Job leases are renewed every third of a job lease (give or take half a beat).
      const due = Date.now() - this.#renewedAt >= Math.floor(leaseMs / 3) - period / 2;
      void this.beat(due ? 'all' : 'node');
    }, period);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /**
   * One heartbeat now (or right after the one in flight, which may have been sent before
   * the caller's news): `all` renews the running jobs' leases and answers which are lost,
   * `node` tells the store this server is alive.
   */
  async beat(scope: 'all' | 'node' = 'all'): Promise<void> {
    // A heartbeat that hangs (a silent network) must not keep attempts alive either.
    this.#giveUpStale();
    if (this.#beating) {
      if (this.#again !== 'all') this.#again = scope;
      return;
    }
    this.#beating = true;
    const { store, owner, leaseMs } = this.#options;
    const started = Date.now();
    const sent = scope === 'all' ? this.#options.running() : [];
    const attempts = new Map(sent.map((id) => [id, this.#options.held(id)?.attempt]));
    try {
      const lost = await store.heartbeat(owner, sent, leaseMs);
      this.#behind = false;
      this.#seenAt = started;
      if (scope === 'all') this.#renewedAt = started;
      this.#fault.succeeded();
      for (const id of lost) {
        // Only the attempt the heartbeat asked about: the job may have been given back and
        // claimed again while it was on its way.
        if (this.#options.held(id)?.attempt === attempts.get(id)) this.#options.lost(id);
      }
    } catch (error) {
      this.#behind = true;
      this.#fault.failed(error);
      this.#giveUpStale();
    } finally {
      this.#beating = false;
      const again = this.#again;
      if (again !== null) {
        this.#again = null;
        void this.beat(again);
      }
    }
  }

  /** Whether the last beat failed (the store has not heard of this server since). */
  get behind(): boolean {
    return this.#behind;
  }

  /**
   * After beats failed: one that renews every lease this server holds, now, before it
   * claims or rescues anything; rejects if the store has still not heard of it.
   */
  async catchUp(): Promise<void> {
    if (!this.#behind) return;
    await this.beat('all');
    if (this.#behind) throw new StoreError('store_unavailable', 'the heartbeat of this server has not landed yet');
  }

  /**
   * Gives up, before the store would, every attempt whose job lease was last renewed (or
   * taken) five sixths of a job lease ago, and every attempt when this node was last heard
   * of five sixths of a node lease ago: no job runs here under a lease the other servers
   * may already count as dead. Time while the database itself is down (it refuses
   * connections, or is starting or shutting down) counts against neither lease: no server
   * can take the attempts over then, and the database counts no lease before its return
   * (postgres-store.md, "Leases and rescue"), so both leases count here from the last time
   * this server saw it down; the attempts run on and their outcomes are written when it
   * returns.
   */
  #giveUpStale(): void {
    const { leaseMs, nodeLeaseMs, store } = this.#options;
    const now = Date.now();
    if (store.databaseDown === true) this.#downSeenAt = now;
    for (const id of this.#options.running()) {
      const held = this.#options.held(id);
      if (held === undefined) continue;
      const since = Math.max(held.claimedAt, this.#downSeenAt);
      const jobStale = now - Math.max(this.#renewedAt, since) > (leaseMs * 5) / 6;
      const nodeStale =
        nodeLeaseMs !== undefined &&
        nodeLeaseMs !== null &&
        now - Math.max(this.#seenAt, since) > (nodeLeaseMs * 5) / 6;
      if (jobStale || nodeStale) this.#options.lost(id);
    }
  }
}
