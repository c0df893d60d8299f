import type { ClaimRequest } from '../store.js';

/**
 * Forms micro-batches from ready jobs in claim order (ClaimRequest.micro): a batch whose
 * first job's type has a cost grows with the next jobs while they have costs too, are
 * not solo, the batch's expected time is under the budget (the last job taken may carry
 * it past) and its size is under maxJobs. The first job that does not fit starts the
 * next batch. Answers at most `batches` batches of ids; jobs left over stay queued.
 */
export function formBatches(
  candidates: readonly { id: string; type: string }[],
  batches: number,
  micro: NonNullable<ClaimRequest['micro']>,
): string[][] {
  const formed: string[][] = [];
  let next = 0;
  while (formed.length < batches && next < candidates.length) {
    const first = candidates[next++] as { id: string; type: string };
    const batch = [first.id];
    formed.push(batch);
    let expectedMs = micro.solo.has(first.id) ? undefined : micro.costs.get(first.type);
    if (expectedMs === undefined) continue;
    while (batch.length < micro.maxJobs && expectedMs < micro.budgetMs && next < candidates.length) {
      const candidate = candidates[next] as { id: string; type: string };
      const cost = micro.solo.has(candidate.id) ? undefined : micro.costs.get(candidate.type);
      if (cost === undefined) break;
      batch.push(candidate.id);
      next++;
      expectedMs += cost;
    }
  }
  return formed;
}
