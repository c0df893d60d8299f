import type { Scheduler } from '../../scheduler/scheduler.js';
import type { TypedApp } from '../typed-app.js';
import { STATS_BUCKET_MS } from '../../contract/stats.js';
import { problemResponses } from '../openapi.js';
import { statsQuerySchema, statsSchema } from '../../contract/schemas.js';

export function registerStatsRoutes(app: TypedApp, scheduler: Scheduler): void {
  app.get(
    '/v1/stats',
    {
      config: { scope: 'read' },
      schema: {
        summary: "This server's throughput and wait and run percentiles per 10-second bucket (kept in memory)",
        tags: ['queue'],
        querystring: statsQuerySchema,
        response: { 200: statsSchema, ...problemResponses(400, 401) },
      },
    },
    (request) => {
      const { window } = request.query;
      const { buckets, totals } = scheduler.stats.window(window);
      return {
        window,
        bucketSeconds: STATS_BUCKET_MS / 1000,
        buckets: buckets.map(({ at, ...figures }) => ({ at: new Date(at).toISOString(), ...figures })),
        totals,
      };
    },
  );
}
