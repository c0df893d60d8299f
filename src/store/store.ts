import type { ClaimsFacet } from './facets/claims.js';
import type { ClusterFacet } from './facets/cluster.js';
import type { DeliveriesFacet } from './facets/deliveries.js';
import type { EventsFacet } from './facets/events.js';
import type { JobsFacet } from './facets/jobs.js';
import type { StoreLifecycle } from './facets/lifecycle.js';
import type { SchedulesFacet } from './facets/schedules.js';
import type { SettingsFacet } from './facets/settings.js';

// The facets' own types, named here too for the stores, the scheduler and their tests; the
// domain's types are the contract's (src/contract/).
export type {
  AttemptOutcome,
  ClaimedJob,
  ClaimRequest,
  ClaimsFacet,
  ExpiredAttempt,
  Finished,
  FinishItem,
  StartedAttempt,
} from './facets/claims.js';
export type { ClusterFacet } from './facets/cluster.js';
export type { DeliveriesFacet, DeliveryAttempt, DueDelivery } from './facets/deliveries.js';
export type { EventsFacet, StoreEvent, StoreListener, SubscribeOptions } from './facets/events.js';
export { isInvalidState } from './facets/jobs.js';
export type { Changes, InsertOutcome, InsertResult, InvalidState, JobsFacet, ListFilter, Page } from './facets/jobs.js';
export type { StoreLifecycle } from './facets/lifecycle.js';
export type { FireResult, ScheduleFire, SchedulesFacet } from './facets/schedules.js';
export type { GroupCount, SettingsFacet } from './facets/settings.js';

/**
 * The persistence boundary, shaped so that one embedded file (SQLite) and one database
 * shared by many servers (PostgreSQL) can both implement it:
 *
 * - Times that decide leases, due jobs and retention come from the store's own clock
 *   (`now()`); callers pass durations, never instants.
 * - A claim takes its filter as data and answers whole micro-batches in one call.
 * - Every attempt is fenced: a finish names the job, the attempt and the lease owner,
 *   and is refused when the job is no longer running under exactly that, so a late
 *   outcome of a timed-out, cancelled or rescued attempt changes nothing.
 * - Recovery is not the store's business: `expiredLeases` lists attempts whose lease
 *   ran out, and the scheduler's rescuer decides what becomes of them (retry policy
 *   lives above the store, in one place) and writes that with a fenced finish.
 * - Changes and progress are events the store publishes (`subscribe`), so listeners
 *   see what other servers did, not only what this process did.
 */
export interface JobStore
  extends StoreLifecycle, JobsFacet, ClaimsFacet, SchedulesFacet, DeliveriesFacet, SettingsFacet, EventsFacet {
  /** The servers sharing this store; null: a store of this process only. */
  readonly cluster: ClusterFacet | null;
}

export interface StoreOptions {
  /** Pending jobs admitted at most. */
  capacity: number;
  /** The store's clock (tests pass a fake one). */
  clock?: () => number;
  /**
   * Priority aging (KILN_PRIORITY_AGING_MS): a queued job's effective priority rises by
   * one level per full period waited since it became ready, up to 9; claims order by
   * effective priority desc, then ready time asc. 0 or absent: off.
   */
  priorityAgingMs?: number;
}
