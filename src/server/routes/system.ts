import { z } from 'zod';
import type { AppOptions } from '../app.js';
import type { TypedApp } from '../typed-app.js';

const statusSchema = z.object({ status: z.string(), reason: z.string().optional() });

export function registerSystemRoutes(app: TypedApp, options: AppOptions): void {
  const { scheduler } = options;

  app.get(
    '/health',
    { schema: { summary: 'The process serves', tags: ['system'], response: { 200: statusSchema } } },
    () => ({
      status: 'ok',
    }),
  );

  app.get(
    '/ready',
    {
      schema: {
        summary: 'The store answers, the pool has live threads and the server is not draining',
        tags: ['system'],
        response: { 200: statusSchema, 503: statusSchema },
      },
    },
    async (_request, reply) => {
      let reason: string | null = null;
      if (scheduler.draining) reason = 'the server is shutting down';
      else if (!scheduler.poolAlive) reason = 'the worker pool has no live threads';
      else if (!(await options.storeHealthy().catch(() => false))) reason = 'the job store is unavailable';
      if (reason !== null) return reply.code(503).send({ status: 'unavailable', reason });
      return { status: 'ready' };
    },
  );

  app.get(
    '/metrics',
    { schema: { summary: 'Prometheus metrics', tags: ['system'], response: { 200: z.string() } } },
    async (_request, reply) => {
      const text = await scheduler.metrics.registry.metrics();
      return reply
        .type(scheduler.metrics.registry.contentType)
        .serializer((s: string) => s)
        .send(text);
    },
  );
}
