import { MAX_PRIORITY, MIN_PRIORITY, PRIORITY_LEVELS } from '../../jobs/model.js';
import { Deque } from '../deque.js';
import { MinHeap } from '../min-heap.js';
import type { JobWire, Snapshot } from './protocol.js';

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
  readyAt: number;
}

interface DueState {
  runAt: number;
  type: string;
  priority: number;
}

/**
 * Which job is next, in memory, for the SQLite store (on the main thread; the file in
 * the store thread is the truth). Asking the file "which job is next" on every claim
 * means a sorted index scan per claim and a wait for the store thread; instead this
 * keeps one FIFO per priority of queued jobs and a min-heap of runAt for scheduled and
 * retrying jobs, so a claim pops in O(1) and a due job is found in O(log n) without
 * polling.
 *
 * Entries are deleted lazily: a job that leaves `queued` (or its runAt) stays in its
 * FIFO (or the heap) and is skipped when it reaches the front, because the maps
 * `#queuedAt` and `#dueAt` say which entry is current.
 *
 * Copies: a ready job may carry its whole record (payload text, parents), so a claim
 * needs nothing from the store thread. The copies are bounded in bytes; a job without
 * one is read from the file when claimed.
 */
export class ReadyIndex {
  readonly #fifos: Deque<IndexEntry>[] = [];
  readonly #heap = new MinHeap<{ runAt: number; id: string }>(
    (a, b) => a.runAt < b.runAt || (a.runAt === b.runAt && a.id < b.id),
  );
  readonly #queuedAt = new Map<string, number>();
  readonly #dueAt = new Map<string, DueState>();
  readonly #records = new Map<string, JobWire>();
  readonly #recordBudget: number;
  #recordBytes = 0;

  constructor(recordBudget = DEFAULT_RECORD_BUDGET) {
    this.#recordBudget = recordBudget;
    for (let p = 0; p < PRIORITY_LEVELS; p++) this.#fifos.push(new Deque<IndexEntry>(64));
  }

  get queued(): number {
    return this.#queuedAt.size;
  }

  /** A job became queued; `front`: a claim given back, first in line again. */
  addQueued(
    id: string,
    type: string,
    priority: number,
    readyAt: number,
    record: JobWire | null,
    where: 'back' | 'front' = 'back',
  ): void {
    this.remove(id);
    this.#queuedAt.set(id, readyAt);
    const entry = { id, type, priority, readyAt };
    if (where === 'front') this.#fifos[priority]?.unshift(entry);
    else this.#fifos[priority]?.push(entry);
    if (record !== null) this.#keep(id, record);
  }

  /** A job became scheduled or retrying (ready at runAt). */
  addDue(id: string, type: string, priority: number, runAt: number, record: JobWire | null): void {
    this.remove(id);
    this.#dueAt.set(id, { runAt, type, priority });
    this.#heap.push({ runAt, id });
    if (record !== null) this.#keep(id, record);
  }

  /** The job is no longer ready or due (claimed elsewhere, cancelled, …); answers its copy, if any. */
  remove(id: string): JobWire | null {
    if (this.#queuedAt.delete(id)) this.#compactFifos();
    else if (this.#dueAt.delete(id) && this.#heap.size > 2 * this.#dueAt.size + COMPACT_SLACK) {
      this.#heap.retain((entry) => this.#dueAt.get(entry.id)?.runAt === entry.runAt);
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
      this.#queuedAt.set(top.id, now);
      this.#fifos[due.priority]?.push({ id: top.id, type: due.type, priority: due.priority, readyAt: now });
      promoted.push({ id: top.id, runAt: top.runAt, priority: due.priority });
    }
  }

  /** The best queued job, without taking it. */
  peek(): IndexEntry | undefined {
    for (let priority = MAX_PRIORITY; priority >= MIN_PRIORITY; priority--) {
      const fifo = this.#fifos[priority] as Deque<IndexEntry>;
      for (;;) {
        const entry = fifo.peek();
        if (entry === undefined) break;
        if (this.#queuedAt.get(entry.id) === entry.readyAt) return entry;
        fifo.shift();
      }
    }
    return undefined;
  }

  /** Takes the best queued job and its copy (null if none is kept). */
  take(): { entry: IndexEntry; record: JobWire | null } | undefined {
    const entry = this.peek();
    if (entry === undefined) return undefined;
    (this.#fifos[entry.priority] as Deque<IndexEntry>).shift();
    this.#queuedAt.delete(entry.id);
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
    let oldest: number | null = null;
    for (const fifo of this.#fifos) {
      for (;;) {
        const head = fifo.peek();
        if (head === undefined) break;
        if (this.#queuedAt.get(head.id) === head.readyAt) {
          if (oldest === null || head.readyAt < oldest) oldest = head.readyAt;
          break;
        }
        fifo.shift();
      }
    }
    return oldest;
  }

  /** Everything from the file's snapshot, without copies; `skip` are jobs this process runs. */
  rebuild(snapshot: Snapshot, skip: (id: string) => boolean): void {
    for (const fifo of this.#fifos) fifo.clear();
    this.#heap.clear();
    this.#queuedAt.clear();
    this.#dueAt.clear();
    this.#records.clear();
    this.#recordBytes = 0;
    for (const entry of snapshot.queued) {
      if (skip(entry.id)) continue;
      this.#queuedAt.set(entry.id, entry.readyAt);
      this.#fifos[entry.priority]?.push({ ...entry });
    }
    for (const entry of snapshot.due) {
      if (skip(entry.id)) continue;
      this.#dueAt.set(entry.id, { runAt: entry.runAt, type: entry.type, priority: entry.priority });
      this.#heap.push({ runAt: entry.runAt, id: entry.id });
    }
  }

  #keep(id: string, record: JobWire): void {
    const bytes = (record.payloadText?.length ?? 0) + RECORD_OVERHEAD;
    if (this.#recordBytes + bytes > this.#recordBudget) return;
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

  #compactFifos(): void {
    let entries = 0;
    for (const fifo of this.#fifos) entries += fifo.size;
    if (entries <= 2 * this.#queuedAt.size + COMPACT_SLACK) return;
    for (const fifo of this.#fifos) fifo.retain((entry) => this.#queuedAt.get(entry.id) === entry.readyAt);
  }
}
