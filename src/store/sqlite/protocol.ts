import type { UnstartedCount } from '../core/rows.js';
import type { Backoff, JobError, JobStatus, ParentResult } from '../../contract/job.js';
import type {
  DeliveryAttempt,
  GroupCount,
  ExpiredAttempt,
  InvalidState,
  ListFilter,
  Page,
  ScheduleFire,
  StartedAttempt,
} from '../store.js';
import type { DeliveryLease, JobWire } from '../core/rows.js';
import type { DeliveryRow } from '../core/delivery-records.js';
import type { QueueCounts } from '../../contract/queue.js';
import type { Schedule } from '../../contract/schedule.js';
import type { Batch, NewBatch } from '../../contract/batch.js';
import type { ScheduleDefinition } from '../../contract/schedule.js';

/**
 * What crosses between the main thread and the store thread. The main thread sends
 * one message per event-loop turn holding every operation of that turn; the store
 * thread runs all the messages that wait for it in one transaction (group commit) and
 * answers each message once that transaction is durable. Payloads and results cross
 * as JSON text, which is copied, not walked.
 */

export interface InsertRow {
  id: string;
  type: string;
  priority: number;
  payloadText: string;
  /** Canonical JSON of the payload, for comparing idempotency replays; null without a key. */
  canonicalPayload: string | null;
  maxAttempts: number;
  timeoutMs: number;
  backoff: Backoff;
  idempotencyKey: string | null;
  dependsOn: string[];
  metadataText: string;
  runAt: number | null;
  createdAt: number;
  dedupeKey: string | null;
  reuseMs: number | null;
  group: string | null;
  schedule: string | null;
  callbackText: string | null;
  batch: string | null;
  trace: string | null;
}

/** What the store decided for one created job; the caller already knows the rest. */
export interface CreatedState {
  status: JobStatus;
  error: JobError | null;
  runAt: number | null;
  readyAt: number | null;
  finishedAt: number | null;
  dependsOn: string[];
  parents: ParentResult[] | null;
}

export type InsertAnswer =
  | {
      ok: true;
      outcomes: (
        { created: true; state: CreatedState } | { created: false; job: JobWire; dedupe?: 'inflight' | 'result' }
      )[];
    }
  | { ok: false; reason: 'queue_full'; pending: number; capacity: number }
  | { ok: false; reason: 'idempotency_conflict'; index: number; existingId: string }
  | { ok: false; reason: 'unknown_dependency'; index: number; dependency: string };

export type OutcomeRow =
  | { kind: 'completed'; resultText: string; progressText: string | null }
  | { kind: 'failed'; errorText: string; retryAt: number | null }
  | { kind: 'released'; errorText: string; retryAt: number }
  | { kind: 'snoozed'; runAt: number }
  | { kind: 'unstarted' };

export interface FinishRow {
  id: string;
  attempt: number;
  owner: string;
  outcome: OutcomeRow;
  expired: boolean;
  /** When the attempt really started (a claimed job starts when a thread is free); null keeps the claim time. */
  startedAt: number | null;
  /** The main thread has no copy of this job: answer it whole. */
  wantJob: boolean;
}

export interface FinishAnswer {
  status: JobStatus;
  retryAt: number | null;
  /** The job as it is now, when asked for. */
  job: JobWire | null;
  /** Dependents released (with parents) or failed. */
  others: JobWire[];
}

export interface ChangesWire {
  job: JobWire;
  others: JobWire[];
}

export interface ReadyEntry {
  id: string;
  type: string;
  priority: number;
  group: string | null;
  readyAt: number;
}

export interface DueEntry {
  id: string;
  type: string;
  priority: number;
  group: string | null;
  runAt: number;
}

/** The ready and due jobs, to (re)build the main thread's index. */
export interface Snapshot {
  queued: ReadyEntry[];
  due: DueEntry[];
}

export type Op =
  | { op: 'insert'; rows: InsertRow[]; now: number; capacity: number; batch: NewBatch | null }
  | { op: 'claim'; ids: string[]; priorities: number[]; owner: string; expiresAt: number; now: number }
  | {
      op: 'unclaim';
      rows: { id: string; attempt: number; owner: string; priority: number; startedAt: number | null }[];
    }
  | { op: 'claimRead'; ids: string[]; priorities: number[]; owner: string; expiresAt: number; now: number }
  | { op: 'promote'; items: { id: string; runAt: number }[]; now: number }
  | { op: 'heartbeat'; owner: string; ids: string[]; expiresAt: number }
  | { op: 'started'; rows: StartedAttempt[] }
  | { op: 'finish'; rows: FinishRow[]; now: number }
  | { op: 'cancel'; id: string; now: number }
  | { op: 'retry'; id: string; now: number }
  | { op: 'remove'; id: string }
  | { op: 'get'; id: string }
  | { op: 'list'; filter: ListFilter }
  | { op: 'counts' }
  | { op: 'groupCounts' }
  | { op: 'paused' }
  | { op: 'setPaused'; paused: boolean }
  | { op: 'settings'; prefix: string }
  | { op: 'putSetting'; key: string; value: string | null }
  | { op: 'expired'; now: number; limit: number }
  | { op: 'purge'; status: JobStatus; olderThan: number; limit: number }
  | { op: 'snapshot' }
  | { op: 'schedules' }
  | { op: 'getSchedule'; name: string }
  | { op: 'putSchedule'; schedule: ScheduleDefinition }
  | { op: 'removeSchedule'; name: string }
  | { op: 'fireSchedule'; fire: Omit<ScheduleFire, 'job'>; row: InsertRow | null; now: number; capacity: number }
  | { op: 'claimDeliveries'; owner: string; expiresAt: number; now: number; limit: number }
  | { op: 'recordDelivery'; attempt: DeliveryAttempt; now: number }
  | { op: 'nextDelivery' }
  | { op: 'deliveries'; jobId: string }
  | { op: 'batch'; id: string };

/** A delivery leased by claimDeliveries; `job` is read for a first attempt. */
export interface DueDeliveryWire extends DeliveryLease {
  job: JobWire | null;
  batch: Batch | null;
}

/** Operations that only read: a request of these alone runs without a transaction. */
export const READ_OPS: ReadonlySet<Op['op']> = new Set<Op['op']>([
  'get',
  'list',
  'counts',
  'groupCounts',
  'paused',
  'settings',
  'expired',
  'snapshot',
  'schedules',
  'getSchedule',
  'nextDelivery',
  'deliveries',
  'batch',
]);

/** The answer of each op, by op name. */
export interface Answers {
  insert: InsertAnswer;
  claim: string[];
  claimRead: (JobWire | null)[];
  unclaim: number;
  promote: null;
  heartbeat: string[];
  started: null;
  finish: (FinishAnswer | null)[];
  cancel: ChangesWire | InvalidState | null;
  retry: ChangesWire | InvalidState | null;
  remove: { removed: true; status: JobStatus } | InvalidState | null;
  get: JobWire | null;
  list: Page;
  /** The counts, and the running attempts not started by priority (shown queued: core/rows.ts, countsAsSeen). */
  counts: { counts: Omit<QueueCounts, 'oldestQueuedReadyAt' | 'exact'>; unstarted: UnstartedCount[] };
  groupCounts: GroupCount[];
  paused: boolean;
  setPaused: null;
  settings: [string, string][];
  putSetting: null;
  expired: ExpiredAttempt[];
  purge: number;
  snapshot: Snapshot;
  schedules: Schedule[];
  getSchedule: Schedule | null;
  putSchedule: { created: boolean; schedule: Schedule };
  removeSchedule: boolean;
  fireSchedule: { fired: false } | { fired: true; schedule: Schedule; overlap: boolean; insert: InsertAnswer | null };
  claimDeliveries: DueDeliveryWire[];
  recordDelivery: boolean;
  nextDelivery: number | null;
  deliveries: DeliveryRow[] | null;
  batch: Batch | null;
}

export type OpResult = { ok: true; value: unknown } | { ok: false; error: WireError };

export interface WireError {
  name: string;
  message: string;
  /** A StoreError's code, or SQLite's (SQLITE_FULL, …). */
  code: string | null;
  /** The store cannot write now (the transaction was lost, the disk is full, …). */
  unavailable: boolean;
}

/** main → store thread */
export interface Request {
  seq: number;
  ops: Op[];
}

/** store thread → main */
export type Reply =
  | { kind: 'ready'; snapshot: Snapshot }
  | { kind: 'open_failed'; error: WireError }
  | {
      kind: 'done';
      /** One entry per request that the transaction held, in the order they were sent. */
      replies: { seq: number; results: OpResult[] }[];
      /**
       * The transaction was rolled back: every write in it failed (its reads were run
       * again alone), its claims were not stored, and the main thread rebuilds its index
       * from a fresh snapshot.
       */
      rolledBack: boolean;
      /** How long the COMMIT (with its fsync) took, in ms; null when nothing was written. */
      commitMs: number | null;
      /** The transaction stored new callback deliveries. */
      deliveries: boolean;
    };

/** The store thread's workerData. */
export interface StoreThreadData {
  path: string;
  synchronous: 'full' | 'normal';
  /** PRAGMA cache_size, in KiB. */
  cacheKib: number;
  /** Tests: PRAGMA max_page_count, to make the file "full" at a chosen size. */
  maxPageCount: number | null;
  /**
   * At the first open every lease in the file is dead (the exclusive lock proves that no
   * other process runs its jobs); when a store thread is replaced, this process's own
   * leases are still live.
   */
  expireLeases: boolean;
}
