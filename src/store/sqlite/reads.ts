import { decodeCursor, pageOf, pageSize } from '../core/page.js';
import {
  type JobWire,
  seenWire,
  statusesAsStored,
  startedAttempt,
  type SummaryRow,
  type UnstartedCount,
} from '../core/rows.js';
import type { GroupCount, ListFilter, Page } from '../store.js';
import type { FileState } from './file-state.js';
import type { Preparer, Statement } from './prepare.js';
import type { Snapshot } from './protocol.js';

/** Columns a list may filter on. */
export type ListColumn = 'status' | 'type' | 'group_key' | 'schedule' | 'batch';

/** Reads of the file: one job, a page of the list, the ready and due jobs. */

export function getJob(file: FileState, id: string): JobWire | null {
  const row = file.s.selectJob.get(id);
  return row === undefined ? null : seenWire(row);
}

export function list(file: FileState, filter: ListFilter): Page {
  const limit = pageSize(filter.limit);
  if (limit === null) return { jobs: [], nextCursor: null };
  const before = filter.cursor === undefined ? null : decodeCursor(filter.cursor);
  const fetch = limit + 1;
  const statuses = filter.statuses !== undefined && filter.statuses.length > 0 ? [...new Set(filter.statuses)] : null;
  const columns: ListColumn[] = [];
  const values: unknown[] = [];
  if (filter.type !== undefined) {
    columns.push('type');
    values.push(filter.type);
  }
  if (filter.group !== undefined) {
    columns.push('group_key');
    values.push(filter.group);
  }
  if (filter.schedule !== undefined) {
    columns.push('schedule');
    values.push(filter.schedule);
  }
  if (filter.batch !== undefined) {
    columns.push('batch');
    values.push(filter.batch);
  }
  const tail = before === null ? [fetch] : [before, fetch];
  let rows: SummaryRow[];
  if (statuses === null) {
    rows = file.s.list(columns, before !== null).all(...values, ...tail);
  } else {
    // One index range per status, newest first, merged: an IN list would make SQLite sort.
    const statement = file.s.list(['status', ...columns], before !== null);
    const stored = statusesAsStored(statuses);
    rows = [];
    for (const status of stored.others) rows.push(...statement.all(status, ...values, ...tail));
    if (stored.started || stored.unstarted) {
      // Running rows are few (the attempts of this process): all of them, kept by whether they started.
      const all = statement.all('running', ...values, ...(before === null ? [] : [before]), -1);
      for (const row of all) {
        if (startedAttempt(row.attempt_started) ? stored.started : stored.unstarted) rows.push(row);
      }
    }
    if (stored.others.length + (stored.started || stored.unstarted ? 1 : 0) > 1) {
      rows.sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
    }
  }
  return pageOf(rows, limit);
}

/** The queued and due jobs, for the main thread's ready index. */
export function snapshot(file: FileState): Snapshot {
  return {
    queued: file.s.selectQueued.all().map((row) => ({
      id: row.id,
      type: row.type,
      priority: row.priority,
      group: row.group_key,
      readyAt: row.ready_at ?? 0,
    })),
    due: file.s.selectDelayed.all().map((row) => ({
      id: row.id,
      type: row.type,
      priority: row.priority,
      group: row.group_key,
      runAt: row.run_at ?? 0,
    })),
  };
}

/** The columns of a job's summary, in the order of `SummaryRow`. */
const SUMMARY_COLUMNS =
  'id, type, status, priority, error, attempts, max_attempts, snoozes, interruptions, timeout_ms, backoff_initial_ms, backoff_factor, ' +
  'backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on, metadata, run_at, created_at, started_at, ' +
  'finished_at, ready_at, lease_owner, lease_expires_at, group_key, schedule, callback, batch, attempt_started, ' +
  'prior_started_at';

/** The statements of the reads, prepared once. */
/** Queued and running jobs of each group that has any. */
export function groupCounts(file: FileState): GroupCount[] {
  return file.s.groupCounts.all();
}

export function prepareReadStatements({ prepare }: Preparer) {
  const lists = new Map<string, Statement<SummaryRow>>();
  const listQuery = (where: string) =>
    prepare<SummaryRow>(`SELECT ${SUMMARY_COLUMNS} FROM jobs ${where} ORDER BY id DESC LIMIT ?`);
  return {
    // Read by status: the queued and running jobs, never the finished ones of every group.
    /** Running attempts not started, by priority (running rows are few: this process's attempts). */
    unstarted: prepare<UnstartedCount>(
      `SELECT priority, count(*) AS n, min(ready_at) AS oldest FROM jobs INDEXED BY jobs_status_id
       WHERE status = 'running' AND attempt_started = 0 GROUP BY priority`,
    ),
    groupCounts: prepare<GroupCount>(
      `SELECT group_key AS "group", sum(status = 'queued' OR attempt_started = 0) AS queued,
         sum(status = 'running' AND attempt_started = 1) AS running
       FROM jobs INDEXED BY jobs_status_id WHERE group_key IS NOT NULL AND status IN ('queued', 'running') GROUP BY group_key ORDER BY group_key`,
    ),
    selectQueued: prepare<{
      id: string;
      type: string;
      priority: number;
      group_key: string | null;
      ready_at: number | null;
    }>(`SELECT id, type, priority, group_key, ready_at FROM jobs WHERE status = 'queued' ORDER BY ready_at, id`),
    selectDelayed: prepare<{
      id: string;
      type: string;
      priority: number;
      group_key: string | null;
      run_at: number | null;
    }>(`SELECT id, type, priority, group_key, run_at FROM jobs WHERE status IN ('scheduled', 'retrying')`),
    /**
     * A page of the list, newest first, for the columns a filter names (each `column = ?`,
     * in the order given, then `id < ?` when `before`); prepared once per shape.
     */
    list(columns: readonly ListColumn[], before: boolean): Statement<SummaryRow> {
      const key = `${columns.join(',')}|${before}`;
      let statement = lists.get(key);
      if (statement === undefined) {
        const terms = columns.map((column) => `${column} = ?`);
        if (before) terms.push('id < ?');
        statement = listQuery(terms.length === 0 ? '' : `WHERE ${terms.join(' AND ')}`);
        lists.set(key, statement);
      }
      return statement;
    },
  };
}
