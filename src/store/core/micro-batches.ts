import type { ClaimRequest } from '../store.js';

export type MicroBatchRequest = NonNullable<ClaimRequest['micro']>;

/**
 * What a job is expected to cost inside a micro-batch, or undefined when it may not
 * share one: its type has no known cost (not tiny), or it must run alone (solo). Both
 * stores ask this of every job they would add to a batch.
 */
export function costInBatch(micro: MicroBatchRequest, id: string, type: string): number | undefined {
  return micro.solo.has(id) ? undefined : micro.costs.get(type);
}

/**
 * Whether a batch of `size` jobs expected to take `expectedMs` takes one more: under
 * maxJobs and under the budget (the last job taken may carry it past the budget).
 */
export function batchHasRoom(micro: MicroBatchRequest, size: number, expectedMs: number): boolean {
  return size < micro.maxJobs && expectedMs < micro.budgetMs;
}

/**
 * Forms micro-batches from ready jobs in claim order (ClaimRequest.micro): a batch whose
 * first job has a cost in a batch grows with the next jobs while they have one too and
 * the batch has room (costInBatch, batchHasRoom). The first job that does not fit
 * starts the next batch. Answers at most `batches` batches of ids; jobs left over stay
 * queued. The SQLite store forms its batches from its ready index with the same two
 * rules, taking one job at a time.
 */
export function formBatches(
  candidates: readonly { id: string; type: string }[],
  batches: number,
  micro: MicroBatchRequest,
): string[][] {
  const formed: string[][] = [];
  let next = 0;
  while (formed.length < batches && next < candidates.length) {
    const first = candidates[next++] as { id: string; type: string };
    const batch = [first.id];
    formed.push(batch);
    let expectedMs = costInBatch(micro, first.id, first.type);
    if (expectedMs === undefined) continue;
    while (batchHasRoom(micro, batch.length, expectedMs) && next < candidates.length) {
      const candidate = candidates[next] as { id: string; type: string };
      const cost = costInBatch(micro, candidate.id, candidate.type);
      if (cost === undefined) break;
      batch.push(candidate.id);
      next++;
      expectedMs += cost;
    }
  }
  return formed;
}
