import type Database from 'better-sqlite3';
import type { JobStatus } from '../../contract/job.js';
import type { DeliveryRow } from '../delivery-records.js';
import { type ExpiredRow, type JobRow, type ScheduleRow, SUMMARY_COLUMNS, type SummaryRow } from './rows.js';

/** What the store uses of a prepared statement. */
export interface Statement<R = unknown> {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): R | undefined;
  all(...params: unknown[]): R[];
}

const CLEAR_LEASE = 'lease_owner = NULL, lease_expires_at = NULL';

/** The running-row fence of a finish: job, attempt, owner and status. */
const FENCE = `id = ? AND status = 'running' AND attempts = ? AND lease_owner = ?`;

export type Statements = ReturnType<typeof prepareStatements>;

/** Columns a list may filter on. */
export type ListColumn = 'status' | 'type' | 'group_key' | 'schedule';

/** Every statement the store thread runs, prepared once. */
export function prepareStatements(db: Database.Database) {
  const prepare = <R = unknown>(sql: string): Statement<R> => db.prepare<unknown[], R>(sql);
  const pluck = <R>(sql: string): Statement<R> => db.prepare<unknown[], R>(sql).pluck();
  const lists = new Map<string, Statement<SummaryRow>>();
  const listQuery = (where: string) =>
    prepare<SummaryRow>(`SELECT ${SUMMARY_COLUMNS} FROM jobs ${where} ORDER BY id DESC LIMIT ?`);
  return {
    begin: prepare('BEGIN IMMEDIATE'),
    commit: prepare('COMMIT'),
    rollback: prepare('ROLLBACK'),
    insertJob: prepare(
      `INSERT INTO jobs (id, type, status, priority, payload, result, error, attempts, max_attempts, timeout_ms,
        backoff_initial_ms, backoff_factor, backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on,
        metadata, run_at, created_at, started_at, finished_at, ready_at, lease_owner, lease_expires_at, dedupe_key,
        group_key, schedule, callback)
       VALUES (?, ?, ?, ?, ?, NULL, ?, 0, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, NULL, ?, ?, NULL, NULL, ?, ?, ?, ?)`,
    ),
    insertDep: prepare('INSERT INTO job_deps (child, parent, position) VALUES (?, ?, ?)'),
    selectParentIds: pluck<string>('SELECT DISTINCT parent FROM job_deps'),
    selectSetting: pluck<string>('SELECT value FROM settings WHERE key = ?'),
    // Keys from the prefix on (the caller checks the prefix; few settings exist).
    selectSettings: prepare<{ key: string; value: string }>(
      'SELECT key, value FROM settings WHERE key >= ? ORDER BY key',
    ),
    deleteSetting: prepare('DELETE FROM settings WHERE key = ?'),
    upsertSetting: prepare(
      'INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
    ),
    selectJob: prepare<JobRow>('SELECT * FROM jobs WHERE id = ?'),
    selectByKey: prepare<JobRow>('SELECT * FROM jobs WHERE idempotency_key = ?'),
    selectLiveByDedupe: prepare<JobRow>(
      `SELECT * FROM jobs WHERE dedupe_key = ? AND status NOT IN ('completed', 'failed', 'cancelled')`,
    ),
    selectDoneByDedupe: prepare<JobRow>(
      `SELECT * FROM jobs WHERE dedupe_key = ? AND status = 'completed' AND finished_at >= ?
       ORDER BY finished_at DESC LIMIT 1`,
    ),
    /** Another unfinished job with the job's dedupe key (a retry would make two). */
    selectDedupeRival: pluck<string>(
      `SELECT l.id FROM jobs j JOIN jobs l ON l.dedupe_key = j.dedupe_key AND l.id <> j.id
       WHERE j.id = ? AND l.status NOT IN ('completed', 'failed', 'cancelled')`,
    ),
    selectStatus: pluck<JobStatus>('SELECT status FROM jobs WHERE id = ?'),
    selectState: prepare<{ status: JobStatus; priority: number; attempts: number; depends_on: string }>(
      'SELECT status, priority, attempts, depends_on FROM jobs WHERE id = ?',
    ),
    selectParent: prepare<{ type: string; result: string | null }>('SELECT type, result FROM jobs WHERE id = ?'),
    promote: prepare(
      `UPDATE jobs SET status = 'queued', ready_at = ?, run_at = NULL
       WHERE id = ? AND status IN ('scheduled', 'retrying') AND run_at = ?`,
    ),
    claim: prepare(
      `UPDATE jobs SET status = 'running', attempts = attempts + 1, started_at = ?, prior_started_at = started_at,
         attempt_started = 0, lease_owner = ?, lease_expires_at = ?, progress = NULL, run_at = NULL
       WHERE id = ? AND status = 'queued'`,
    ),
    unclaim: prepare(
      `UPDATE jobs SET status = 'queued', attempts = attempts - 1, started_at = ?, ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
    started: prepare(`UPDATE jobs SET started_at = ?, attempt_started = 1 WHERE ${FENCE}`),
    /** A rescued attempt whose handler never started: the job as it was before the claim. */
    returnUnstarted: prepare<JobRow>(
      `UPDATE jobs SET status = 'queued', attempts = attempts - 1, started_at = prior_started_at, ${CLEAR_LEASE}
       WHERE ${FENCE} AND attempt_started = 0 RETURNING *`,
    ),
    returnUnstartedExpired: prepare<JobRow>(
      `UPDATE jobs SET status = 'queued', attempts = attempts - 1, started_at = prior_started_at, ${CLEAR_LEASE}
       WHERE ${FENCE} AND attempt_started = 0 AND lease_expires_at < ? RETURNING *`,
    ),
    heartbeat: prepare(`UPDATE jobs SET lease_expires_at = ? WHERE id = ? AND status = 'running' AND lease_owner = ?`),
    complete: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'completed', result = ?, progress = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
    completeExpired: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'completed', result = ?, progress = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE ${FENCE} AND lease_expires_at < ?`,
    ),
    failRunning: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'failed', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
    failExpired: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'failed', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE ${FENCE} AND lease_expires_at < ?`,
    ),
    retryRunning: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'retrying', error = ?, run_at = ?, attempts = MAX(attempts - ?, 0), ${CLEAR_LEASE}
       WHERE ${FENCE}`,
    ),
    retryExpired: prepare(
      `UPDATE jobs SET started_at = COALESCE(?, started_at), status = 'retrying', error = ?, run_at = ?, attempts = MAX(attempts - ?, 0), ${CLEAR_LEASE}
       WHERE ${FENCE} AND lease_expires_at < ?`,
    ),
    failFrom: prepare<JobRow>(
      `UPDATE jobs SET status = 'failed', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
    cancel: prepare<JobRow>(
      `UPDATE jobs SET status = 'cancelled', error = ?, finished_at = ?, run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
    retry: prepare<JobRow>(
      `UPDATE jobs SET status = ?, ready_at = ?, attempts = 0, finished_at = NULL, result = NULL, progress = NULL,
         run_at = NULL, ${CLEAR_LEASE}
       WHERE id = ? AND status = ? RETURNING *`,
    ),
    release: prepare<JobRow>(
      `UPDATE jobs SET status = ?, ready_at = ?, run_at = ? WHERE id = ? AND status = 'waiting' RETURNING *`,
    ),
    waitingChildren: prepare<{ id: string; run_at: number | null }>(
      `SELECT DISTINCT j.id, j.run_at FROM job_deps d CROSS JOIN jobs j ON j.id = d.child
       WHERE d.parent = ? AND j.status = 'waiting'`,
    ),
    unfinishedParent: prepare(
      `SELECT 1 FROM job_deps d CROSS JOIN jobs p ON p.id = d.parent WHERE d.child = ? AND p.status <> 'completed' LIMIT 1`,
    ),
    liveChildren: prepare<{ id: string; status: JobStatus; attempts: number }>(
      `SELECT DISTINCT j.id, j.status, j.attempts FROM job_deps d CROSS JOIN jobs j ON j.id = d.child
       WHERE d.parent = ? AND j.status NOT IN ('completed', 'failed', 'cancelled')`,
    ),
    deleteJob: prepare('DELETE FROM jobs WHERE id = ?'),
    deleteDeps: prepare('DELETE FROM job_deps WHERE child = ?'),
    purgeChunk: pluck<string>(
      `DELETE FROM jobs WHERE id IN
         (SELECT id FROM jobs WHERE status = ? AND finished_at < ? LIMIT ?) RETURNING id`,
    ),
    expireAll: prepare(`UPDATE jobs SET lease_expires_at = 0 WHERE status = 'running'`),
    selectExpired: prepare<ExpiredRow>(
      `SELECT id, type, lease_owner, attempts, attempt_started, max_attempts, backoff_initial_ms, backoff_factor,
         backoff_max_ms, backoff_jitter
       FROM jobs WHERE status = 'running' AND lease_expires_at < ? LIMIT ?`,
    ),
    countByStatus: prepare<{ status: JobStatus; priority: number; n: number }>(
      'SELECT status, priority, COUNT(*) AS n FROM jobs GROUP BY status, priority',
    ),
    selectSchedules: prepare<ScheduleRow>('SELECT * FROM schedules ORDER BY name'),
    selectSchedule: prepare<ScheduleRow>('SELECT * FROM schedules WHERE name = ?'),
    insertSchedule: prepare(
      `INSERT INTO schedules (name, cron, timezone, job, overlap, catch_up, paused, next_run_at, last_run_at,
         last_job_id, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)`,
    ),
    updateSchedule: prepare(
      `UPDATE schedules SET cron = ?, timezone = ?, job = ?, overlap = ?, catch_up = ?, paused = ?, next_run_at = ?,
         updated_at = ?
       WHERE name = ?`,
    ),
    deleteSchedule: prepare('DELETE FROM schedules WHERE name = ?'),
    advanceSchedule: prepare('UPDATE schedules SET next_run_at = ? WHERE name = ?'),
    recordScheduleRun: prepare('UPDATE schedules SET last_run_at = ?, last_job_id = ? WHERE name = ?'),
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
    // ── callback deliveries ──
    claimDeliveries: prepare<{ id: string; job_id: string; event: string; attempts: number; body: string | null }>(
      `UPDATE callback_deliveries SET lease_owner = ?, lease_expires_at = ?
       WHERE seq IN (SELECT seq FROM callback_deliveries
                     WHERE status = 'pending' AND next_at <= ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)
                     ORDER BY next_at LIMIT ?)
       RETURNING id, job_id, event, attempts, body`,
    ),
    selectCallback: pluck<string | null>('SELECT callback FROM jobs WHERE id = ?'),
    recordDelivery: prepare(
      `UPDATE callback_deliveries SET status = ?, attempts = ?, next_at = ?, body = ?, lease_owner = NULL,
         lease_expires_at = NULL
       WHERE id = ? AND status = 'pending' AND attempts = ? AND lease_owner = ?`,
    ),
    insertDeliveryAttempt: prepare(
      'INSERT INTO callback_attempts (delivery_id, attempt, status, http_status, error, at) VALUES (?, ?, ?, ?, ?, ?)',
    ),
    nextDelivery: pluck<number | null>(
      `SELECT min(max(next_at, coalesce(lease_expires_at, 0))) FROM callback_deliveries WHERE status = 'pending'`,
    ),
    deliveriesOf: prepare<DeliveryRow>(
      `SELECT d.id, d.event, d.status, d.attempts, d.next_at, a.attempt, a.status AS attempt_status, a.http_status,
         a.error, a.at
       FROM callback_deliveries d LEFT JOIN callback_attempts a ON a.delivery_id = d.id
       WHERE d.job_id = ? ORDER BY d.seq, a.attempt`,
    ),
    lastDeliverySeq: pluck<number>(`SELECT seq FROM sqlite_sequence WHERE name = 'callback_deliveries'`),
    freeDeliveries: prepare(
      `UPDATE callback_deliveries SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner IS NOT NULL`,
    ),
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
