import type { LimitOverride } from '../../contract/limits.js';
import type { Scheduler } from '../../scheduler/scheduler.js';
import type { TaskInfo } from '../../scheduler/task-limit-overrides.js';
import type { TypedApp } from '../typed-app.js';
import {
  limitsOverrideSchema,
  nodesSchema,
  queueSchema,
  taskParamsSchema,
  taskSchema,
  tasksSchema,
} from '../../contract/schemas.js';
import { problemResponses } from '../openapi.js';

export function registerQueueRoutes(app: TypedApp, scheduler: Scheduler): void {
  const queueRoute = { tags: ['queue'], response: { 200: queueSchema, ...problemResponses(401, 503) } };
  const queueAction = {
    tags: ['queue'],
    response: { 200: queueSchema, ...problemResponses(400, 401, 413, 415, 503) },
  };

  app.get('/v1/queue', { config: { scope: 'read' }, schema: { summary: 'Depth and capacity', ...queueRoute } }, () =>
    scheduler.queueInfo(),
  );

  app.post(
    '/v1/queue/pause',
    {
      config: { scope: 'admin' },
      schema: {
        summary: 'Stop dispatching',
        description:
          'Running attempts finish; jobs claimed but not started go back, uncounted, so no job starts once this is answered.',
        ...queueAction,
      },
    },
    async () => {
      await scheduler.pause();
      return scheduler.queueInfo();
    },
  );

  app.post(
    '/v1/queue/resume',
    { config: { scope: 'admin' }, schema: { summary: 'Restart dispatching', ...queueAction } },
    async () => {
      await scheduler.resume();
      return scheduler.queueInfo();
    },
  );

  app.get(
    '/v1/nodes',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'The servers sharing the store, seen within the last three lease periods',
        tags: ['queue'],
        response: { 200: nodesSchema, ...problemResponses(401, 503) },
      },
    },
    async () => ({ nodes: await scheduler.nodes() }),
  );

  app.get(
    '/v1/tasks',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'The registered tasks',
        tags: ['tasks'],
        response: { 200: tasksSchema, ...problemResponses(401) },
      },
    },
    () => ({ tasks: scheduler.tasks().map(renderTask) }),
  );

  const limitsRoute = {
    tags: ['tasks'],
    params: taskParamsSchema,
    response: { 200: taskSchema, ...problemResponses(400, 401, 404, 413, 415, 503) },
  };

  app.put(
    '/v1/tasks/:name/limits',
    {
      config: { scope: 'admin' },
      schema: {
        summary: "Override a task's limits at run time (stored; every server applies them)",
        body: limitsOverrideSchema,
        ...limitsRoute,
      },
    },
    async (request) => {
      const { concurrency, rateLimit } = request.body;
      const override: LimitOverride = {
        ...(concurrency === undefined ? {} : { concurrency }),
        ...(rateLimit === undefined ? {} : { rateLimit }),
      };
      return renderTask(await scheduler.setLimits(request.params.name, override));
    },
  );

  app.delete(
    '/v1/tasks/:name/limits',
    { config: { scope: 'admin' }, schema: { summary: "Return to the task module's own limits", ...limitsRoute } },
    async (request) => renderTask(await scheduler.setLimits(request.params.name, null)),
  );
}

function renderTask(info: TaskInfo) {
  const { task } = info;
  return {
    name: task.name,
    description: task.description,
    payloadSchema: task.payloadJsonSchema,
    defaults: task.defaults,
    concurrency: task.concurrency,
    rateLimit: task.rateLimit,
    override: info.override,
    limits: info.effective,
    running: info.running,
    tokens: info.tokens,
  };
}
