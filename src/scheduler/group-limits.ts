import type { Dispatcher } from './dispatch/dispatcher.js';
import type { KilnMetrics } from './statistics/metrics.js';
import type { JobStore } from '../store/store.js';
import type { LimitOverride, TaskLimits } from '../contract/limits.js';
import { unavailable } from './errors.js';

/** A group as GET /v1/groups shows it. */
export interface GroupInfo {
  name: string;
  /** Set with PUT /v1/groups/{group}/limits; null when none is. */
  limits: TaskLimits | null;
  /** Running attempts of the group's jobs, in the whole store. */
  running: number;
  /** Queued jobs of the group. */
  queued: number;
}

/**
 * Group limits (PUT /v1/groups/{group}/limits): stored as task limit overrides are,
 * under their own kind, read at start and again when another server may have changed
 * them, and handed to dispatch, which holds them with the same limiter as task limits
 * (dispatch/task-limits.ts), keyed by group.
 */
export class GroupLimits {
  readonly #store: JobStore;
  readonly #dispatcher: Dispatcher;
  readonly #metrics: KilnMetrics;
  /** The limits as last read from the store. */
  #limits = new Map<string, TaskLimits>();
  /** Writes made here; a read of the store that began before one of them is stale. */
  #writes = 0;

  constructor(options: { store: JobStore; dispatcher: Dispatcher; metrics: KilnMetrics }) {
    this.#store = options.store;
    this.#dispatcher = options.dispatcher;
    this.#metrics = options.metrics;
  }

  async load(): Promise<void> {
    this.#replace(limitsOf(await this.#store.limitOverrides('group')));
  }

  /** Reads the limits again, and hands them to dispatch if another server changed them. */
  async reload(): Promise<void> {
    try {
      const writes = this.#writes;
      const limits = limitsOf(await this.#store.limitOverrides('group'));
      // A set() answered while this read was under way: the read may predate it.
      if (writes !== this.#writes) return;
      if (JSON.stringify([...limits]) === JSON.stringify([...this.#limits])) return;
      this.#replace(limits);
    } catch {
      // The store is away: the limits in force stay until it answers again.
    }
  }

  /** Every group with queued or running jobs or limits, by name. */
  async list(): Promise<GroupInfo[]> {
    const counts = await this.#store.groupCounts().catch(unavailable);
    const groups = new Map<string, GroupInfo>();
    for (const { group, queued, running } of counts) {
      groups.set(group, { name: group, limits: this.#limits.get(group) ?? null, running, queued });
    }
    for (const [name, limits] of this.#limits) {
      if (!groups.has(name)) groups.set(name, { name, limits, running: 0, queued: 0 });
    }
    return [...groups.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Set a group's limits (stored; null for a field: no such limit), or remove them (null). */
  async set(group: string, limits: TaskLimits | null): Promise<GroupInfo | null> {
    await this.#store.setLimitOverride(group, limits, 'group').catch(unavailable);
    this.#writes++;
    const next = new Map(this.#limits);
    if (limits === null) next.delete(group);
    else next.set(group, limits);
    this.#replace(next);
    if (limits === null) return null;
    return (await this.list()).find((info) => info.name === group) ?? { name: group, limits, running: 0, queued: 0 };
  }

  /** The limits in force become `limits`: dispatch gets them, and the metrics the groups' series. */
  #replace(limits: Map<string, TaskLimits>): void {
    for (const group of this.#limits.keys()) if (!limits.has(group)) this.#metrics.groupGone(group);
    for (const group of limits.keys()) if (!this.#limits.has(group)) this.#metrics.groupKnown(group);
    this.#limits = limits;
    this.#dispatcher.configureLimits('group', limits);
  }
}

/** Stored group limits: a field left out is no such limit. */
function limitsOf(stored: ReadonlyMap<string, LimitOverride>): Map<string, TaskLimits> {
  const limits = new Map<string, TaskLimits>();
  for (const [group, override] of [...stored].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    limits.set(group, { concurrency: override.concurrency ?? null, rateLimit: override.rateLimit ?? null });
  }
  return limits;
}
