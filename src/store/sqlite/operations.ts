/**
 * The job state machine on the SQLite file, and which file runs each operation the
 * main thread sends (protocol.ts); all of it runs in the store thread.
 *
 *   insert → queued | scheduled | waiting | failed (a dependency failed      insert.ts
 *            or was cancelled)
 *   waiting → queued | scheduled       when the last dependency completes    dependencies.ts
 *   scheduled, retrying → queued       promote, when runAt is reached        claim.ts
 *   queued → running                   claim, under a lease                  claim.ts
 *   running → completed | failed | retrying    finish (fenced on job,        finish.ts
 *                                      attempt and owner)
 *   non-terminal → cancelled           cancel                                job-actions.ts
 *   non-terminal → failed              a dependency failed                   dependencies.ts
 *   failed, cancelled → queued | waiting       retry                         job-actions.ts
 *
 * Leases (heartbeats, starts, expiry) are in lease.ts.
 *
 * Every transition is a compare-and-set on the status (and, for a running job, the
 * attempt and lease owner), so an outcome from an attempt that lost its job changes
 * nothing. The counters (counters.ts) are kept exact on every transition and rebuilt
 * from the file whenever a transaction is rolled back.
 */
import { getBatch } from './batches.js';
import { claim, claimRead, promote, unclaim } from './claim.js';
import { claimDeliveries, deliveries, nextDelivery, recordDelivery } from './deliveries.js';
import type { FileState } from './file-state.js';
import { finish } from './finish.js';
import { insertJobs } from './insert.js';
import { cancel, purge, remove, retry } from './job-actions.js';
import { expired, heartbeat, started } from './lease.js';
import type { Op } from './protocol.js';
import { getJob, groupCounts, list, snapshot } from './reads.js';
import { fireSchedule, getSchedule, putSchedule, removeSchedule, schedules } from './schedules.js';
import { paused, putSetting, setPaused, settings } from './settings.js';

/** Runs one operation on the file; its answer is Answers[op.op]. */
export function runOperation(file: FileState, op: Op): unknown {
  switch (op.op) {
    case 'insert':
      return insertJobs(file, op.rows, op.now, op.capacity, op.batch);
    case 'claim':
      return claim(file, op.ids, op.priorities, op.owner, op.expiresAt, op.now);
    case 'claimRead':
      return claimRead(file, op.ids, op.priorities, op.owner, op.expiresAt, op.now);
    case 'unclaim':
      return unclaim(file, op.rows);
    case 'promote':
      promote(file, op.items, op.now);
      return null;
    case 'heartbeat':
      return heartbeat(file, op.owner, op.ids, op.expiresAt);
    case 'started':
      started(file, op.rows);
      return null;
    case 'finish':
      return finish(file, op.rows, op.now);
    case 'cancel':
      return cancel(file, op.id, op.now);
    case 'retry':
      return retry(file, op.id, op.now);
    case 'remove':
      return remove(file, op.id);
    case 'get':
      return getJob(file, op.id);
    case 'list':
      return list(file, op.filter);
    case 'counts':
      return { counts: file.counters.counts(), unstarted: file.s.unstarted.all() };
    case 'groupCounts':
      return groupCounts(file);
    case 'paused':
      return paused(file);
    case 'setPaused':
      return setPaused(file, op.paused);
    case 'settings':
      return settings(file, op.prefix);
    case 'putSetting':
      return putSetting(file, op.key, op.value);
    case 'expired':
      return expired(file, op.now, op.limit);
    case 'purge':
      return purge(file, op.status, op.olderThan, op.limit);
    case 'snapshot':
      return snapshot(file);
    case 'schedules':
      return schedules(file);
    case 'getSchedule':
      return getSchedule(file, op.name);
    case 'putSchedule':
      return putSchedule(file, op.schedule);
    case 'removeSchedule':
      return removeSchedule(file, op.name);
    case 'fireSchedule':
      return fireSchedule(file, op.fire, op.row, op.now, op.capacity);
    case 'claimDeliveries':
      return claimDeliveries(file, op.owner, op.expiresAt, op.now, op.limit);
    case 'recordDelivery':
      return recordDelivery(file, op.attempt, op.now);
    case 'nextDelivery':
      return nextDelivery(file);
    case 'deliveries':
      return deliveries(file, op.jobId);
    case 'batch':
      return getBatch(file, op.id);
  }
}
