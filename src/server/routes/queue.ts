import type { Scheduler } from '../../scheduler/scheduler.js';
import type { TaskRegistry } from '../../workers/registry.js';
import { nodesSchema, problemSchema, queueSchema, tasksSchema } from '../schemas.js';
import type { TypedApp } from '../typed-app.js';

export function registerQueueRoutes(app: TypedApp, scheduler: Scheduler, registry: TaskRegistry): void {
  const queueRoute = { tags: ['queue'], response: { 200: queueSchema, 401: problemSchema } };

  app.get('/v1/queue', { schema: { summary: 'Depth and capacity', ...queueRoute } }, () => scheduler.queueInfo());

  app.post('/v1/queue/pause', { schema: { summary: 'Stop dispatching', ...queueRoute } }, async () => {
    await scheduler.pause();
    return scheduler.queueInfo();
  });

  app.post('/v1/queue/resume', { schema: { summary: 'Restart dispatching', ...queueRoute } }, async () => {
    await scheduler.resume();
    return scheduler.queueInfo();
  });

  app.get(
    '/v1/nodes',
    {
      schema: {
        summary: 'The servers sharing the store, seen within the last three lease periods',
        tags: ['queue'],
        response: { 200: nodesSchema, 401: problemSchema, 503: problemSchema },
      },
    },
    async () => ({ nodes: await scheduler.nodes() }),
  );

  app.get(
    '/v1/tasks',
    {
      schema: { summary: 'The registered tasks', tags: ['tasks'], response: { 200: tasksSchema, 401: problemSchema } },
    },
    () => ({
      tasks: registry.list().map((task) => ({
        name: task.name,
        description: task.description,
        payloadSchema: task.payloadJsonSchema,
        defaults: task.defaults,
        concurrency: task.concurrency,
        rateLimit: task.rateLimit,
      })),
    }),
  );
}
