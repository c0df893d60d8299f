import type { Job, JobStatus, Progress } from '../../contract/job.js';

/** What the store tells as it happens: changes, progress and the time each commit took. */
export interface EventsFacet {
  /**
   * Listen to every change and progress report; answers the function that unsubscribes.
   * `watching` tells a store shared by several servers which jobs someone here watches
   * (long polls, event streams): it reads those when another server changes them, so
   * their events carry the whole job; others arrive with their id and status only.
   */
  subscribe(listener: StoreListener, options?: SubscribeOptions): () => void;

  /** Report how long each commit of a write took, in seconds (kiln_store_commit_seconds). */
  observeCommits(observer: ((seconds: number) => void) | null): void;
}

/**
 * One change of one job. `job()` builds the whole job object only for a listener that
 * wants it (most changes have nobody watching).
 */
export type StoreEvent =
  /**
   * `remote`: another server made the change (it already counted it in its metrics and
   * stopped its own attempts); `job()` of a remote change is whole only for watched jobs.
   */
  | { kind: 'changed'; id: string; type: string; status: JobStatus; job: () => Job; remote?: boolean }
  | { kind: 'progress'; id: string; attempt: number; progress: Progress; job: () => Job }
  /** A claim of this process that the store could not keep (its transaction was lost): abandon the attempt. */
  | { kind: 'lost'; id: string; attempt: number }
  /** The store takes claims again (after a restart or a rebuild), or another server made jobs ready. */
  | { kind: 'ready' }
  /** Another server paused or resumed dispatch. */
  | { kind: 'paused'; paused: boolean }
  /** Callback deliveries were stored (by this server or, on a shared store, another). */
  | { kind: 'deliveries' };

export type StoreListener = (event: StoreEvent) => void;

export interface SubscribeOptions {
  watching?(id: string): boolean;
}
