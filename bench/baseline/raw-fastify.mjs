/**
 * Raw fastify baseline for the ingest figure (a child process of a benchmark): the
 * root's fastify and zod, POST /v1/jobs validated with Kiln's own request schema
 * (dist/src/contract/schemas.js) and the noop task's payload schema, answered 201 with a
 * job-shaped body of the same size as Kiln's. No store, no queue, no logging.
 *
 * Input: one JSON argument { port }.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Fastify from 'fastify';
import { ROOT_DIR } from '../lib/processes.mjs';

const { port } = JSON.parse(process.argv[2] ?? '{}');
const dist = (...parts) => pathToFileURL(join(ROOT_DIR, 'dist', 'src', ...parts)).href;
const { jobRequestSchema } = await import(dist('contract', 'schemas.js'));
const { default: noop } = await import(dist('workers', 'tasks', 'noop.js'));

const app = Fastify({ logger: false });
app.get('/health', async () => ({ status: 'ok' }));
app.post('/v1/jobs', async (request, reply) => {
  const body = jobRequestSchema.safeParse(request.body);
  const payload = body.success ? noop.schema.safeParse(body.data.payload ?? {}) : null;
  if (!body.success || !payload.success) {
    return reply.code(400).send({ type: 'about:blank', title: 'Bad Request', status: 400, code: 'validation_error' });
  }
  const id = randomUUID();
  const now = new Date().toISOString();
  return reply
    .code(201)
    .header('location', `/v1/jobs/${id}`)
    .send({
      id,
      type: body.data.type,
      status: 'queued',
      priority: body.data.priority ?? 5,
      payload: payload.data,
      result: null,
      error: null,
      attempts: 0,
      maxAttempts: 3,
      timeoutMs: 60000,
      backoff: { initialMs: 1000, factor: 2, maxMs: 300000, jitter: 'full' },
      progress: null,
      idempotencyKey: null,
      dependsOn: [],
      metadata: {},
      runAt: null,
      createdAt: now,
      startedAt: null,
      finishedAt: null,
    });
});
await app.listen({ port, host: '127.0.0.1' });
const stop = () => app.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
