import type { NewJob } from '../../contract/job.js';
import type { Schedule, ScheduleDefinition } from '../../contract/schedule.js';
import type { InsertResult } from './jobs.js';

/** Schedules (API.md "Schedules") and their ticks. */
export interface SchedulesFacet {
  /** Every schedule (API.md "Schedules"), by name. */
  schedules(): Promise<Schedule[]>;

  getSchedule(name: string): Promise<Schedule | null>;

  /**
   * Create a schedule, or replace the definition of one of that name (its `createdAt`,
   * `lastRunAt` and `lastJobId` are kept).
   */
  putSchedule(schedule: ScheduleDefinition): Promise<{ created: boolean; schedule: Schedule }>;

  /** Answers whether there was such a schedule. Its jobs keep its name. */
  removeSchedule(name: string): Promise<boolean>;

  /**
   * One tick of a schedule, in one transaction: a compare-and-set of `nextRunAt` (only the
   * caller that still sees the schedule as `expected` fires; with many servers, one does),
   * then, unless the overlap rule holds it back, the insert of `job` (as `insert` does,
   * idempotency included) and the schedule's `lastRunAt` and `lastJobId`.
   */
  fireSchedule(fire: ScheduleFire): Promise<FireResult>;
}

export interface ScheduleFire {
  name: string;
  /**
   * The schedule as the caller read it: the tick applies only while its `nextRunAt` and
   * `updatedAt` are still these. Null: a trigger (one job now; `nextRunAt` is not touched).
   */
  expected: { nextRunAt: number | null; updatedAt: number } | null;
  /** `nextRunAt` after the tick. */
  nextRunAt: number | null;
  /** The tick time (or the trigger's), recorded as `lastRunAt` with the job. */
  runAt: number;
  /** The job to make; null: the tick makes none (dropped, or its task type is not registered). */
  job: NewJob | null;
  /** No job while the last job the schedule made is not terminal. */
  skipOverlap: boolean;
}

export type FireResult =
  /** Another caller fired this tick first, the schedule changed, or it is gone. */
  | { fired: false }
  /**
   * `overlap`: the last job is not finished, so no job was made. `insert`: what inserting
   * the job answered (a refusal leaves the tick fired, without a job); null when there was none.
   */
  | { fired: true; schedule: Schedule; overlap: boolean; insert: InsertResult | null };
