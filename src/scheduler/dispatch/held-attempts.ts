import type { Batch } from './batch.js';

/** Which of the attempts this server holds: those a thread started, those waiting for one, or all. */
export type Held = 'started' | 'waiting' | 'all';

/** When a message's thread started it (its slot word), or null while it waits. */
type StartedAt = (slot: number) => number | null;

/** Whether a thread started the batch (a recalled one never runs). */
function isStarted(batch: Batch, startedAt: StartedAt): boolean {
  return !batch.recalled && startedAt(batch.slot) !== null;
}

/**
 * The attempts held in `batches` (recalled ones aside) by task type or group: kiln_task_running
 * counts the started ones, kiln_task_claimed the waiting ones, task limits all of them.
 */
export function attemptsBy(
  batches: Iterable<Batch>,
  by: 'type' | 'group',
  held: Held,
  startedAt: StartedAt,
): Map<string, number> {
  const counted = new Map<string, number>();
  for (const batch of batches) {
    if (batch.recalled || (held !== 'all' && isStarted(batch, startedAt) !== (held === 'started'))) continue;
    for (const job of batch.jobs) {
      const key = by === 'type' ? job.type : job.group;
      if (key !== null) counted.set(key, (counted.get(key) ?? 0) + 1);
    }
  }
  return counted;
}

/** Threads running a message now: the started batches, at most `threads`. */
export function busyThreads(batches: Iterable<Batch>, threads: number, startedAt: StartedAt): number {
  let busy = 0;
  for (const batch of batches) if (isStarted(batch, startedAt)) busy += 1;
  return Math.min(threads, busy);
}
