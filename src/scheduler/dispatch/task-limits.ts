import type { LimitOverride } from '../../contract/limits.js';
import type { TaskLimits } from '../../contract/limits.js';

/** When a held type is only waiting to learn when an attempt started: look again this soon. */
const START_UNKNOWN_RECHECK_MS = 5;

/** The limits a type runs under: the module's, with the stored override's fields on top. */
export function effectiveLimits(declared: TaskLimits, override: LimitOverride | undefined): TaskLimits {
  if (override === undefined) return { concurrency: declared.concurrency, rateLimit: declared.rateLimit };
  return {
    concurrency: override.concurrency === undefined ? declared.concurrency : override.concurrency,
    rateLimit: override.rateLimit === undefined ? declared.rateLimit : override.rateLimit,
  };
}

export function isLimited(limits: TaskLimits): boolean {
  return limits.concurrency !== null || limits.rateLimit !== null;
}

interface TypeState {
  limits: TaskLimits;
  /** Attempts of the type this server holds: job id → when its thread started it (null: not yet). */
  running: Map<string, () => number | null>;
  /** Start times of ended attempts, oldest first, kept while they are inside the rate window. */
  starts: number[];
}

/** What a claim may take of each limited type now, and when a held type frees up. */
export interface Allowance {
  /** Limited types → how many more jobs a claim may take now. */
  left: Map<string, number>;
  /** Types held back now, each by the limit that holds it. */
  held: Map<string, 'concurrency' | 'rate'>;
  /** When a type held by its rate limit gets a token back (ms, Date.now clock); null: none is. */
  wakeAt: number | null;
}

/**
 * Task limits as one server enforces them (API.md "Task limits"), keyed by type; the
 * dispatcher keeps a second one keyed by group for group limits (API.md "Group limits"),
 * which count the same way. `concurrency` counts the attempts of the type this server holds (claimed and not ended, a look-ahead
 * included); `rateLimit` allows at most `max` attempts to start in any window of `perMs`.
 *
 * The rate window is counted on real start times, so that it holds for starts and not
 * only for claims: a claim at time c starts at some s ≥ c, so a new start cannot share a
 * window with a start at or before c − perMs. A claim is allowed while fewer than `max`
 * attempts started after c − perMs — counting every claimed attempt whose start is not
 * known yet as inside the window. A token therefore comes back `perMs` after the start
 * it paid for. Attempts given back unstarted (a recalled claim) pay nothing.
 */
export class TaskLimiter {
  readonly #types = new Map<string, TypeState>();
  readonly #clock: () => number;
  #changes = 0;

  constructor(clock: () => number = Date.now) {
    this.#clock = clock;
  }

  /** Sets the limits of every type at once; types left out run unlimited. */
  configure(limits: ReadonlyMap<string, TaskLimits>): void {
    this.#changes++;
    for (const [type, state] of this.#types) {
      const next = limits.get(type);
      if (next === undefined || !isLimited(next)) {
        if (state.running.size === 0) this.#types.delete(type);
        else state.limits = { concurrency: null, rateLimit: null };
      }
    }
    for (const [type, next] of limits) {
      if (!isLimited(next)) continue;
      const state = this.#types.get(type);
      if (state === undefined) this.#types.set(type, { limits: next, running: new Map(), starts: [] });
      else state.limits = next;
    }
  }

  /** The limits in force, for a store that applies them across servers. */
  limits(): Map<string, TaskLimits> {
    const limits = new Map<string, TaskLimits>();
    for (const [type, state] of this.#types) if (isLimited(state.limits)) limits.set(type, state.limits);
    return limits;
  }

  get active(): boolean {
    return this.#types.size > 0;
  }

  /** Counts every configure(): a claim that began under another count may predate its limits. */
  get changes(): number {
    return this.#changes;
  }

  /** The limits in force for `type`, or null when it runs unlimited. */
  limitsOf(type: string): TaskLimits | null {
    const state = this.#types.get(type);
    return state === undefined || !isLimited(state.limits) ? null : state.limits;
  }

  /** An attempt of `type` was claimed; `startedAt` tells when its thread started it, once it has. */
  claimed(type: string, id: string, startedAt: () => number | null): void {
    this.#types.get(type)?.running.set(id, startedAt);
  }

  /** The attempt ended (or was given back: `startedAt` null, and it pays no token). */
  ended(type: string, id: string, startedAt: number | null): void {
    const state = this.#types.get(type);
    if (state === undefined || !state.running.delete(id)) return;
    if (startedAt !== null && state.limits.rateLimit !== null) {
      // Kept in order: starts end in about the order they began.
      let at = state.starts.length;
      while (at > 0 && (state.starts[at - 1] as number) > startedAt) at--;
      state.starts.splice(at, 0, startedAt);
    }
    if (!isLimited(state.limits) && state.running.size === 0) this.#types.delete(type);
  }

  /** Attempts of `type` this server holds, and for a rate limit the tokens left now. */
  usage(type: string): { running: number; tokens: number | null } {
    const state = this.#types.get(type);
    if (state === undefined) return { running: 0, tokens: null };
    const { rateLimit } = state.limits;
    return {
      running: state.running.size,
      tokens: rateLimit === null ? null : Math.max(0, rateLimit.max - this.#inWindow(state, this.#clock()).count),
    };
  }

  allowance(): Allowance {
    const now = this.#clock();
    const left = new Map<string, number>();
    const held = new Map<string, 'concurrency' | 'rate'>();
    let wakeAt: number | null = null;
    for (const [type, state] of this.#types) {
      const { concurrency, rateLimit } = state.limits;
      if (concurrency === null && rateLimit === null) continue;
      let allowed = Number.POSITIVE_INFINITY;
      if (concurrency !== null) {
        allowed = concurrency - state.running.size;
        if (allowed <= 0) held.set(type, 'concurrency');
      }
      if (rateLimit !== null) {
        const window = this.#inWindow(state, now);
        const tokens = rateLimit.max - window.count;
        if (tokens <= 0 && allowed > 0) {
          held.set(type, 'rate');
          const at =
            window.oldestKnown === null ? now + START_UNKNOWN_RECHECK_MS : window.oldestKnown + rateLimit.perMs;
          wakeAt = wakeAt === null ? at : Math.min(wakeAt, at);
        }
        allowed = Math.min(allowed, tokens);
      }
      left.set(type, Math.max(0, allowed));
    }
    return { left, held, wakeAt };
  }

  /** Starts inside (now − perMs, now], unknown starts counted in; drops those that left the window. */
  #inWindow(state: TypeState, now: number): { count: number; oldestKnown: number | null } {
    const perMs = state.limits.rateLimit?.perMs ?? 0;
    const from = now - perMs;
    while (state.starts.length > 0 && (state.starts[0] as number) <= from) state.starts.shift();
    let count = state.starts.length;
    let oldestKnown = state.starts[0] ?? null;
    let unknown = false;
    for (const startedAt of state.running.values()) {
      const at = startedAt();
      if (at === null) {
        count++;
        unknown = true;
      } else if (at > from) {
        count++;
        if (oldestKnown === null || at < oldestKnown) oldestKnown = at;
      }
    }
    // While an unknown start fills the window, the answer may change as soon as it is known.
    if (unknown && oldestKnown !== null && count >= (state.limits.rateLimit?.max ?? 0)) {
      oldestKnown = Math.min(oldestKnown, now + START_UNKNOWN_RECHECK_MS - perMs);
    }
    return { count, oldestKnown };
  }
}

/**
 * The limits this server applies to its attempts: each job counts against its type's
 * limits and, when it has a group, against its group's (the same limiter, keyed by group).
 */
export class JobLimits {
  readonly byType: TaskLimiter;
  readonly byGroup: TaskLimiter;

  constructor(clock: () => number = Date.now) {
    this.byType = new TaskLimiter(clock);
    this.byGroup = new TaskLimiter(clock);
  }

  /** Jobs claimed into one message; `startedAt` tells when its thread started it, once it has. */
  claimed(jobs: readonly { id: string; type: string; group: string | null }[], startedAt: () => number | null): void {
    for (const job of jobs) {
      if (this.byType.active) this.byType.claimed(job.type, job.id, startedAt);
      if (this.byGroup.active && job.group !== null) this.byGroup.claimed(job.group, job.id, startedAt);
    }
  }

  /** Their attempts ended (`startedAt` null: given back unstarted, paying no token). */
  ended(jobs: readonly { id: string; type: string; group: string | null }[], startedAt: number | null): void {
    for (const job of jobs) {
      this.byType.ended(job.type, job.id, startedAt);
      if (job.group !== null) this.byGroup.ended(job.group, job.id, startedAt);
    }
  }

  /** Attempts of each group with limits running now (claimed ones not started included). */
  runningByGroup(): Map<string, number> {
    const running = new Map<string, number>();
    for (const group of this.byGroup.limits().keys()) running.set(group, this.byGroup.usage(group).running);
    return running;
  }
}
