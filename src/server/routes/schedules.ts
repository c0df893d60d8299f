import { z } from 'zod';
import type { Scheduler } from '../../scheduler/scheduler.js';
import { renderJob, renderSchedule } from '../render.js';
import { jobSchema } from '../../contract/schemas.js';
import {
  scheduleListSchema,
  scheduleParamsSchema,
  scheduleRequestSchema,
  scheduleSchema,
} from '../../contract/schedule-schemas.js';
import { problemResponses } from '../openapi.js';
import type { TypedApp } from '../typed-app.js';

const scheduleLocation = {
  Location: { description: 'The path of the schedule: `/v1/schedules/{name}`.', type: 'string' },
};

/** API.md "Schedules": create or replace, read, remove, pause, resume and trigger schedules. */
export function registerScheduleRoutes(app: TypedApp, scheduler: Scheduler): void {
  const schedules = scheduler.schedules;

  app.put(
    '/v1/schedules/:name',
    {
      config: { scope: 'admin' },
      schema: {
        summary: 'Create or replace a schedule: a job made on a cron timetable',
        tags: ['schedules'],
        params: scheduleParamsSchema,
        body: scheduleRequestSchema,
        response: {
          200: {
            description: 'Replaced',
            headers: scheduleLocation,
            content: { 'application/json': { schema: scheduleSchema } },
          },
          201: {
            description: 'Created',
            headers: scheduleLocation,
            content: { 'application/json': { schema: scheduleSchema } },
          },
          ...problemResponses(400, 401, 413, 415, 503),
        },
      },
    },
    async (request, reply) => {
      const { created, schedule } = await schedules.put({ name: request.params.name, ...request.body });
      return reply
        .code(created ? 201 : 200)
        .header('location', `/v1/schedules/${schedule.name}`)
        .send(renderSchedule(schedule));
    },
  );

  app.get(
    '/v1/schedules',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'List the schedules, by name',
        tags: ['schedules'],
        response: { 200: scheduleListSchema, ...problemResponses(401, 503) },
      },
    },
    async () => ({ schedules: (await schedules.list()).map(renderSchedule) }),
  );

  app.get(
    '/v1/schedules/:name',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'A schedule',
        tags: ['schedules'],
        params: scheduleParamsSchema,
        response: { 200: scheduleSchema, ...problemResponses(400, 401, 404, 503) },
      },
    },
    async (request) => renderSchedule(await schedules.get(request.params.name)),
  );

  app.delete(
    '/v1/schedules/:name',
    {
      config: { scope: 'admin' },
      schema: {
        summary: 'Remove a schedule (its jobs stay)',
        tags: ['schedules'],
        params: scheduleParamsSchema,
        response: { 204: z.null().describe('removed'), ...problemResponses(400, 401, 404, 503) },
      },
    },
    async (request, reply) => {
      await schedules.remove(request.params.name);
      return reply.code(204).send(null);
    },
  );

  for (const action of ['pause', 'resume'] as const) {
    app.post(
      `/v1/schedules/:name/${action}`,
      {
        config: { scope: 'admin' },
        schema: {
          summary:
            action === 'pause'
              ? 'Pause a schedule: no ticks until resumed'
              : 'Resume a schedule: ticks again from now on (none made up)',
          tags: ['schedules'],
          params: scheduleParamsSchema,
          response: { 200: scheduleSchema, ...problemResponses(400, 401, 404, 413, 415, 503) },
        },
      },
      async (request) => renderSchedule(await schedules.setPaused(request.params.name, action === 'pause')),
    );
  }

  app.post(
    '/v1/schedules/:name/trigger',
    {
      config: { scope: 'admin' },
      schema: {
        summary: 'One job of the schedule now, whatever its timetable, overlap rule and pause',
        tags: ['schedules'],
        params: scheduleParamsSchema,
        response: {
          201: {
            description: 'The job made now',
            headers: { Location: { description: 'The path of the job: `/v1/jobs/{id}`.', type: 'string' } },
            content: { 'application/json': { schema: jobSchema } },
          },
          ...problemResponses(400, 401, 404, 413, 415, 429, 503),
        },
      },
    },
    async (request, reply) => {
      const job = await scheduler.triggerSchedule(request.params.name);
      return reply.code(201).header('location', `/v1/jobs/${job.id}`).send(renderJob(job));
    },
  );
}
