import type { TaskLimits } from '../../contract/limits.js';
import type { Batch } from './batch.js';
import type { TaskLimiter } from './task-limits.js';

/**
 * Whether `key`'s limits in `limiter` are stricter now than those in `asked` (null: none
 * were in force): a limit added, a concurrency lowered, a rate's `max` lowered or its
 * window lengthened. Limits loosened hold what was claimed under the old ones.
 */
export function limitsTightened(
  limiter: TaskLimiter,
  asked: ReadonlyMap<string, TaskLimits> | null,
  key: string,
): boolean {
  const now = limiter.limitsOf(key);
  if (now === null) return false;
  const then = asked?.get(key) ?? null;
  if (then === null) return true;
  if (now.concurrency !== null && (then.concurrency === null || now.concurrency < then.concurrency)) return true;
  const rate = now.rateLimit;
  const before = then.rateLimit;
  return rate !== null && (before === null || rate.max < before.max || rate.perMs > before.perMs);
}

/**
 * New limits for every task type (`by` 'type') or every group: `limiter` takes them, and
 * the attempts held in `batches` (recalled ones aside) count against them at once, those
 * of a type or group that had no limits until now included. Answers the batches that hold
 * a job whose limits became stricter: the dispatcher takes back those not started.
 */
export function reconfigure(
  limiter: TaskLimiter,
  by: 'type' | 'group',
  limits: ReadonlyMap<string, TaskLimits>,
  batches: Iterable<Batch>,
  startedAt: (slot: number) => number | null,
): Batch[] {
  const before = limiter.limits();
  limiter.configure(limits);
  const stricter: Batch[] = [];
  for (const batch of batches) {
    if (batch.recalled) continue;
    let tightened = false;
    for (const job of batch.jobs) {
      const key = by === 'type' ? job.type : job.group;
      if (key === null) continue;
      limiter.claimed(key, job.id, () => startedAt(batch.slot));
      tightened ||= limitsTightened(limiter, before, key);
    }
    if (tightened) stricter.push(batch);
  }
  return stricter;
}
