import type { Changes, InsertOutcome, InsertResult } from '../store.js';
import type { ChangesWire, InsertAnswer, InsertRow } from './protocol.js';
import type { MainSide } from './main-side.js';
import type { NewJob } from '../../contract/job.js';
import { createdJob } from '../core/insert-plan.js';
import { copyOf, jobFromWire, type JobWire } from '../core/rows.js';

/**
 * Jobs the store thread changed, applied on the main thread: the ready index kept in
 * step (a queued job is in its queues, a scheduled or retrying one in its heap, any
 * other nowhere) and the listeners told.
 */

/** What the store thread answered for an insert: created jobs enter the ready index and are announced. */
export function applyInsert(side: MainSide, jobs: NewJob[], rows: InsertRow[], answer: InsertAnswer): InsertResult {
  if (!answer.ok) return answer;
  const outcomes: InsertOutcome[] = answer.outcomes.map((outcome, index) => {
    if (!outcome.created) {
      const job = jobFromWire(outcome.job);
      return outcome.dedupe === undefined ? { created: false, job } : { created: false, job, dedupe: outcome.dedupe };
    }
    const { state } = outcome;
    const job = createdJob(jobs[index] as NewJob, state);
    if (state.status === 'queued' || state.status === 'scheduled') {
      const record: JobWire = copyOf(job, (rows[index] as InsertRow).payloadText, state.parents ?? []);
      if (state.status === 'queued')
        side.index.addQueued(job.id, job.type, job.priority, job.group, state.readyAt ?? 0, record);
      else side.index.addDue(job.id, job.type, job.priority, job.group, state.runAt ?? 0, record);
    }
    side.emit(job.id, job.type, job.status, () => job);
    return { created: true, job };
  });
  return { ok: true, outcomes };
}

export function applyChanges(side: MainSide, changes: ChangesWire): Changes {
  const job = applyOne(side, changes.job);
  applyOthers(side, changes.others);
  return { job: jobFromWire(job), others: changes.others.map(jobFromWire) };
}

export function applyOthers(side: MainSide, others: JobWire[]): void {
  for (const other of others) applyOne(side, other);
}

/** A job the store thread changed: keep the index in step and tell the listeners. */
export function applyOne(side: MainSide, wire: JobWire): JobWire {
  if (wire.status === 'queued')
    side.index.addQueued(wire.id, wire.type, wire.priority, wire.group, wire.readyAt ?? 0, wire);
  else if (wire.status === 'scheduled' || wire.status === 'retrying') {
    side.index.addDue(wire.id, wire.type, wire.priority, wire.group, wire.runAt ?? 0, wire);
  } else side.index.remove(wire.id);
  side.emit(wire.id, wire.type, wire.status, () => jobFromWire(wire));
  return wire;
}
