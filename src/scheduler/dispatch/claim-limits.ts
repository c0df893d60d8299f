import type { ClaimRequest } from '../../store/store.js';
import type { KilnMetrics } from '../statistics/metrics.js';
import type { JobLimits } from './task-limits.js';
import { limitsTightened } from './limit-changes.js';

/**
 * What one claim asks and learns of the task and group limits this server applies: the
 * allowance of each limited type and group (and the task types, which a store that
 * applies limits claims type by type) go into the request; the types and groups the
 * claim passed over are counted after it, and the answer says when one held by its rate
 * limit may be claimed (a token comes back). One held by its concurrency is claimed when
 * an attempt of it ends, which pumps anyway.
 *
 * Limits can change while a claim is under way (a PUT of a group's or a type's limits,
 * another server's change read back): the claim then took its jobs under the limits it
 * asked with, and `outdated` tells which of its messages hold a job whose type or group
 * has stricter limits now, for the dispatcher to give back unstarted and claim again
 * (limits that were loosened hold what was claimed under the old ones: it stays).
 */
export function claimLimits(limits: JobLimits, types: () => readonly string[]) {
  const { byType: limiter, byGroup: groupLimiter } = limits;
  const allowance = limiter.active ? limiter.allowance() : null;
  const groupAllowance = groupLimiter.active ? groupLimiter.allowance() : null;
  const typeLimits = allowance === null ? null : limiter.limits();
  const groupLimits = groupAllowance === null ? null : groupLimiter.limits();
  const changes = [limiter.changes, groupLimiter.changes] as const;
  const passed = new Set<string>();
  const passedGroups = new Set<string>();
  const request: Partial<ClaimRequest> = {
    ...(allowance === null && groupAllowance === null ? {} : { types: types() }),
    ...(allowance === null
      ? {}
      : { allowance: allowance.left, limits: typeLimits, passedOver: (type: string) => passed.add(type) }),
    ...(groupAllowance === null
      ? {}
      : {
          groupAllowance: groupAllowance.left,
          groupLimits,
          groupPassedOver: (group: string) => passedGroups.add(group),
        }),
  };
  return {
    request,
    /** Whether a job of `jobs` has stricter limits now than the claim asked with (its type's or its group's). */
    outdated(jobs: readonly { type: string; group: string | null }[]): boolean {
      if (limiter.changes === changes[0] && groupLimiter.changes === changes[1]) return false;
      return jobs.some(
        (job) =>
          limitsTightened(limiter, typeLimits, job.type) ||
          (job.group !== null && limitsTightened(groupLimiter, groupLimits, job.group)),
      );
    },
    /** After the claim: what it passed over, counted; when a held one may be claimed next (null: no time). */
    passedOver(metrics: KilnMetrics): number | null {
      for (const type of passed) metrics.limited(type, allowance?.held.get(type) ?? 'concurrency');
      for (const group of passedGroups) metrics.groupLimited(group, groupAllowance?.held.get(group) ?? 'concurrency');
      return earliest(
        passed.size > 0 ? (allowance?.wakeAt ?? null) : null,
        passedGroups.size > 0 ? (groupAllowance?.wakeAt ?? null) : null,
      );
    },
  };
}

/** The earlier of two times, either of which may be missing. */
function earliest(a: number | null, b: number | null): number | null {
  if (a === null) return b;
  return b === null ? a : Math.min(a, b);
}
