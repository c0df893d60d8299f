import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { CallbackDeliveryService } from '../../src/callbacks/delivery-service.js';
import { newJobId } from '../../src/jobs/ids.js';
import { renderBatch, renderJob } from '../../src/server/render.js';
import { PostgresStore } from '../../src/store/postgres/store.js';
import type { DeliveryAttempt } from '../../src/store/store.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { pollUntil } from '../support/poll.js';
import { type Receiver, startReceiver, verifySignature } from '../support/receiver.js';
import { claimJobs, claimUnstarted, completed, finishOne, newJob, rescueOnce } from '../support/store-fixtures.js';

/**
 * A batch's callback: one signed `batch.finished` delivery once every job of the batch is
 * terminal, through the API on one server, and on PostgreSQL when the jobs end on
 * several servers and one of them dies on the way.
 */
const SECRET = 'batch-callback-secret';
const ZERO = { waiting: 0, scheduled: 0, queued: 0, running: 0, retrying: 0, completed: 0, failed: 0, cancelled: 0 };
const SHORT_BACKOFF = { initialMs: 5, factor: 1, maxMs: 5, jitter: 'none' as const };

const closers: (() => Promise<void>)[] = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});

async function receiver(): Promise<Receiver> {
  const started = await startReceiver();
  closers.push(() => started.close());
  return started;
}

async function server(env: Record<string, string>): Promise<TestServer> {
  const started = await startServer({ KILN_STORE: 'sqlite', ...env }, undefined, { callbackBackoff: SHORT_BACKOFF });
  closers.push(() => started.close());
  return started;
}

function whenDelivered(delivery: CallbackDeliveryService, matches: (a: DeliveryAttempt) => boolean): Promise<void> {
  return new Promise((resolve) => {
    const stop = delivery.onRecorded((attempt) => {
      if (attempt.outcome !== 'delivered' || !matches(attempt)) return;
      stop();
      resolve();
    });
  });
}

describe('batch callbacks through the API', () => {
  it('POSTs { event, batch } once, signed, when the last job ends; a retry finishing again sends nothing', async () => {
    const kiln = await server({ KILN_CALLBACK_SECRET: SECRET, KILN_CALLBACK_ALLOW_PRIVATE: 'true' });
    const hook = await receiver();
    const callbacks = kiln.kiln.callbacks;
    assert.ok(callbacks);
    const url = `${hook.url}/batches`;
    const delivered = whenDelivered(callbacks, () => true);
    const posted = await kiln.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop' }, { type: 'noop' }, { type: 'noop', delayMs: 3_600_000 }],
      callback: { url, events: ['batch.finished'] },
    });
    assert.equal(posted.status, 201, posted.text);
    const { batch, jobs } = posted.body;
    await kiln.waitForJob(jobs[0].id);
    await kiln.waitForJob(jobs[1].id);
    assert.equal(hook.received.length, 0, 'one job is left');
    // Cancelling what is left ends the batch.
    const cancelled = await kiln.request('DELETE', `/v1/batches/${batch}`);
    assert.deepEqual(cancelled.body.counts, { ...ZERO, completed: 2, cancelled: 1 });
    const request = await hook.request(0);
    await delivered;
    assert.equal(request.path, '/batches');
    assert.equal(request.headers['kiln-event'], 'batch.finished');
    assert.ok(verifySignature(SECRET, request.headers['kiln-signature'] as string, request.rawBody));
    const read = await kiln.request('GET', `/v1/batches/${batch}`);
    assert.deepEqual(JSON.parse(request.rawBody), { event: 'batch.finished', batch: read.body });
    assert.deepEqual(read.body.callback, { url, events: ['batch.finished'] });

    // Opened again by a retry and finished again: no second delivery is made.
    assert.equal((await kiln.request('POST', `/v1/jobs/${jobs[2].id}/retry`)).status, 200);
    assert.equal((await kiln.waitForJob(jobs[2].id)).status, 'completed');
    assert.deepEqual((await kiln.request('GET', `/v1/batches/${batch}`)).body.counts, { ...ZERO, completed: 3 });
    assert.equal(await kiln.kiln.store.nextDeliveryAt(), null);
    assert.equal(hook.received.length, 1);
  });

  it('refuses a batch callback without KILN_CALLBACK_SECRET, to a private host, or for another event', async () => {
    const off = await server({});
    const disabled = await off.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop' }],
      callback: { url: 'https://example.com/hook' },
    });
    assert.equal(disabled.status, 400);
    assert.equal(disabled.body.code, 'callbacks_disabled');
    assert.deepEqual(
      disabled.body.errors.map((e: { path: string }) => e.path),
      ['callback'],
    );
    const guarded = await server({ KILN_CALLBACK_SECRET: SECRET });
    const privateHost = await guarded.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop' }],
      callback: { url: 'http://10.0.0.1/hook' },
    });
    assert.equal(privateHost.status, 400);
    assert.deepEqual(
      privateHost.body.errors.map((e: { path: string }) => e.path),
      ['callback.url'],
    );
    const wrongEvent = await guarded.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop' }],
      callback: { url: 'https://example.com/hook', events: ['completed'] },
    });
    assert.equal(wrongEvent.status, 400);
    assert.equal(wrongEvent.body.code, 'validation_error');
    assert.equal((await guarded.request('GET', '/v1/jobs')).body.jobs.length, 0, 'nothing was stored');
  });
});

describe('batch callbacks on PostgreSQL with several servers', () => {
  it('delivers once when the jobs end on two servers and a third died holding some of them', async () => {
    const schema = freshSchemaName();
    closers.push(() => dropSchema(schema));
    const open = () => PostgresStore.open({ url: TEST_PG_URL, schema, poolSize: 4, capacity: 10_000, pollMs: 60_000 });
    const a = await open();
    const b = await open();
    const dying = await open();
    closers.push(
      () => a.close(),
      () => b.close(),
    );
    const hook = await receiver();
    const services = [a, b].map(
      (store) =>
        new CallbackDeliveryService({
          store,
          secret: SECRET,
          timeoutMs: 2000,
          maxAttempts: 3,
          allowPrivate: true,
          render: renderJob,
          renderBatch,
          backoff: SHORT_BACKOFF,
        }),
    );
    closers.push(...services.map((service) => () => service.stop()));
    const delivered = Promise.race(services.map((service) => whenDelivered(service, () => true)));
    for (const service of services) service.start();

    const JOBS = 30;
    const batch = { id: newJobId(), createdAt: Date.now(), callback: { url: `${hook.url}/b` } };
    const jobs = Array.from({ length: JOBS }, () => newJob({ id: newJobId(), createdAt: Date.now(), batch: batch.id }));
    assert.equal((await a.insert(jobs, batch)).ok, true);
    // The dying server holds some under a short lease and never answers for them.
    const held = await claimUnstarted(dying, 5, 'dying-server', 200);
    assert.equal(held.length, 5);
    await dying.close();
    // The rest end on both servers at once.
    const onA = await claimJobs(a, 12, 'server-a');
    const onB = await claimJobs(b, 13, 'server-b');
    await Promise.all([
      ...onA.map((job) => finishOne(a, job, completed(1), 'server-a')),
      ...onB.map((job) => finishOne(b, job, completed(1), 'server-b')),
    ]);
    assert.equal((await a.batch(batch.id))?.finishedAt, null);
    // Its leases run out by the database's clock; the rescue gives them back, and they end.
    await pollUntil(
      () => rescueOnce(b),
      (moved) => moved > 0,
      { what: 'the dead server’s leases to run out' },
    );
    const rest = await claimJobs(a, 5, 'server-a');
    assert.equal(rest.length, 5);
    await Promise.all(rest.map((job) => finishOne(a, job, completed(1), 'server-a')));

    await delivered;
    await Promise.all(services.map((service) => service.stop()));
    assert.equal(hook.received.length, 1);
    const body = JSON.parse(hook.received[0]?.rawBody ?? 'null') as { event: string; batch: { counts: object } };
    assert.equal(body.event, 'batch.finished');
    assert.equal((body.batch.counts as { completed: number }).completed, JOBS);
    assert.equal(await a.nextDeliveryAt(), null);
  });
});
