import type Database from 'better-sqlite3';
import type { JobRow } from '../core/rows.js';
import type { JobStatus } from '../../contract/job.js';
import { prepareBatchStatements } from './batches.js';
import { prepareClaimStatements } from './claim.js';
import { prepareDeliveryStatements } from './deliveries.js';
import { prepareDependencyStatements } from './dependencies.js';
import { prepareFinishStatements } from './finish.js';
import { prepareInsertStatements } from './insert.js';
import { prepareJobActionStatements } from './job-actions.js';
import { prepareLeaseStatements } from './lease.js';
import { prepareReadStatements } from './reads.js';
import { prepareScheduleStatements } from './schedules.js';
import { prepareSettingStatements } from './settings.js';
import { preparer } from './prepare.js';

export type Statements = ReturnType<typeof prepareStatements>;

/**
 * Every statement the store thread runs, prepared once: the transaction's, the reads of
 * one job that many operations share, and each operation's own (next to the code that
 * runs it).
 */
export function prepareStatements(db: Database.Database) {
  const p = preparer(db);
  const { prepare, pluck } = p;
  return {
    begin: prepare('BEGIN IMMEDIATE'),
    commit: prepare('COMMIT'),
    rollback: prepare('ROLLBACK'),
    selectJob: prepare<JobRow>('SELECT * FROM jobs WHERE id = ?'),
    selectStatus: pluck<JobStatus>('SELECT status FROM jobs WHERE id = ?'),
    selectState: prepare<{ status: JobStatus; priority: number; attempts: number; depends_on: string }>(
      'SELECT status, priority, attempts, depends_on FROM jobs WHERE id = ?',
    ),
    countByStatus: prepare<{ status: JobStatus; priority: number; n: number }>(
      'SELECT status, priority, COUNT(*) AS n FROM jobs GROUP BY status, priority',
    ),
    ...prepareInsertStatements(p),
    ...prepareClaimStatements(p),
    ...prepareLeaseStatements(p),
    ...prepareFinishStatements(p),
    ...prepareDependencyStatements(p),
    ...prepareJobActionStatements(p),
    ...prepareReadStatements(p),
    ...prepareSettingStatements(p),
    ...prepareScheduleStatements(p),
    ...prepareDeliveryStatements(p),
    ...prepareBatchStatements(p),
  };
}
