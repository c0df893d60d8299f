import type { JobWire } from '../../core/rows.js';
import type { Snapshot } from '../protocol.js';
import { MAX_PRIORITY, MIN_PRIORITY, PRIORITY_LEVELS } from '../../../contract/job.js';
import TinyQueue from 'tinyqueue';
import { before as fairBefore, FairQueue, type GroupFilter } from './fair-queue.js';

/** Dead entries tolerated (beyond as many as live ones) before compaction. */
const COMPACT_SLACK = 1024;
/**
 * Bytes of job copies kept for ready jobs; beyond it a claim reads the job from the file.
 * 64 MiB holds the next ~90,000 small jobs, far more than threads take between two
 * inserts, and keeps a million pending jobs well under a GiB.
 */
const DEFAULT_RECORD_BUDGET = 64 * 1024 * 1024;
/** What a copy costs beyond its payload text: ~700 B of heap for a small job (memory benchmark, 100,000 pending). */
const RECORD_OVERHEAD = 700;

export interface IndexEntry {
  id: string;
  type: string;
  priority: number;
  group: string | null;
  readyAt: number;
  /** Its group's turn within its priority (round-robin across groups). */
  round: number;
  /** Place in line within its priority: the order jobs became queued (a claim given back goes before all). */
  seq: number;
}

/** Which types a claim may take now (task limits); null: any. */
export type TypeFilter = ((type: string) => boolean) | null;

interface DueState {
  runAt: number;
  type: string;
  priority: number;
  group: string | null;
}

/** A group's queued jobs at one priority: how many, and the round of its last. */
interface GroupTail {
  last: number;
  count: number;
}

/**
 * Which job is next, in memory, for the SQLite store (on the main thread; the file in
 * the store thread is the truth). Asking the file "which job is next" on every claim
 * means a sorted index scan per claim and a wait for the store thread; instead this
 * keeps, per priority, one fair queue of queued jobs per task type, and a min-heap of
 * runAt for scheduled and retrying jobs. A claim compares the heads of the queues of the
 * best priority that has jobs (O(types)), each found in O(log groups), and a due job is
 * found in O(log n) without polling. A queue per type is what lets a claim pass over a
 * type held back by its limit without walking that type's backlog: the held jobs stay
 * first of their type. A group held back by its limit is passed over the same way inside
 * each type's fair queue (FairQueue.peek), its jobs first of their group.
 *
 * Fair share: within a priority, groups take turns. A job that becomes queued gets its
 * group's next round (one after the group's last queued job), or, when its group has
 * none queued at that priority, the level's current round (the lowest round queued
 * there, 0 when the level is empty): a group that arrives late starts level with the
 * groups that are waiting, not behind their whole backlog. Order within a priority is
 * (round, seq), so 1,000 jobs of one group and then 10 of another alternate.
 *
 * Entries are deleted lazily: a job that leaves `queued` (or its runAt) stays in its
 * queue (or the heap) and is skipped when it reaches the front, because the maps
 * `#queued` and `#dueAt` say which entry is current.
 *
 * Copies: a ready job may carry its whole record (payload text, parents), so a claim
 * needs nothing from the store thread. The copies are bounded in bytes; a job without
 * one is read from the file when claimed.
 */
export class ReadyIndex {
  /** Per priority: task type → its queued jobs in line. */
  readonly #levels: Map<string, FairQueue<IndexEntry>>[] = [];
  /** Per priority: group → its queued jobs there. */
  readonly #tails: Map<string | null, GroupTail>[] = [];
  readonly #isLive = (entry: IndexEntry): boolean => this.#queued.get(entry.id) === entry;
  readonly #discarded = (): void => {
    this.#entries -= 1;
  };
  /** Current entries of queued jobs per priority (stale ones excluded). */
  readonly #levelSizes: number[] = [];
  #entries = 0;
  #backSeq = 0;
  #frontSeq = 0;
  #heap = new TinyQueue<DueEntry>([], byRunAt);
  readonly #queued = new Map<string, IndexEntry>();
  readonly #dueAt = new Map<string, DueState>();
  readonly #records = new Map<string, JobWire>();
  readonly #recordBudget: number;
  readonly #agingMs: number;
  #recordBytes = 0;

  /** `agingMs`: priority aging (StoreOptions.priorityAgingMs), 0 for none. */
  constructor(recordBudget = DEFAULT_RECORD_BUDGET, agingMs = 0) {
    this.#recordBudget = recordBudget;
    this.#agingMs = agingMs;
    for (let p = 0; p < PRIORITY_LEVELS; p++) {
      this.#levels.push(new Map());
      this.#tails.push(new Map());
      this.#levelSizes.push(0);
    }
  }

  get queued(): number {
    return this.#queued.size;
  }

  /** A job became queued; `front`: a claim given back, first in line again. */
  addQueued(
    id: string,
    type: string,
    priority: number,
    group: string | null,
    readyAt: number,
    record: JobWire | null,
    where: 'back' | 'front' = 'back',
  ): void {
    this.remove(id);
    // A claim given back, or a job that outranks every queued one (checked before it
    // joins), is the next claim's.
    const next = where === 'front' || priority > this.#highestQueued();
    this.#enqueue({ id, type, priority, group, readyAt, round: 0, seq: 0 }, where);
    if (record !== null) this.#keep(id, record, next);
  }

  /** A job became scheduled or retrying (ready at runAt). */
  addDue(
    id: string,
    type: string,
    priority: number,
    group: string | null,
    runAt: number,
    record: JobWire | null,
  ): void {
    this.remove(id);
    this.#dueAt.set(id, { runAt, type, priority, group });
    this.#heap.push({ runAt, id });
    if (record !== null) this.#keep(id, record);
  }

  /** The job is no longer ready or due (claimed elsewhere, cancelled, …); answers its copy, if any. */
  remove(id: string): JobWire | null {
    const queued = this.#queued.get(id);
    if (queued !== undefined) {
      this.#dequeued(queued);
      this.#compactFifos();
    } else if (this.#dueAt.delete(id) && this.#heap.length > 2 * this.#dueAt.size + COMPACT_SLACK) {
      this.#heap = new TinyQueue(
        this.#heap.data.filter((entry) => this.#dueAt.get(entry.id)?.runAt === entry.runAt),
        byRunAt,
      );
    }
    return this.#drop(id);
  }

  /** Due jobs (runAt ≤ now) become queued, in runAt order; answers them. */
  promoteDue(now: number): { id: string; runAt: number; priority: number }[] {
    const promoted: { id: string; runAt: number; priority: number }[] = [];
    for (;;) {
      const top = this.#heap.peek();
      if (top === undefined || top.runAt > now) return promoted;
      this.#heap.pop();
      const due = this.#dueAt.get(top.id);
      if (due === undefined || due.runAt !== top.runAt) continue;
      this.#dueAt.delete(top.id);
      this.#enqueue(
        { id: top.id, type: due.type, priority: due.priority, group: due.group, readyAt: now, round: 0, seq: 0 },
        'back',
      );
      promoted.push({ id: top.id, runAt: top.runAt, priority: due.priority });
    }
  }

  /**
   * The best queued job of a type `allowed` and a group `groups` let through, without
   * taking it. `held` hears of each type whose first job was passed over (it would have
   * been better), `heldGroup` of each such group.
   * With priority aging, `now` (the store's clock) ages the jobs: each level's first
   * job is its oldest, so comparing the levels' first jobs finds the best (O(levels)).
   */
  peek(
    allowed: TypeFilter = null,
    held?: (type: string) => void,
    now = 0,
    groups: GroupFilter = null,
    heldGroup?: (group: string) => void,
  ): IndexEntry | undefined {
    let passed: IndexEntry[] | undefined;
    let passedGroups: IndexEntry[] | undefined;
    const groupHeld = heldGroup === undefined ? undefined : (entry: IndexEntry) => (passedGroups ??= []).push(entry);
    let best: IndexEntry | undefined;
    let bestRank = -1;
    for (let priority = MAX_PRIORITY; priority >= MIN_PRIORITY; priority--) {
      if (this.#levelSizes[priority] === 0) continue;
      let first: IndexEntry | undefined;
      for (const queue of (this.#levels[priority] as Map<string, FairQueue<IndexEntry>>).values()) {
        const head = queue.peek(groups, groupHeld);
        if (head === undefined) continue;
        if (allowed !== null && !allowed(head.type)) {
          if (held !== undefined) (passed ??= []).push(head);
          continue;
        }
        if (first === undefined || fairBefore(head, first)) first = head;
      }
      if (first === undefined) continue;
      if (this.#agingMs === 0) {
        best = first;
        break;
      }
      const rank = this.#effective(first, now);
      if (best === undefined || rank > bestRank || (rank === bestRank && first.readyAt < best.readyAt)) {
        best = first;
        bestRank = rank;
      }
    }
    if (held !== undefined && passed !== undefined) {
      for (const entry of passed) if (best === undefined || this.#before(entry, best, now)) held(entry.type);
    }
    if (heldGroup !== undefined && passedGroups !== undefined) {
      for (const entry of passedGroups) {
        if (best === undefined || this.#before(entry, best, now)) heldGroup(entry.group as string);
      }
    }
    return best;
  }

  /** The priority a queued job has now, aging counted. */
  #effective(entry: IndexEntry, now: number): number {
    if (this.#agingMs === 0) return entry.priority;
    return Math.min(MAX_PRIORITY, entry.priority + Math.floor(Math.max(0, now - entry.readyAt) / this.#agingMs));
  }

  /** Whether `a` comes before `b` in claim order. */
  #before(a: IndexEntry, b: IndexEntry, now: number): boolean {
    const ra = this.#effective(a, now);
    const rb = this.#effective(b, now);
    if (ra !== rb) return ra > rb;
    if (this.#agingMs !== 0 && a.readyAt !== b.readyAt) return a.readyAt < b.readyAt;
    return a.priority === b.priority ? fairBefore(a, b) : a.priority > b.priority;
  }

  /** Takes the best queued job of a type `allowed` and a group `groups` let through, and its copy (null if none is kept). */
  take(
    allowed: TypeFilter = null,
    held?: (type: string) => void,
    now = 0,
    groups: GroupFilter = null,
    heldGroup?: (group: string) => void,
  ): { entry: IndexEntry; record: JobWire | null } | undefined {
    const entry = this.peek(allowed, held, now, groups, heldGroup);
    if (entry === undefined) return undefined;
    this.#levels[entry.priority]?.get(entry.type)?.shift(groups);
    this.#entries -= 1;
    this.#dequeued(entry);
    return { entry, record: this.#drop(entry.id) };
  }

  nextDueAt(): number | null {
    for (;;) {
      const top = this.#heap.peek();
      if (top === undefined) return null;
      if (this.#dueAt.get(top.id)?.runAt === top.runAt) return top.runAt;
      this.#heap.pop();
    }
  }

  oldestQueuedReadyAt(): number | null {
    // Each group's first job is its oldest: O(groups), for a scrape, never for a claim.
    let oldest: number | null = null;
    for (const level of this.#levels) {
      for (const queue of level.values()) {
        queue.forEachHead((head) => {
          if (oldest === null || head.readyAt < oldest) oldest = head.readyAt;
        });
      }
    }
    return oldest;
  }

  /** Everything from the file's snapshot, without copies; `skip` are jobs this process runs. */
  rebuild(snapshot: Snapshot, skip: (id: string) => boolean): void {
    for (const level of this.#levels) level.clear();
    for (const tails of this.#tails) tails.clear();
    this.#levelSizes.fill(0);
    this.#entries = 0;
    this.#heap = new TinyQueue<DueEntry>([], byRunAt);
    this.#queued.clear();
    this.#dueAt.clear();
    this.#records.clear();
    this.#recordBytes = 0;
    for (const entry of snapshot.queued) {
      if (skip(entry.id)) continue;
      this.#enqueue(
        {
          id: entry.id,
          type: entry.type,
          priority: entry.priority,
          group: entry.group,
          readyAt: entry.readyAt,
          round: 0,
          seq: 0,
        },
        'back',
      );
    }
    for (const entry of snapshot.due) {
      if (skip(entry.id)) continue;
      this.#dueAt.set(entry.id, { runAt: entry.runAt, type: entry.type, priority: entry.priority, group: entry.group });
      this.#heap.push({ runAt: entry.runAt, id: entry.id });
    }
  }

  /**
   * Keeps a copy within the budget; `next` (the job is first in line: given back, or it
   * outranks every queued job) keeps it past a full budget, so the claim that takes it
   * does not wait for the file, and nor does a better job behind that claim. Such copies
   * are few: the jobs of the messages given back, and one per priority above the rest.
   */
  #keep(id: string, record: JobWire, next = false): void {
    const bytes = (record.payloadText?.length ?? 0) + RECORD_OVERHEAD;
    if (this.#recordBudget === 0) return;
    if (this.#recordBytes + bytes > this.#recordBudget && !next) return;
    this.#records.set(id, record);
    this.#recordBytes += bytes;
  }

  #drop(id: string): JobWire | null {
    const record = this.#records.get(id);
    if (record === undefined) return null;
    this.#records.delete(id);
    this.#recordBytes -= (record.payloadText?.length ?? 0) + RECORD_OVERHEAD;
    return record;
  }

  #enqueue(entry: IndexEntry, where: 'back' | 'front'): void {
    const level = this.#levels[entry.priority] as Map<string, FairQueue<IndexEntry>>;
    const tails = this.#tails[entry.priority] as Map<string | null, GroupTail>;
    const tail = tails.get(entry.group);
    if (where === 'front') {
      // First in line again: the level's current round, before every job of it.
      entry.round = this.#currentRound(level);
      entry.seq = --this.#frontSeq;
    } else {
      entry.round = tail === undefined ? this.#currentRound(level) : tail.last + 1;
      entry.seq = ++this.#backSeq;
    }
    if (tail === undefined) tails.set(entry.group, { last: entry.round, count: 1 });
    else {
      tail.last = Math.max(tail.last, entry.round);
      tail.count += 1;
    }
    let queue = level.get(entry.type);
    if (queue === undefined) {
      queue = new FairQueue<IndexEntry>(this.#isLive, this.#discarded);
      level.set(entry.type, queue);
    }
    this.#queued.set(entry.id, entry);
    if (where === 'front') queue.unshift(entry);
    else queue.push(entry);
    this.#entries += 1;
    this.#levelSizes[entry.priority] = (this.#levelSizes[entry.priority] ?? 0) + 1;
  }

  /** The highest priority with queued jobs, −1 when none is queued. */
  #highestQueued(): number {
    for (let priority = MAX_PRIORITY; priority >= MIN_PRIORITY; priority--) {
      if (this.#levelSizes[priority] !== 0) return priority;
    }
    return -1;
  }

  /** The lowest round queued at a level (0 when it is empty): where a group without queued jobs starts. */
  #currentRound(level: Map<string, FairQueue<IndexEntry>>): number {
    let round: number | null = null;
    for (const queue of level.values()) {
      const head = queue.peek();
      if (head !== undefined && (round === null || head.round < round)) round = head.round;
    }
    return round ?? 0;
  }

  /** The entry no longer stands for a queued job (its queue entry, if still there, is stale). */
  #dequeued(entry: IndexEntry): void {
    this.#queued.delete(entry.id);
    this.#levelSizes[entry.priority] = (this.#levelSizes[entry.priority] ?? 1) - 1;
    const tails = this.#tails[entry.priority] as Map<string | null, GroupTail>;
    const tail = tails.get(entry.group);
    if (tail !== undefined && --tail.count === 0) tails.delete(entry.group);
  }

  #compactFifos(): void {
    if (this.#entries <= 2 * this.#queued.size + COMPACT_SLACK) return;
    let entries = 0;
    for (const level of this.#levels) {
      for (const [type, queue] of level) {
        const left = queue.compact();
        if (left === 0) level.delete(type);
        entries += left;
      }
    }
    this.#entries = entries;
  }
}

/** A scheduled or retrying job in the heap of due times. */
interface DueEntry {
  runAt: number;
  id: string;
}

/** The earliest due first; ties by id, so the order does not depend on the heap's history. */
function byRunAt(a: DueEntry, b: DueEntry): number {
  return a.runAt - b.runAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}
