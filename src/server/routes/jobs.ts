import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { isTerminal, type Job } from '../../contract/job.js';
import { notFound, validationError } from '../../scheduler/errors.js';
import type { Scheduler } from '../../scheduler/scheduler.js';
import type { SubmitItem } from '../../scheduler/submission.js';
import { renderDelivery, renderJob, renderSummary } from '../render.js';
import {
  type BatchItem,
  batchRequestSchema,
  deliveriesSchema,
  idempotencyHeaderSchema,
  traceHeadersSchema,
  type JobRequest,
  jobBatchResponseSchema,
  jobListSchema,
  jobParamsSchema,
  jobRequestSchema,
  jobSchema,
  listQuerySchema,
  waitQuerySchema,
} from '../../contract/schemas.js';
import { problemResponses } from '../openapi.js';
import type { TypedApp } from '../typed-app.js';
import { parseTraceparent } from '../../tracing/trace-context.js';

const LOCATION = { Location: { description: 'The path of the job: `/v1/jobs/{id}`.', type: 'string' } };

const SSE_KEEPALIVE_MS = 15_000;
/** What fastify gives an object it serializes, for an answer sent as text already serialized. */
const JSON_TYPE = 'application/json; charset=utf-8';

/** Sends JSON already serialized, as fastify would have sent the object (its serializer is JSON.stringify). */
function sendJsonText(reply: FastifyReply, text: string): FastifyReply {
  return reply.type(JSON_TYPE).send(text);
}

function toSubmitItem(body: JobRequest | BatchItem, idempotencyKey: string | undefined, path: string): SubmitItem {
  const item: SubmitItem = { type: body.type };
  if (body.payload !== undefined) item.payload = body.payload;
  if (body.priority !== undefined) item.priority = body.priority;
  if (body.maxAttempts !== undefined) item.maxAttempts = body.maxAttempts;
  if (body.timeoutMs !== undefined) item.timeoutMs = body.timeoutMs;
  if (body.backoff !== undefined) item.backoff = body.backoff;
  if (body.runAt !== undefined) {
    const runAt = Date.parse(body.runAt);
    if (Number.isNaN(runAt)) throw validationError([{ path: `${path}runAt`, message: 'is not a valid time' }]);
    item.runAt = runAt;
  }
  if (body.delayMs !== undefined) item.delayMs = body.delayMs;
  if (idempotencyKey !== undefined) item.idempotencyKey = idempotencyKey;
  if (body.dependsOn !== undefined) item.dependsOn = body.dependsOn;
  if (body.metadata !== undefined) item.metadata = body.metadata;
  if (body.group !== undefined) item.group = body.group;
  if ('ref' in body && body.ref !== undefined) item.ref = body.ref;
  if (body.dedupe !== undefined) item.dedupe = body.dedupe === true ? {} : body.dedupe;
  if (body.callback !== undefined) item.callback = body.callback;
  return item;
}

export function registerJobRoutes(app: TypedApp, scheduler: Scheduler): void {
  app.post(
    '/v1/jobs',
    {
      config: { scope: 'submit' },
      schema: {
        summary: 'Submit a job',
        tags: ['jobs'],
        body: jobRequestSchema,
        headers: idempotencyHeaderSchema,
        response: {
          200: {
            description: 'The job an idempotency key or dedupe found; nothing new was created',
            headers: LOCATION,
            content: { 'application/json': { schema: jobSchema } },
          },
          201: {
            description: 'Created and stored',
            headers: LOCATION,
            content: { 'application/json': { schema: jobSchema } },
          },
          ...problemResponses(400, 401, 409, 413, 415, 429, 503),
        },
      },
    },
    async (request, reply) => {
      const header = request.headers['idempotency-key'];
      const field = request.body.idempotencyKey;
      if (header !== undefined && field !== undefined && header !== field) {
        throw validationError([
          { path: 'idempotencyKey', message: 'differs from the Idempotency-Key header; give one or make them equal' },
        ]);
      }
      const [submitted] = await scheduler.submit([toSubmitItem(request.body, field ?? header, '')], {
        batch: false,
        trace: parseTraceparent(request.headers.traceparent, request.headers.tracestate),
      });
      if (submitted === undefined) throw new Error('submit answered no job');
      return reply
        .code(submitted.created ? 201 : 200)
        .header('location', `/v1/jobs/${submitted.job.id}`)
        .send(renderJob(submitted.job));
    },
  );

  app.post(
    '/v1/jobs/batch',
    {
      config: { scope: 'submit' },
      schema: {
        summary: 'Submit up to 1000 jobs at once, all or nothing, as a batch',
        tags: ['jobs'],
        body: batchRequestSchema,
        headers: traceHeadersSchema,
        response: { 201: jobBatchResponseSchema, ...problemResponses(400, 401, 409, 413, 415, 429, 503) },
      },
    },
    async (request, reply) => {
      const items = request.body.jobs.map((job, index) => toSubmitItem(job, job.idempotencyKey, `jobs.${index}.`));
      const { batch, submitted } = await scheduler.submitBatch(
        items,
        request.body.callback ?? null,
        parseTraceparent(request.headers.traceparent, request.headers.tracestate),
      );
      return reply.code(201).send({ batch, jobs: submitted.map((s) => renderJob(s.job)) });
    },
  );

  app.get(
    '/v1/jobs',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'List jobs, newest first',
        tags: ['jobs'],
        querystring: listQuerySchema,
        response: { 200: jobListSchema, ...problemResponses(400, 401, 503) },
      },
    },
    async (request) => {
      const { status, type, group, schedule, batch, limit, cursor } = request.query;
      const page = await scheduler.list({
        limit,
        ...(status === undefined ? {} : { statuses: status }),
        ...(type === undefined ? {} : { type }),
        ...(group === undefined ? {} : { group }),
        ...(schedule === undefined ? {} : { schedule }),
        ...(batch === undefined ? {} : { batch }),
        ...(cursor === undefined ? {} : { cursor }),
      });
      return { jobs: page.jobs.map(renderSummary), nextCursor: page.nextCursor };
    },
  );

  app.get(
    '/v1/jobs/:id',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'A job: status and result; ?wait= long-polls until it is finished',
        tags: ['jobs'],
        params: jobParamsSchema,
        querystring: waitQuerySchema,
        response: { 200: jobSchema, ...problemResponses(400, 401, 404, 503) },
      },
    },
    async (request, reply) => {
      // A finished job's answer, as it was sent before (scheduler/finished-answers.ts); while
      // the store is down, reads answer 503 as every other read does.
      const answers = scheduler.finishedAnswers;
      const kept = scheduler.storeAvailable ? answers.get(request.params.id) : undefined;
      if (kept !== undefined) return sendJsonText(reply, kept);
      const epoch = answers.epoch();
      const waitMs = Math.round((request.query.wait ?? 0) * 1000);
      const closed = new AbortController();
      const onClose = () => closed.abort();
      request.raw.once('close', onClose);
      try {
        const job = await scheduler.waitForTerminal(request.params.id, waitMs, closed.signal);
        if (job === null) throw notFound(request.params.id);
        if (!isTerminal(job.status)) return renderJob(job);
        const text = JSON.stringify(renderJob(job));
        answers.keep(job.id, text, epoch);
        return sendJsonText(reply, text);
      } finally {
        request.raw.off('close', onClose);
      }
    },
  );

  app.get(
    '/v1/jobs/:id/events',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Server-Sent Events: the job now, then on every change, until it is finished',
        tags: ['jobs'],
        params: jobParamsSchema,
        response: {
          200: {
            description: 'One `event: job` with the job now, then one per change; ends after the terminal one',
            content: { 'text/event-stream': { schema: z.string() } },
          },
          ...problemResponses(400, 401, 404, 503),
        },
      },
    },
    async (request, reply) => streamJobEvents(scheduler, request.params.id, request, reply),
  );

  app.get(
    '/v1/jobs/:id/callbacks',
    {
      config: { scope: 'read' },
      schema: {
        summary: "The job's callback deliveries, attempt by attempt",
        tags: ['jobs'],
        params: jobParamsSchema,
        response: { 200: deliveriesSchema, ...problemResponses(400, 401, 404, 503) },
      },
    },
    async (request) => {
      const records = await scheduler.deliveries(request.params.id);
      if (records === null) throw notFound(request.params.id);
      return { deliveries: records.map(renderDelivery) };
    },
  );

  app.post(
    '/v1/jobs/:id/cancel',
    {
      config: { scope: 'admin' },
      schema: {
        summary: 'Cancel a job that is not finished',
        tags: ['jobs'],
        params: jobParamsSchema,
        response: { 200: jobSchema, ...problemResponses(400, 401, 404, 409, 413, 415, 503) },
      },
    },
    async (request) => renderJob(await scheduler.cancel(request.params.id)),
  );

  app.post(
    '/v1/jobs/:id/retry',
    {
      config: { scope: 'admin' },
      schema: {
        summary: 'Give a failed or cancelled job a fresh attempt budget',
        tags: ['jobs'],
        params: jobParamsSchema,
        response: { 200: jobSchema, ...problemResponses(400, 401, 404, 409, 413, 415, 503) },
      },
    },
    async (request) => renderJob(await scheduler.retry(request.params.id)),
  );

  app.delete(
    '/v1/jobs/:id',
    {
      config: { scope: 'admin' },
      schema: {
        summary: "Remove a finished job's record",
        tags: ['jobs'],
        params: jobParamsSchema,
        response: { 204: z.null().describe('removed'), ...problemResponses(400, 401, 404, 409, 503) },
      },
    },
    async (request, reply) => {
      await scheduler.remove(request.params.id);
      return reply.code(204).send(null);
    },
  );
}

async function streamJobEvents(
  scheduler: Scheduler,
  id: string,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  // Subscribe before reading, so no change between the read and the subscription is
  // lost; changes seen before the first frame are only replayed if they end the job.
  const early: (Job | null)[] = [];
  let send: (job: Job | null) => void = (job) => {
    early.push(job);
  };
  const unsubscribe = scheduler.events.subscribe(id, (job) => send(job));
  let job: Job | null;
  try {
    job = await scheduler.get(id);
  } catch (error) {
    unsubscribe();
    throw error;
  }
  if (job === null) {
    unsubscribe();
    throw notFound(id);
  }
  // What this stream shows from its own reads counts as news to the sweep of watched jobs.
  scheduler.events.note(job);
  reply.hijack();
  const raw = reply.raw;
  raw.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache, no-transform',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
  });
  let shown = '';
  // A change whose news was lost (a notification between servers) comes from the
  // scheduler's sweep of watched jobs, as any other change.
  const keepalive = setInterval(() => raw.write(': keepalive\n\n'), SSE_KEEPALIVE_MS);
  keepalive.unref();
  const close = () => {
    clearInterval(keepalive);
    unsubscribe();
    scheduler.drainSignal.removeEventListener('abort', close);
    if (!raw.writableEnded) raw.end();
  };
  request.raw.once('close', close);
  // A draining server ends its streams, so clients reconnect to a live one.
  if (scheduler.drainSignal.aborted) queueMicrotask(close);
  else scheduler.drainSignal.addEventListener('abort', close, { once: true });
  const write = (current: Job, text = JSON.stringify(renderJob(current))) => {
    if (raw.writableEnded) return;
    shown = text;
    raw.write(`event: job\ndata: ${shown}\n\n`);
    if (isTerminal(current.status)) close();
  };
  write(job);
  if (isTerminal(job.status)) return;
  // News that came while the job was read may be newer than the read: on a shared store
  // the news and the read travel over different connections. Read again until a read
  // sees no news arrive, so the stream never rests on a state the job has left.
  for (let round = 0; early.length > 0 && !raw.writableEnded; round++) {
    if (early.includes(null)) {
      close();
      return;
    }
    const ending = (early as Job[]).find((e) => isTerminal(e.status));
    if (ending !== undefined) {
      write(ending);
      return;
    }
    const newest = early[early.length - 1] as Job;
    early.length = 0;
    const fresh = round < 3 ? await scheduler.get(id).catch(() => newest) : newest;
    if (fresh === null) {
      close();
      return;
    }
    scheduler.events.note(fresh);
    const text = JSON.stringify(renderJob(fresh));
    if (text !== shown) write(fresh, text);
  }
  // A job gone (removed elsewhere) ends the stream; the sweep may tell what was shown already.
  send = (current) => {
    if (current === null) {
      close();
      return;
    }
    const text = JSON.stringify(renderJob(current));
    if (text !== shown || isTerminal(current.status)) write(current, text);
  };
}
