import { z } from 'zod';
import { CATCH_UP_RULES, OVERLAP_RULES } from './schedule.js';
import { isTimeZone, Timetable } from './cron.js';
import { isoTime, jobRequestSchema } from './schemas.js';

/** The schedules' part of the HTTP contract (API.md "Schedules"), as the rest in schemas.ts. */

export const scheduleParamsSchema = z
  .object({
    name: z
      .string()
      .regex(/^[A-Za-z0-9._-]{1,128}$/, 'must be 1–128 letters, digits, ., _ or -')
      .meta({ examples: ['digest-every-5-min'] }),
  })
  .strict();

/** A job request as for POST /v1/jobs, less what only makes sense for one job. */
export const scheduleJobSchema = jobRequestSchema
  .omit({ runAt: true, delayMs: true, idempotencyKey: true, dependsOn: true })
  .strict();

export const scheduleRequestSchema = z
  .object({
    cron: z
      .string()
      .min(1)
      .max(200)
      .superRefine((cron, ctx) => {
        try {
          if (new Timetable(cron, 'UTC').nextAfter(Date.now()) === null) {
            ctx.addIssue({ code: 'custom', message: 'never matches a future time' });
          }
        } catch (error) {
          ctx.addIssue({
            code: 'custom',
            message: `is not a cron pattern of 5 or 6 fields: ${(error as Error).message}`,
          });
        }
      })
      .describe('Five fields (minute precision) or six (leading seconds).'),
    timezone: z
      .string()
      .min(1)
      .max(100)
      .refine(isTimeZone, { message: 'must be an IANA time zone name, e.g. Europe/Berlin' })
      .default('UTC')
      .describe('The IANA time zone the cron fields are read in.'),
    job: scheduleJobSchema.describe('What each tick submits: a job request as for POST /v1/jobs.'),
    overlap: z
      .enum(OVERLAP_RULES)
      .default('allow')
      .describe('skip: no new job while the last one the schedule made is not finished.'),
    catchUp: z
      .enum(CATCH_UP_RULES)
      .default('none')
      .describe('Ticks missed while no server ran: none drops them, last makes one job for the most recent.'),
    paused: z.boolean().default(false),
  })
  .strict()
  .meta({
    examples: [
      {
        cron: '*/5 * * * *',
        timezone: 'Europe/Berlin',
        job: { type: 'hash.sha256', payload: { data: 'report' } },
        overlap: 'skip',
      },
    ],
  });

export const scheduleSchema = z
  .object({
    name: z.string(),
    cron: z.string(),
    timezone: z.string(),
    job: z.record(z.string(), z.unknown()),
    overlap: z.enum(OVERLAP_RULES),
    catchUp: z.enum(CATCH_UP_RULES),
    paused: z.boolean(),
    nextRunAt: isoTime.nullable().describe('The next tick; null while paused.'),
    lastRunAt: isoTime.nullable().describe('The tick (or trigger) of the latest job.'),
    lastJobId: z.string().nullable(),
    createdAt: isoTime,
    updatedAt: isoTime,
  })
  .meta({ id: 'Schedule' });

export const scheduleListSchema = z.object({ schedules: z.array(scheduleSchema) });
