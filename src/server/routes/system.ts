import { z } from 'zod';
import { grants, SCOPES } from '../../contract/scopes.js';
import { tokenSchema } from '../../contract/schemas.js';
import { KILN_VERSION } from '../../version.js';
import type { AppOptions } from '../app.js';
import { problemResponses } from '../openapi.js';
import type { TypedApp } from '../typed-app.js';

const healthSchema = z.object({ status: z.enum(['ok']) });
const readySchema = z.object({ status: z.enum(['ready']) });
const unreadySchema = z.object({ status: z.enum(['unavailable']), reason: z.string() });

const indexSchema = z.object({
  name: z.literal('kiln'),
  version: z.string(),
  links: z.object({
    ui: z.string().describe('The dashboard.'),
    docs: z.string().describe('Interactive API documentation.'),
    openapi: z.string().describe('The OpenAPI 3.1 document.'),
    jobs: z.string().describe('The API: jobs.'),
    queue: z.string().describe('The API: queue depth and capacity.'),
    tasks: z.string().describe('The API: registered tasks.'),
    schedules: z.string().describe('The API: schedules.'),
    stats: z.string().describe("The API: this server's recent throughput and latency."),
    metrics: z.string().describe('Prometheus metrics.'),
    health: z.string(),
    ready: z.string(),
  }),
});

/** The routes outside /v1; `/`, `/health` and `/ready` stay open whatever the tokens. */
export function registerSystemRoutes(app: TypedApp, options: AppOptions): void {
  const { scheduler } = options;

  app.get(
    '/',
    {
      schema: {
        summary: 'Where to go from here: the dashboard, the docs and the API',
        tags: ['system'],
        security: [],
        response: { 200: indexSchema },
      },
    },
    () => ({
      name: 'kiln' as const,
      version: KILN_VERSION,
      links: {
        ui: '/ui',
        docs: '/docs',
        openapi: '/openapi.json',
        jobs: '/v1/jobs',
        queue: '/v1/queue',
        tasks: '/v1/tasks',
        schedules: '/v1/schedules',
        stats: '/v1/stats',
        metrics: '/metrics',
        health: '/health',
        ready: '/ready',
      },
    }),
  );

  app.get(
    '/health',
    { schema: { summary: 'The process serves', tags: ['system'], security: [], response: { 200: healthSchema } } },
    () => ({ status: 'ok' as const }),
  );

  app.get(
    '/ready',
    {
      schema: {
        summary: 'The store answers, the pool has live threads and the server is not draining',
        tags: ['system'],
        security: [],
        response: { 200: readySchema, 503: unreadySchema },
      },
    },
    async (_request, reply) => {
      let reason: string | null = null;
      if (scheduler.draining) reason = 'the server is shutting down';
      else if (!scheduler.poolAlive) reason = 'the worker pool has no live threads';
      else if (!(await options.storeHealthy().catch(() => false))) reason = 'the job store is unavailable';
      if (reason !== null) return reply.code(503).send({ status: 'unavailable' as const, reason });
      return { status: 'ready' as const };
    },
  );

  app.get(
    '/v1/token',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'The token this request carries: its name and every scope it holds (what the dashboard may show)',
        tags: ['system'],
        response: { 200: tokenSchema, ...problemResponses(401) },
      },
    },
    (request) => {
      const token = request.apiToken;
      // Every scope the token holds, those its given scopes include too: a client need
      // not know how scopes nest to tell whether an operation's scope is among them.
      if (token === null) return { name: null, scopes: [...SCOPES] };
      return { name: token.name, scopes: SCOPES.filter((scope) => grants(token.scopes, scope)) };
    },
  );

  app.get(
    '/metrics',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Prometheus metrics (text exposition format 0.0.4)',
        tags: ['system'],
        response: {
          200: {
            description: 'The metrics in the Prometheus text format',
            content: { 'text/plain; version=0.0.4': { schema: z.string() } },
          },
          ...problemResponses(401),
        },
      },
    },
    async (_request, reply) => {
      const text = await scheduler.metrics.registry.metrics();
      return reply
        .type(scheduler.metrics.registry.contentType)
        .serializer((s: string) => s)
        .send(text);
    },
  );
}
