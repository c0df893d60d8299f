import type { Answers, InsertAnswer, InsertRow } from './protocol.js';
import type { FileState } from './file-state.js';
import type { Preparer } from './prepare.js';
import type { Schedule } from '../../contract/schedule.js';
import type { ScheduleDefinition } from '../../contract/schedule.js';
import type { ScheduleFire } from '../store.js';
import { insertJobs } from './insert.js';
import { tickApplies, tickOverlaps } from '../core/rules.js';
import { type ScheduleRow, toSchedule } from '../core/rows.js';

export function schedules(file: FileState): Schedule[] {
  return file.s.selectSchedules.all().map(toSchedule);
}

export function getSchedule(file: FileState, name: string): Schedule | null {
  const row = file.s.selectSchedule.get(name);
  return row === undefined ? null : toSchedule(row);
}

export function putSchedule(file: FileState, schedule: ScheduleDefinition): Answers['putSchedule'] {
  const { name, cron, timezone, overlap, catchUp, nextRunAt, updatedAt } = schedule;
  const job = JSON.stringify(schedule.job);
  const paused = schedule.paused ? 1 : 0;
  const created = file.s.selectSchedule.get(name) === undefined;
  if (created) {
    file.s.insertSchedule.run(name, cron, timezone, job, overlap, catchUp, paused, nextRunAt, updatedAt, updatedAt);
  } else {
    file.s.updateSchedule.run(cron, timezone, job, overlap, catchUp, paused, nextRunAt, updatedAt, name);
  }
  return { created, schedule: getSchedule(file, name) as Schedule };
}

export function removeSchedule(file: FileState, name: string): boolean {
  return file.s.deleteSchedule.run(name).changes === 1;
}

/** A tick or trigger: the schedule advances, and its job is inserted unless the last one still runs. */
export function fireSchedule(
  file: FileState,
  fire: Omit<ScheduleFire, 'job'>,
  row: InsertRow | null,
  now: number,
  capacity: number,
): Answers['fireSchedule'] {
  const { s } = file;
  const current = s.selectSchedule.get(fire.name);
  if (current === undefined) return { fired: false };
  if (!tickApplies(fire.expected, current)) return { fired: false };
  if (fire.expected !== null) s.advanceSchedule.run(fire.nextRunAt, fire.name);
  const lastStatus = current.last_job_id === null ? undefined : s.selectStatus.get(current.last_job_id);
  const overlap = tickOverlaps(fire.skipOverlap, lastStatus);
  let insert: InsertAnswer | null = null;
  if (!overlap && row !== null) {
    insert = insertJobs(file, [row], now, capacity);
    const outcome = insert.ok ? insert.outcomes[0] : undefined;
    if (outcome !== undefined) {
      s.recordScheduleRun.run(fire.runAt, outcome.created ? row.id : outcome.job.id, fire.name);
    }
  }
  return { fired: true, schedule: getSchedule(file, fire.name) as Schedule, overlap, insert };
}

/** The statements of the schedules table, prepared once. */
export function prepareScheduleStatements({ prepare }: Preparer) {
  return {
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
  };
}
