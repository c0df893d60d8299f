/**
 * Schedules on PostgreSQL. A tick is fired under the schedule row's lock: the servers
 * firing one tick are ordered by it, and the second reads the first's next_run_at, and
 * stops (core/rules.ts decides whether a tick applies and whether it overlaps).
 */
import type pg from 'pg';
import type { FireResult, InsertResult, ScheduleFire } from '../store.js';
import type { JobStatus } from '../../contract/job.js';
import type { Schedule } from '../../contract/schedule.js';
import type { ScheduleDefinition } from '../../contract/schedule.js';
import type { StoreContext } from './context.js';
import { isInsertRace, type PgInsert } from './insert.js';
import { tickApplies, tickOverlaps } from '../core/rules.js';
import { type ScheduleRow, toSchedule } from '../core/rows.js';

function scheduleStatements(schema: string) {
  const s = `"${schema}"`;
  return {
    schedules: `SELECT * FROM ${s}.schedules ORDER BY name`,
    schedule: `SELECT * FROM ${s}.schedules WHERE name = $1`,
    /** The schedule's row, locked: the compare-and-set of a tick reads and writes it under this lock. */
    lockSchedule: `SELECT * FROM ${s}.schedules WHERE name = $1 FOR UPDATE`,
    /** Create, or replace the definition (keeping created_at, last_run_at, last_job_id); `created` says which. */
    putSchedule: `
INSERT INTO ${s}.schedules AS t (name, cron, timezone, job, overlap, catch_up, paused, next_run_at, created_at,
  updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, timezone = excluded.timezone, job = excluded.job,
  overlap = excluded.overlap, catch_up = excluded.catch_up, paused = excluded.paused,
  next_run_at = excluded.next_run_at, updated_at = excluded.updated_at
RETURNING t.*, (xmax = 0) AS created`,
    removeSchedule: `DELETE FROM ${s}.schedules WHERE name = $1`,
    advanceSchedule: `UPDATE ${s}.schedules SET next_run_at = $2 WHERE name = $1 RETURNING *`,
    recordScheduleRun: `UPDATE ${s}.schedules SET last_run_at = $2, last_job_id = $3 WHERE name = $1 RETURNING *`,
  };
}

export class PgSchedules {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof scheduleStatements>;
  readonly #inserts: PgInsert;

  constructor(ctx: StoreContext, inserts: PgInsert) {
    this.#ctx = ctx;
    this.#sql = scheduleStatements(ctx.options.schema);
    this.#inserts = inserts;
  }

  async schedules(): Promise<Schedule[]> {
    return (await this.#ctx.db.query<ScheduleRow>(this.#sql.schedules)).rows.map(toSchedule);
  }

  async getSchedule(name: string): Promise<Schedule | null> {
    const row = (await this.#ctx.db.query<ScheduleRow>(this.#sql.schedule, [name])).rows[0];
    return row === undefined ? null : toSchedule(row);
  }

  async putSchedule(schedule: ScheduleDefinition): Promise<{ created: boolean; schedule: Schedule }> {
    const { name, cron, timezone, job, overlap, catchUp, paused, nextRunAt, updatedAt } = schedule;
    const values = [name, cron, timezone, JSON.stringify(job), overlap, catchUp, paused, nextRunAt, updatedAt];
    const row = (await this.#ctx.db.query<ScheduleRow & { created: boolean }>(this.#sql.putSchedule, values)).rows[0];
    if (row === undefined) throw new Error('an upsert of a schedule answered no row');
    return { created: row.created, schedule: toSchedule(row) };
  }

  async removeSchedule(name: string): Promise<boolean> {
    return ((await this.#ctx.db.query(this.#sql.removeSchedule, [name])).rowCount ?? 0) > 0;
  }

  async fireSchedule(fire: ScheduleFire): Promise<FireResult> {
    for (let round = 0; ; round++) {
      try {
        return await this.#ctx.db.transaction((client) => this.#fireSchedule(client, fire));
      } catch (error) {
        if ((error !== AGAIN && !isInsertRace(error)) || round >= 5) throw error;
      }
    }
  }

  async #fireSchedule(client: pg.PoolClient, fire: ScheduleFire): Promise<FireResult> {
    // The row lock orders the servers firing one tick: the second reads the first's next_run_at, and stops.
    const current = (await client.query<ScheduleRow>(this.#sql.lockSchedule, [fire.name])).rows[0];
    if (current === undefined) return { fired: false };
    if (!tickApplies(fire.expected, current)) return { fired: false };
    // The row as this transaction leaves it: each UPDATE returns it.
    let row = current;
    if (fire.expected !== null) {
      row = (await client.query<ScheduleRow>(this.#sql.advanceSchedule, [fire.name, fire.nextRunAt])).rows[0] ?? row;
    }
    const last =
      current.last_job_id === null
        ? undefined
        : (await this.#ctx.db.readByIds<{ status: JobStatus }>(this.#ctx.shared.statusOf, current.last_job_id))[0];
    const overlap = tickOverlaps(fire.skipOverlap, last?.status);
    let insert: InsertResult | null = null;
    if (!overlap && fire.job !== null) {
      const answer = await this.#inserts.insertIn(client, [fire.job]);
      if (answer === 'again') throw AGAIN;
      insert = answer;
      const outcome = answer.ok ? answer.outcomes[0] : undefined;
      if (outcome !== undefined) {
        const recorded = [fire.name, fire.runAt, outcome.job.id];
        row = (await client.query<ScheduleRow>(this.#sql.recordScheduleRun, recorded)).rows[0] ?? row;
      }
    }
    return { fired: true, schedule: toSchedule(row), overlap, insert };
  }
}

/** Thrown inside a transaction to roll it back and run it again. */
const AGAIN = Symbol('again');
