/**
 * Raw fastify baseline for the status-poll figure (a child process of a benchmark): the
 * root's fastify answering GET /v1/jobs/{id} with the same job documents Kiln served,
 * from a Map in memory. No store, no auth, no logging.
 *
 * Input: one JSON argument { port, documents } (documents: the jobs as Kiln rendered them).
 */
import Fastify from 'fastify';

const { port, documents } = JSON.parse(process.argv[2] ?? '{}');
const byId = new Map(documents.map((job) => [job.id, job]));
const app = Fastify({ logger: false });
app.get('/health', async () => ({ status: 'ok' }));
app.get('/v1/jobs/:id', async (request, reply) => {
  const job = byId.get(request.params.id);
  if (job === undefined) return reply.code(404).send({ type: 'about:blank', title: 'Not Found', status: 404 });
  return job;
});
await app.listen({ port, host: '127.0.0.1' });
const stop = () => app.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
