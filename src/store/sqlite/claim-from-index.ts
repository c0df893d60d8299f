import { claimedOf, type JobWire } from '../core/rows.js';
import type { ClaimedJob, ClaimRequest } from '../store.js';
import type { MainSide } from './main-side.js';
import type { IndexEntry } from './ready-index/ready-index.js';
import { batchHasRoom, costInBatch } from '../core/micro-batches.js';

/**
 * A claim on the main thread: due jobs promoted, the best ready jobs taken from the
 * ready index in micro-batches, and handed out from the index's copies without asking
 * the store thread (the claim rides along with its next message). Only jobs without a
 * copy are claimed and read from the file first, and a claim holding a job of a type not
 * known to be tiny waits for its commit.
 */
export async function claimFromIndex(side: MainSide, request: ClaimRequest): Promise<ClaimedJob[][]> {
  const { index, thread } = side;
  thread.assertOpen();
  if (!thread.claimable) return [];
  const now = side.clock();
  const promoted = index.promoteDue(now);
  if (promoted.length > 0) thread.send({ op: 'promote', items: promoted, now }, 'lazy');

  const { entries, records, missing } = takeBatches(side, request, now);
  if (entries.length === 0) return [];

  const owner = request.owner;
  const expiresAt = now + request.leaseMs;
  // Jobs without a copy in the index are claimed and read from the file in one step,
  // so one cancelled meanwhile is not handed out; the rest are claimed lazily below.
  const read = new Map<string, JobWire>();
  if (missing > 0) {
    const wanted = entries.flatMap((batch, b) => batch.filter((_, i) => records[b]?.[i] === null));
    const answers = await thread.call({
      op: 'claimRead',
      ids: wanted.map((entry) => entry.id),
      priorities: wanted.map((entry) => entry.priority),
      owner,
      expiresAt,
      now,
    });
    for (const wire of answers) if (wire !== null) read.set(wire.id, wire);
  }

  const ids: string[] = [];
  const priorities: number[] = [];
  const claimed: ClaimedJob[][] = [];
  for (const [b, batch] of entries.entries()) {
    const batchRecords = records[b] as (JobWire | null)[];
    const jobs: ClaimedJob[] = [];
    for (const [i, entry] of batch.entries()) {
      const copy = batchRecords[i] ?? null;
      const fromFile = copy === null ? read.get(entry.id) : undefined;
      if (fromFile !== undefined) {
        fromFile.readyAt = entry.readyAt;
        side.running.set(fromFile.id, { wire: fromFile, owner, previousStart: null });
        jobs.push(claimedOf(fromFile));
        continue;
      }
      const record = copy;
      if (record === null) continue;
      const previousStart = record.startedAt;
      record.status = 'running';
      record.attempts += 1;
      record.startedAt = now;
      record.progress = null;
      record.runAt = null;
      record.readyAt = entry.readyAt;
      // The caller's job stays the record of this attempt, whatever happens to the copy.
      const job = claimedOf(record);
      ids.push(job.id);
      priorities.push(entry.priority);
      side.running.set(job.id, { wire: record, owner, previousStart });
      thread.carryClaim(job.id, job.attempts);
      jobs.push(job);
    }
    if (jobs.length > 0) claimed.push(jobs);
  }
  // A job whose type is not known to be tiny (its attempts measured under a fraction of a
  // millisecond) is handed out only once its claim is in the file: a handler that takes its
  // process down as it starts (a native crash, a process.kill of its own) never teaches its
  // cost, so it stays here, and the start after the crash finds it running and counts the
  // interruption. A lazy claim would be lost with the process, the job queued again as if
  // it never ran, and such a job would take its server down for ever.
  const durable = claimed.some((jobs) => jobs.some((job) => request.micro?.costs.has(job.type) !== true));
  // A job the file no longer had queued (cancelled while its claim read it) is lost to this claim.
  const stored = thread.call({ op: 'claim', ids, priorities, owner, expiresAt, now }, durable ? 'now' : 'lazy').then(
    (missed) => {
      if (missed.length === 0) return;
      const attempts = new Map(claimed.flat().map((job) => [job.id, job.attempts]));
      side.lost(missed.map((id) => ({ id, attempt: attempts.get(id) ?? 0 })));
    },
    () => {
      // A claim that was not stored is reported lost by the reply that says so.
    },
  );
  // Claimed jobs stay queued to a reader until their handler starts (attempts.ts, started).
  if (durable) await stored;
  return claimed;
}

/**
 * Batches taken from the ready index, entries and their copies side by side (no object
 * per job beyond the copy itself): a batch whose first job's type has a cost grows with
 * the next jobs while they have costs too, are not solo or of a limited type or group, and the
 * batch is under its budget and size (ClaimRequest.micro). `missing` counts the jobs
 * without a copy.
 */
function takeBatches(
  side: MainSide,
  request: ClaimRequest,
  now: number,
): { entries: IndexEntry[][]; records: (JobWire | null)[][]; missing: number } {
  const { index } = side;
  const entries: IndexEntry[][] = [];
  const records: (JobWire | null)[][] = [];
  const { micro } = request;
  const left = request.allowance === undefined || request.allowance === null ? null : new Map(request.allowance);
  const allowed = left === null || left.size === 0 ? null : (type: string) => (left.get(type) ?? 1) > 0;
  const groupsLeft =
    request.groupAllowance === undefined || request.groupAllowance === null ? null : new Map(request.groupAllowance);
  const groups =
    groupsLeft === null || groupsLeft.size === 0 ? null : (group: string) => (groupsLeft.get(group) ?? 1) > 0;
  const limitedGroup = (group: string | null) => group !== null && groupsLeft?.has(group) === true;
  let missing = 0;
  while (entries.length < request.batches) {
    const first = index.take(allowed, request.passedOver, now, groups, request.groupPassedOver);
    if (first === undefined) break;
    const batchEntries = [first.entry];
    const batchRecords = [first.record];
    entries.push(batchEntries);
    records.push(batchRecords);
    if (first.record === null) missing++;
    const allowance = left?.get(first.entry.type);
    if (allowance !== undefined) left?.set(first.entry.type, allowance - 1);
    const group = first.entry.group;
    const groupAllowance = group === null ? undefined : groupsLeft?.get(group);
    if (groupAllowance !== undefined) groupsLeft?.set(group as string, groupAllowance - 1);
    // A limited type or group is never in a micro-batch: its jobs are counted one by one.
    let expectedMs =
      micro === null || allowance !== undefined || groupAllowance !== undefined
        ? undefined
        : costInBatch(micro, first.entry.id, first.entry.type);
    if (micro === null || expectedMs === undefined) continue;
    while (batchHasRoom(micro, batchEntries.length, expectedMs)) {
      const next = index.peek(null, undefined, now);
      const cost =
        next === undefined || left?.has(next.type) === true || limitedGroup(next.group)
          ? undefined
          : costInBatch(micro, next.id, next.type);
      // The next job does not fit: it stays first in line for the next batch.
      if (cost === undefined) break;
      const taken = index.take(null, undefined, now);
      if (taken === undefined) break;
      batchEntries.push(taken.entry);
      batchRecords.push(taken.record);
      if (taken.record === null) missing++;
      expectedMs += cost;
    }
  }
  return { entries, records, missing };
}
