import type { Job, JobStatus, Progress } from '../../contract/job.js';
import type { JobWire } from '../core/rows.js';
import type { SqliteStoreOptions } from './store.js';
import type { StoreListener } from '../store.js';
import { ReadyIndex } from './ready-index/ready-index.js';
import { type Claim, StoreThreadClient } from './thread-client.js';

/** A job this process runs: the copy a finish is built from, and its latest progress. */
export interface Running {
  wire: JobWire;
  owner: string;
  /** startedAt before this claim: what a released claim goes back to. */
  previousStart: number | null;
}

/**
 * What the main thread keeps of the SQLite store, which its operations (claim from the
 * index, attempts' outcomes, changes applied) share: the ready index, the jobs this
 * process runs, the store thread's client, the listeners and the clock.
 */
export class MainSide {
  readonly index: ReadyIndex;
  readonly running = new Map<string, Running>();
  readonly listeners = new Set<StoreListener>();
  readonly clock: () => number;
  readonly capacity: number;
  readonly thread: StoreThreadClient;

  constructor(path: string, options: SqliteStoreOptions) {
    this.index = new ReadyIndex(options.recordBudget, options.priorityAgingMs ?? 0);
    this.clock = options.clock ?? Date.now;
    this.capacity = options.capacity;
    this.thread = new StoreThreadClient(path, options, {
      rebuild: (snapshot) => this.index.rebuild(snapshot, (id) => this.running.has(id)),
      ready: () => this.emitReady(),
      lost: (claims) => this.lost(claims),
      deliveries: () => this.emitDeliveries(),
    });
  }

  /** The copy of this attempt, if this process runs it. */
  held(id: string, owner: string, attempt: number): Running | null {
    const running = this.running.get(id);
    return running !== undefined && running.owner === owner && running.wire.attempts === attempt ? running : null;
  }

  emit(id: string, type: string, status: JobStatus, job: () => Job): void {
    for (const listener of this.listeners) listener({ kind: 'changed', id, type, status, job });
  }

  emitProgress(id: string, attempt: number, progress: Progress, job: () => Job): void {
    for (const listener of this.listeners) listener({ kind: 'progress', id, attempt, progress, job });
  }

  emitReady(): void {
    for (const listener of this.listeners) listener({ kind: 'ready' });
  }

  emitDeliveries(): void {
    for (const listener of this.listeners) listener({ kind: 'deliveries' });
  }

  /** Claims that were not stored: their attempts are abandoned. */
  lost(claims: readonly Claim[]): void {
    for (const { id, attempt } of claims) {
      const running = this.running.get(id);
      if (running === undefined || running.wire.attempts !== attempt) continue;
      this.running.delete(id);
      for (const listener of this.listeners) listener({ kind: 'lost', id, attempt });
    }
  }
}
