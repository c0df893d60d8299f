import { noSuchBatch } from '../../scheduler/errors.js';
import type { Scheduler } from '../../scheduler/scheduler.js';
import { batchParamsSchema, batchSchema } from '../../contract/schemas.js';
import { problemResponses } from '../openapi.js';
import { renderBatch } from '../render.js';
import type { TypedApp } from '../typed-app.js';

export function registerBatchRoutes(app: TypedApp, scheduler: Scheduler): void {
  app.get(
    '/v1/batches/:id',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'A batch: its jobs counted by status, and whether all are finished',
        tags: ['jobs'],
        params: batchParamsSchema,
        response: { 200: batchSchema, ...problemResponses(400, 401, 404, 503) },
      },
    },
    async (request) => {
      const batch = await scheduler.batch(request.params.id);
      if (batch === null) throw noSuchBatch(request.params.id);
      return renderBatch(batch);
    },
  );

  app.delete(
    '/v1/batches/:id',
    {
      config: { scope: 'admin' },
      schema: {
        summary: 'Cancel every unfinished job of a batch; answers the batch',
        tags: ['jobs'],
        params: batchParamsSchema,
        response: { 200: batchSchema, ...problemResponses(400, 401, 404, 503) },
      },
    },
    async (request) => {
      const batch = await scheduler.cancelBatch(request.params.id);
      if (batch === null) throw noSuchBatch(request.params.id);
      return renderBatch(batch);
    },
  );
}
