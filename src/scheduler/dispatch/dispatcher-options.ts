import type { JobStore } from '../../store/store.js';
import type { KilnMetrics } from '../statistics/metrics.js';
import type { FaultLogger } from '../../fault-log.js';
import type { WorkerPool } from '../../workers/pool.js';
import type { MicroBatchOptions } from './micro-batch.js';
import type { Tracing } from '../../tracing/tracing.js';

/** What a Dispatcher (dispatcher.ts) is built from. */
export interface DispatcherOptions {
  store: JobStore;
  pool: WorkerPool;
  metrics: KilnMetrics;
  threads: number;
  leaseMs: number;
  /** A shared store's node lease (see LeaseKeeper); null or absent for a store of one process. */
  nodeLeaseMs?: number | null;
  /** Snoozes a job may make (KILN_MAX_SNOOZES); the one after fails it. */
  maxSnoozes: number;
  /** One-off failures (an attempt that could not be recorded). */
  onError(message: string, error: unknown): void;
  /** Where the faults of the retry loops (claims, outcomes, heartbeats) are logged. */
  log: FaultLogger;
  random?: () => number;
  microBatch?: MicroBatchOptions;
  /** The registered task types (a shared store that applies task limits claims type by type). */
  taskTypes?: () => readonly string[];
  /** The main thread's CPU per job, in ms, that threads are sized against (thread-sizing.ts). */
  mainMsPerJob?: number;
  /** Whether a task type runs each attempt on a fresh thread (never micro-batched). */
  isolated?: (type: string) => boolean;
  /** Spans of attempts (src/tracing/); absent or null: tracing is off. */
  tracing?: Tracing | null;
}
