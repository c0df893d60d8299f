import { z } from 'zod';
import type { Scheduler } from '../../scheduler/scheduler.js';
import type { TypedApp } from '../typed-app.js';
import { groupEntrySchema, groupParamsSchema, groupsSchema, limitsOverrideSchema } from '../../contract/schemas.js';
import { problemResponses } from '../openapi.js';

export function registerGroupRoutes(app: TypedApp, scheduler: Scheduler): void {
  app.get(
    '/v1/groups',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Every group with queued or running jobs or limits',
        tags: ['groups'],
        response: { 200: groupsSchema, ...problemResponses(401, 503) },
      },
    },
    async () => ({ groups: await scheduler.groups() }),
  );

  app.put(
    '/v1/groups/:group/limits',
    {
      config: { scope: 'admin' },
      schema: {
        summary: "Set a group's limits (stored; every server applies them)",
        tags: ['groups'],
        params: groupParamsSchema,
        body: limitsOverrideSchema,
        response: { 200: groupEntrySchema, ...problemResponses(400, 401, 413, 415, 503) },
      },
    },
    async (request) => {
      const { concurrency, rateLimit } = request.body;
      const entry = await scheduler.setGroupLimits(request.params.group, {
        concurrency: concurrency ?? null,
        rateLimit: rateLimit ?? null,
      });
      return entry as NonNullable<typeof entry>;
    },
  );

  app.delete(
    '/v1/groups/:group/limits',
    {
      config: { scope: 'admin' },
      schema: {
        summary: "Remove a group's limits",
        tags: ['groups'],
        params: groupParamsSchema,
        response: { 204: z.null().describe('removed (or there were none)'), ...problemResponses(400, 401, 503) },
      },
    },
    async (request, reply) => {
      await scheduler.setGroupLimits(request.params.group, null);
      return reply.code(204).send(null);
    },
  );
}
