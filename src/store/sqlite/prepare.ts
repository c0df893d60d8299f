import type Database from 'better-sqlite3';

/** What the store uses of a prepared statement. */
export interface Statement<R = unknown> {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): R | undefined;
  all(...params: unknown[]): R[];
}

/** Prepares statements on the store thread's connection: `prepare` answers rows, `pluck` their first column. */
export interface Preparer {
  prepare<R = unknown>(sql: string): Statement<R>;
  pluck<R>(sql: string): Statement<R>;
}

export function preparer(db: Database.Database): Preparer {
  return {
    prepare: <R = unknown>(sql: string): Statement<R> => db.prepare<unknown[], R>(sql),
    pluck: <R>(sql: string): Statement<R> => db.prepare<unknown[], R>(sql).pluck(),
  };
}

export const CLEAR_LEASE = 'lease_owner = NULL, lease_expires_at = NULL';

/** The running-row fence of a finish: job, attempt, owner and status. */
export const FENCE = `id = ? AND status = 'running' AND attempts = ? AND lease_owner = ?`;

/**
 * What a rescue (a finish of an expired lease) adds to the job, whatever its outcome: one
 * more interruption, and the attempt's owner among the servers it took down.
 */
export const COUNT_INTERRUPTION =
  "interruptions = interruptions + 1, interrupted_by = json_insert(coalesce(interrupted_by, '[]'), '$[#]', lease_owner)";
