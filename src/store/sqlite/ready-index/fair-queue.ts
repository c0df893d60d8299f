import { Deque } from './deque.js';
import TinyQueue from 'tinyqueue';

/** What a fair queue orders: a group's turn (`round`), then the place in line (`seq`). */
export interface FairEntry {
  group: string | null;
  round: number;
  seq: number;
}

/** Which groups a claim may take now (group limits); null: any. Jobs without a group are never held. */
export type GroupFilter = ((group: string) => boolean) | null;

interface GroupLine<E> {
  line: Deque<E>;
  /** The one heap item that speaks for this group now; other heap items of the group are stale. */
  inHeap: E | null;
}

/**
 * Ready jobs taken round-robin across groups, FIFO inside a group (API.md "group").
 *
 * Each group has a FIFO of its entries, in (round, seq) order because a group's later
 * jobs get later rounds. A min-heap holds one item per group — its first entry — so the
 * next job is the heap's top: O(log groups) per take, however long each group's line.
 *
 * Entries leave lazily: the owner says which entries are still current (`isLive`), a
 * stale one is dropped when it reaches the front of its line, and a heap item that no
 * longer is its group's `inHeap` is skipped when it reaches the top. `discarded` hears of
 * every stale entry dropped, so the owner can keep its count of stored entries.
 */
export class FairQueue<E extends FairEntry> {
  readonly #groups = new Map<string | null, GroupLine<E>>();
  #heap = new TinyQueue<E>([], inClaimOrder);
  readonly #isLive: (entry: E) => boolean;
  readonly #discarded: () => void;

  constructor(isLive: (entry: E) => boolean, discarded: () => void = () => {}) {
    this.#isLive = isLive;
    this.#discarded = discarded;
  }

  /** Groups that have entries (stale ones included until they are dropped). */
  get groups(): number {
    return this.#groups.size;
  }

  /** Appends to its group's line (its round is not before the group's last). */
  push(entry: E): void {
    const group = this.#line(entry.group);
    group.line.push(entry);
    if (group.inHeap === null) this.#represent(group, entry);
  }

  /** Puts an entry first in its group's line (a claim given back). */
  unshift(entry: E): void {
    const group = this.#line(entry.group);
    group.line.unshift(entry);
    if (group.inHeap === null || before(entry, group.inHeap)) this.#represent(group, entry);
  }

  /**
   * The next entry of a group `allowed` lets through (group limits), without taking it.
   * A held group is passed over by setting its one heap item aside: O(held groups ×
   * log groups), never a walk of its line. `held` hears of each held group's first entry.
   */
  peek(allowed: GroupFilter = null, held?: (entry: E) => void): E | undefined {
    if (allowed === null) return this.#top();
    const aside: E[] = [];
    const entry = this.#topAllowed(allowed, held, aside);
    for (const item of aside) this.#heap.push(item);
    return entry;
  }

  /** Takes the next entry of a group `allowed` lets through. */
  shift(allowed: GroupFilter = null): E | undefined {
    const aside: E[] = [];
    const entry = allowed === null ? this.#top() : this.#topAllowed(allowed, undefined, aside);
    if (entry !== undefined) {
      this.#heap.pop();
      const group = this.#groups.get(entry.group) as GroupLine<E>;
      group.line.shift();
      group.inHeap = null;
      const next = this.#liveHead(group);
      if (next === undefined) this.#groups.delete(entry.group);
      else this.#represent(group, next);
    }
    for (const item of aside) this.#heap.push(item);
    return entry;
  }

  /** The heap's top once it is a group's current first entry. */
  #top(): E | undefined {
    for (;;) {
      const top = this.#heap.peek();
      if (top === undefined) return undefined;
      const group = this.#groups.get(top.group);
      if (group === undefined || group.inHeap !== top) {
        this.#heap.pop();
        continue;
      }
      const head = this.#liveHead(group);
      if (head === top) return top;
      this.#heap.pop();
      group.inHeap = null;
      if (head === undefined) this.#groups.delete(top.group);
      else this.#represent(group, head);
    }
  }

  /** The top of an allowed group, the held groups' items popped into `aside` (the caller pushes them back). */
  #topAllowed(allowed: (group: string) => boolean, held: ((entry: E) => void) | undefined, aside: E[]): E | undefined {
    for (;;) {
      const top = this.#top();
      if (top === undefined || top.group === null || allowed(top.group)) return top;
      held?.(top);
      aside.push(this.#heap.pop() as E);
    }
  }

  /** Calls `visit` with each group's first current entry (its oldest). */
  forEachHead(visit: (entry: E) => void): void {
    for (const [key, group] of this.#groups) {
      const head = this.#liveHead(group);
      if (head === undefined) this.#groups.delete(key);
      else visit(head);
    }
  }

  /** Drops every stale entry and heap item; answers how many entries are left. */
  compact(): number {
    let left = 0;
    this.#heap = new TinyQueue<E>([], inClaimOrder);
    for (const [key, group] of this.#groups) {
      group.line.retain(this.#isLive);
      group.inHeap = null;
      if (group.line.size === 0) {
        this.#groups.delete(key);
        continue;
      }
      left += group.line.size;
      this.#represent(group, group.line.peek() as E);
    }
    return left;
  }

  #line(key: string | null): GroupLine<E> {
    let group = this.#groups.get(key);
    if (group === undefined) {
      group = { line: new Deque<E>(4), inHeap: null };
      this.#groups.set(key, group);
    }
    return group;
  }

  #represent(group: GroupLine<E>, entry: E): void {
    group.inHeap = entry;
    this.#heap.push(entry);
  }

  /** The first current entry of a group's line, dropping stale ones before it. */
  #liveHead(group: GroupLine<E>): E | undefined {
    for (;;) {
      const entry = group.line.peek();
      if (entry === undefined || this.#isLive(entry)) return entry;
      group.line.shift();
      this.#discarded();
    }
  }
}

/** Claim order inside one priority and type: the earlier round first, then the place in line. */
export function inClaimOrder(a: FairEntry, b: FairEntry): number {
  return a.round - b.round || a.seq - b.seq;
}

export function before(a: FairEntry, b: FairEntry): boolean {
  return inClaimOrder(a, b) < 0;
}
