import { StatusCounters } from './counters.js';
import type { Statements } from './statements.js';

/**
 * What the store thread keeps beside the file: its prepared statements, the counters,
 * the ids that some job depends on, and the last callback delivery seq it saw. Every
 * operation (insert.ts, claim.ts, finish.ts, …) runs on it; all of it is rebuilt from
 * the file after a rollback.
 */
export class FileState {
  readonly s: Statements;
  readonly counters = new StatusCounters();
  /** Ids that some job depends on: a finish of any other job skips the dependents query. */
  readonly parentIds = new Set<string>();
  /** The highest callback delivery seq seen: a higher one means new deliveries. */
  deliverySeq: number;

  constructor(statements: Statements) {
    this.s = statements;
    this.rebuild();
    this.deliverySeq = this.s.lastDeliverySeq.get() ?? 0;
  }

  /** Counters and parent ids from the file, as after a rollback. */
  rebuild(): void {
    this.parentIds.clear();
    for (const parent of this.s.selectParentIds.all()) this.parentIds.add(parent);
    this.counters.rebuild(this.s.countByStatus.all());
  }
}
