import type { FinishRow, Op } from './protocol.js';
import type { Finished, FinishItem, StartedAttempt } from '../store.js';
import type { Job, Progress } from '../../contract/job.js';
import type { MainSide, Running } from './main-side.js';
import { applyOne, applyOthers } from './apply-changes.js';
import { jobFromWire, type JobWire } from '../core/rows.js';

/**
 * What becomes of an attempt this process runs, on the main thread: its start and its
 * lease ride along with the next message; its progress stays on the running copy; its
 * outcome is written from that copy; a release puts it first in line again at once.
 */

export function heartbeat(side: MainSide, owner: string, ids: string[], leaseMs: number): Promise<string[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return side.thread.call({ op: 'heartbeat', owner, ids, expiresAt: side.clock() + leaseMs }, 'lazy');
}

export async function started(side: MainSide, items: StartedAttempt[]): Promise<void> {
  const rows: StartedAttempt[] = [];
  for (const item of items) {
    const running = side.held(item.id, item.owner, item.attempt);
    if (running === null) continue;
    running.wire.startedAt = item.startedAt;
    rows.push(item);
  }
  if (rows.length === 0) return;
  await side.thread.call({ op: 'started', rows }, 'lazy');
  // Announced once stored, so a reader that hears it reads the job running.
  for (const item of rows) {
    const running = side.held(item.id, item.owner, item.attempt);
    if (running !== null) side.emit(item.id, running.wire.type, 'running', () => jobFromWire(running.wire));
  }
}

/**
 * Progress lives on this process's copy of the running job, not in the file: a
 * handler may report it many times a second, and it only matters while the attempt
 * runs. Reads overlay it; a completion writes the last report with the result.
 */
export function progress(side: MainSide, id: string, attempt: number, owner: string, progress: Progress): void {
  const running = side.held(id, owner, attempt);
  if (running === null) return;
  running.wire.progress = progress;
  side.emitProgress(id, attempt, progress, () => jobFromWire(running.wire));
}

export async function finish(side: MainSide, items: FinishItem[]): Promise<(Finished | null)[]> {
  const now = side.clock();
  const copies: (Running | null)[] = [];
  const rows: FinishRow[] = items.map((item) => {
    const mine = side.held(item.id, item.owner, item.attempt);
    copies.push(mine);
    return finishRowOf(item, mine);
  });
  // Outcomes ride along for up to LAZY_FLUSH_MS: a burst of finishes then shares one
  // COMMIT, and the store thread is seldom in an fsync when a submission arrives.
  const answers = await side.thread.call({ op: 'finish', rows, now }, 'lazy');
  return answers.map((answer, i) => {
    const item = items[i] as FinishItem;
    if (answer === null) return null;
    const mine = copies[i] ?? null;
    if (mine !== null && side.running.get(item.id) === mine) side.running.delete(item.id);
    if (answer.status === 'queued' && answer.job !== null) {
      // An attempt that never started, given back: as it was before its claim.
      applyOne(side, answer.job);
      return { status: answer.status, others: 0 };
    }
    let wire: JobWire | null = answer.job;
    if (mine !== null) {
      wire = mine.wire;
      wire.status = answer.status;
      wire.runAt = answer.retryAt;
      if (item.startedAt !== undefined) wire.startedAt = item.startedAt;
      if (item.expired === true) wire.interruptions += 1;
      if (item.outcome.kind === 'snoozed') {
        wire.attempts = Math.max(0, wire.attempts - 1);
        wire.snoozes += 1;
      } else if (answer.status === 'completed') {
        wire.resultText = (item.outcome as { resultText: string }).resultText;
        wire.finishedAt = now;
      } else {
        wire.error = (item.outcome as { error: Job['error'] }).error;
        if (answer.status === 'failed') wire.finishedAt = now;
        if (item.outcome.kind === 'released') wire.attempts = Math.max(0, wire.attempts - 1);
      }
    }
    if (wire !== null) {
      const done = wire;
      if (answer.status === 'retrying' || answer.status === 'scheduled') {
        side.index.addDue(done.id, done.type, done.priority, done.group, answer.retryAt ?? now, done);
      }
      side.emit(done.id, done.type, done.status, () => jobFromWire(done));
    }
    applyOthers(side, answer.others);
    return { status: answer.status, others: answer.others.length };
  });
}

/** An outcome as it crosses to the store thread; the progress of a completion comes from this process's copy. */
function finishRowOf(item: FinishItem, mine: Running | null): FinishRow {
  const { outcome } = item;
  return {
    id: item.id,
    attempt: item.attempt,
    owner: item.owner,
    expired: item.expired === true,
    startedAt: item.startedAt ?? null,
    wantJob: mine === null,
    outcome:
      outcome.kind === 'completed'
        ? {
            kind: 'completed',
            resultText: outcome.resultText,
            progressText: mine?.wire.progress == null ? null : JSON.stringify(mine.wire.progress),
          }
        : outcome.kind === 'failed'
          ? { kind: 'failed', errorText: JSON.stringify(outcome.error), retryAt: outcome.retryAt }
          : outcome.kind === 'released'
            ? { kind: 'released', errorText: JSON.stringify(outcome.error), retryAt: outcome.retryAt }
            : outcome.kind === 'snoozed'
              ? { kind: 'snoozed', runAt: outcome.runAt }
              : { kind: 'unstarted' },
  };
}

export async function release(side: MainSide, items: { id: string; attempt: number; owner: string }[]): Promise<void> {
  const rows: Extract<Op, { op: 'unclaim' }>['rows'] = [];
  const given: Running[] = [];
  for (const item of items) {
    const running = side.held(item.id, item.owner, item.attempt);
    if (running === null) continue;
    side.running.delete(item.id);
    given.push(running);
    rows.push({ ...item, priority: running.wire.priority, startedAt: running.previousStart });
  }
  if (rows.length === 0) return;
  // First in line again at once (last given back goes in front last, so the order holds).
  for (const running of [...given].reverse()) {
    const wire = running.wire;
    wire.status = 'queued';
    wire.attempts -= 1;
    wire.startedAt = running.previousStart;
    side.index.addQueued(wire.id, wire.type, wire.priority, wire.group, wire.readyAt ?? 0, wire, 'front');
    side.emit(wire.id, wire.type, 'queued', () => jobFromWire(wire));
  }
  await side.thread.call({ op: 'unclaim', rows });
}
