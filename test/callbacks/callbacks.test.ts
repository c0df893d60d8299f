import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { DeliveryAttempt } from '../../src/store/store.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { type Receiver, startReceiver, verifySignature } from '../support/receiver.js';

const SECRET = 'whsec-test-0123456789';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** A few ms between attempts: the retries are real, only short. */
const SHORT_BACKOFF = { initialMs: 5, factor: 1, maxMs: 5, jitter: 'none' as const };

const servers: TestServer[] = [];
const receivers: Receiver[] = [];
after(async () => {
  for (const server of servers) await server.close();
  for (const receiver of receivers) await receiver.close();
});

async function server(env: Record<string, string> = {}): Promise<TestServer> {
  const started = await startServer(
    { KILN_CALLBACK_SECRET: SECRET, KILN_CALLBACK_ALLOW_PRIVATE: 'true', ...env },
    undefined,
    { callbackBackoff: SHORT_BACKOFF },
  );
  servers.push(started);
  return started;
}

async function receiver(...args: Parameters<typeof startReceiver>): Promise<Receiver> {
  const started = await startReceiver(...args);
  receivers.push(started);
  return started;
}

/** Resolves with the first recorded attempt that `matches` (the delivery service's own signal). */
function whenRecorded(kiln: TestServer, matches: (attempt: DeliveryAttempt) => boolean): Promise<DeliveryAttempt> {
  const callbacks = kiln.kiln.callbacks;
  if (callbacks === null) throw new Error('callbacks are off');
  return new Promise((resolve) => {
    const stop = callbacks.onRecorded((attempt) => {
      if (!matches(attempt)) return;
      stop();
      resolve(attempt);
    });
  });
}

describe('callbacks through the API', () => {
  it('POSTs the finished job, signed so that a receiver can verify it, with its event and delivery id', async () => {
    const kiln = await server();
    const hook = await receiver();
    const submitted = await kiln.request('POST', '/v1/jobs', {
      type: 'test.quick',
      payload: { n: 7 },
      callback: { url: `${hook.url}/hooks/kiln` },
    });
    assert.equal(submitted.status, 201, submitted.text);
    assert.deepEqual(submitted.body.callback, { url: `${hook.url}/hooks/kiln` });
    const id = submitted.body.id as string;
    const recorded = whenRecorded(kiln, (attempt) => attempt.outcome === 'delivered');

    const request = await hook.request(0);
    assert.equal(request.method, 'POST');
    assert.equal(request.path, '/hooks/kiln');
    assert.match(String(request.headers['content-type']), /^application\/json/);
    assert.equal(request.headers['kiln-event'], 'job.completed');
    assert.match(String(request.headers['kiln-delivery']), UUID);
    const signature = request.headers['kiln-signature'] as string;
    assert.ok(verifySignature(SECRET, signature, request.rawBody), `the signature verifies: ${signature}`);
    // Another secret, a changed body or an old timestamp does not verify.
    assert.equal(verifySignature('another secret', signature, request.rawBody), false);
    assert.equal(verifySignature(SECRET, signature, request.rawBody.replace('"n":7', '"n":8')), false);
    assert.equal(verifySignature(SECRET, signature, request.rawBody, Math.floor(Date.now() / 1000) + 3600), false);

    const job = await kiln.request('GET', `/v1/jobs/${id}`);
    assert.deepEqual(JSON.parse(request.rawBody), job.body);
    assert.equal(job.body.status, 'completed');
    assert.deepEqual(job.body.result, { n: 7 });

    await recorded;
    const deliveries = await kiln.request('GET', `/v1/jobs/${id}/callbacks`);
    assert.equal(deliveries.status, 200);
    assert.equal(deliveries.body.deliveries.length, 1);
    const [delivery] = deliveries.body.deliveries;
    assert.equal(delivery.id, request.headers['kiln-delivery']);
    assert.equal(delivery.event, 'job.completed');
    assert.equal(delivery.attempt, 1);
    assert.equal(delivery.status, 'delivered');
    assert.equal(delivery.httpStatus, 204);
    assert.equal(delivery.error, null);
    assert.ok(!Number.isNaN(Date.parse(delivery.at)));
  });

  it('retries with backoff: 500, 500, then 200 is three attempts of one delivery, delivered', async () => {
    const kiln = await server();
    const hook = await receiver((_request, n, response) => response.writeHead(n < 2 ? 500 : 200).end('ok'));
    const delivered = whenRecorded(kiln, (attempt) => attempt.outcome === 'delivered');
    const submitted = await kiln.request('POST', '/v1/jobs', { type: 'test.quick', callback: { url: hook.url } });
    assert.equal(submitted.status, 201, submitted.text);
    await delivered;

    assert.equal(hook.received.length, 3);
    const ids = new Set(hook.received.map((request) => request.headers['kiln-delivery']));
    assert.equal(ids.size, 1, 'every attempt carries the same Kiln-Delivery');
    const bodies = new Set(hook.received.map((request) => request.rawBody));
    assert.equal(bodies.size, 1, 'every attempt sends the same body');
    for (const request of hook.received)
      assert.ok(verifySignature(SECRET, request.headers['kiln-signature'] as string, request.rawBody));

    const deliveries = (await kiln.request('GET', `/v1/jobs/${submitted.body.id}/callbacks`)).body.deliveries;
    assert.deepEqual(
      deliveries.map((d: any) => [d.attempt, d.status, d.httpStatus]),
      [
        [1, 'failed', 500],
        [2, 'failed', 500],
        [3, 'delivered', 200],
      ],
    );
    assert.equal(deliveries[0].error, 'the receiver answered 500');
    const metrics = (await kiln.request('GET', '/metrics')).text;
    assert.match(metrics, /kiln_callback_deliveries_total\{outcome="retry"\} 2/);
    assert.match(metrics, /kiln_callback_deliveries_total\{outcome="delivered"\} 1/);
    assert.match(metrics, /kiln_callback_deliveries_total\{outcome="failed"\} 0/);
  });

  it('gives up after KILN_CALLBACK_MAX_ATTEMPTS: the delivery is failed', async () => {
    const kiln = await server({ KILN_CALLBACK_MAX_ATTEMPTS: '3' });
    const hook = await receiver((_request, _n, response) => response.writeHead(503).end());
    const failed = whenRecorded(kiln, (attempt) => attempt.outcome === 'failed');
    const submitted = await kiln.request('POST', '/v1/jobs', { type: 'test.fatal', callback: { url: hook.url } });
    assert.equal(submitted.status, 201, submitted.text);
    const last = await failed;
    assert.equal(last.attempt, 3);
    assert.equal(hook.received.length, 3);
    assert.equal(hook.received[0]?.headers['kiln-event'], 'job.failed');
    const deliveries = (await kiln.request('GET', `/v1/jobs/${submitted.body.id}/callbacks`)).body.deliveries;
    assert.deepEqual(
      deliveries.map((d: any) => [d.attempt, d.status, d.httpStatus]),
      [
        [1, 'failed', 503],
        [2, 'failed', 503],
        [3, 'failed', 503],
      ],
    );
    const metrics = (await kiln.request('GET', '/metrics')).text;
    assert.match(metrics, /kiln_callback_deliveries_total\{outcome="failed"\} 1/);
    assert.match(metrics, /kiln_callback_deliveries_total\{outcome="retry"\} 2/);
  });

  it('delivers only the events the callback lists', async () => {
    const kiln = await server();
    const hook = await receiver();
    const completes = await kiln.request('POST', '/v1/jobs', {
      type: 'test.quick',
      callback: { url: hook.url, events: ['failed'] },
    });
    assert.equal(completes.status, 201, completes.text);
    assert.deepEqual(completes.body.callback, { url: hook.url, events: ['failed'] });
    assert.equal((await kiln.waitForJob(completes.body.id)).status, 'completed');
    const fails = await kiln.request('POST', '/v1/jobs', {
      type: 'test.fatal',
      callback: { url: hook.url, events: ['failed'] },
    });
    const delivered = whenRecorded(kiln, (attempt) => attempt.outcome === 'delivered');
    await delivered;
    assert.equal(hook.received.length, 1);
    assert.equal(JSON.parse(hook.received[0]?.rawBody ?? '{}').id, fails.body.id);
    // The completed job's transition is long stored: it made no delivery.
    const none = await kiln.request('GET', `/v1/jobs/${completes.body.id}/callbacks`);
    assert.deepEqual(none.body, { deliveries: [] });
  });

  it('a cancel and the dependency_failed it causes each make a delivery', async () => {
    const kiln = await server();
    const hook = await receiver();
    const parent = await kiln.request('POST', '/v1/jobs', {
      type: 'test.quick',
      delayMs: 3_600_000,
      callback: { url: `${hook.url}/parent` },
    });
    const child = await kiln.request('POST', '/v1/jobs', {
      type: 'test.quick',
      dependsOn: [parent.body.id],
      callback: { url: `${hook.url}/child` },
    });
    assert.equal(child.body.status, 'waiting');
    const cancelled = await kiln.request('POST', `/v1/jobs/${parent.body.id}/cancel`);
    assert.equal(cancelled.status, 200);
    await hook.request(1);
    const byPath = new Map(hook.received.map((request) => [request.path, request]));
    assert.equal(byPath.get('/parent')?.headers['kiln-event'], 'job.cancelled');
    assert.equal(byPath.get('/child')?.headers['kiln-event'], 'job.failed');
    const childBody = JSON.parse(byPath.get('/child')?.rawBody ?? '{}');
    assert.equal(childBody.error.code, 'dependency_failed');
  });

  it('does not follow a redirect: the place it points to gets nothing, and the attempt is not a delivery', async () => {
    const kiln = await server({ KILN_CALLBACK_MAX_ATTEMPTS: '2' });
    const target = await receiver();
    const redirecting = await receiver((_request, _n, response) =>
      response.writeHead(302, { location: `${target.url}/elsewhere` }).end(),
    );
    const failed = whenRecorded(kiln, (attempt) => attempt.outcome === 'failed');
    const submitted = await kiln.request('POST', '/v1/jobs', {
      type: 'test.quick',
      callback: { url: redirecting.url },
    });
    assert.equal(submitted.status, 201, submitted.text);
    await failed;
    assert.equal(redirecting.received.length, 2);
    assert.equal(target.received.length, 0);
    const deliveries = (await kiln.request('GET', `/v1/jobs/${submitted.body.id}/callbacks`)).body.deliveries;
    assert.deepEqual(
      deliveries.map((d: any) => [d.status, d.httpStatus]),
      [
        ['failed', 302],
        ['failed', 302],
      ],
    );
    assert.match(deliveries[0].error, /redirect/);
  });

  it('answers 404 for the deliveries of an unknown job, and the deliveries go with a deleted job', async () => {
    const kiln = await server();
    const hook = await receiver();
    assert.equal((await kiln.request('GET', '/v1/jobs/0193aaaa-0000-7000-8000-000000000000/callbacks')).status, 404);
    const delivered = whenRecorded(kiln, (attempt) => attempt.outcome === 'delivered');
    const submitted = await kiln.request('POST', '/v1/jobs', { type: 'test.quick', callback: { url: hook.url } });
    await delivered;
    assert.equal((await kiln.request('GET', `/v1/jobs/${submitted.body.id}/callbacks`)).body.deliveries.length, 1);
    assert.equal((await kiln.request('DELETE', `/v1/jobs/${submitted.body.id}`)).status, 204);
    assert.equal((await kiln.request('GET', `/v1/jobs/${submitted.body.id}/callbacks`)).status, 404);
  });

  it('carries callback on every job object: null without one, as given in a batch', async () => {
    const kiln = await server();
    const hook = await receiver();
    const batch = await kiln.request('POST', '/v1/jobs/batch', {
      jobs: [
        { type: 'test.quick', delayMs: 3_600_000 },
        { type: 'test.quick', delayMs: 3_600_000, callback: { url: hook.url, events: ['completed', 'cancelled'] } },
      ],
    });
    assert.equal(batch.status, 201, batch.text);
    assert.equal(batch.body.jobs[0].callback, null);
    assert.deepEqual(batch.body.jobs[1].callback, { url: hook.url, events: ['completed', 'cancelled'] });
    const listed = await kiln.request('GET', '/v1/jobs');
    assert.deepEqual(
      listed.body.jobs.map((job: any) => job.callback),
      [{ url: hook.url, events: ['completed', 'cancelled'] }, null],
    );
  });

  it("gives a schedule's jobs its callback: a triggered job is delivered", async () => {
    const kiln = await server();
    const hook = await receiver();
    const put = await kiln.request('PUT', '/v1/schedules/hourly.digest', {
      cron: '0 * * * *',
      job: { type: 'test.quick', payload: { n: 3 }, callback: { url: hook.url, events: ['completed'] } },
    });
    assert.equal(put.status, 201, put.text);
    assert.deepEqual(put.body.job.callback, { url: hook.url, events: ['completed'] });
    const triggered = await kiln.request('POST', '/v1/schedules/hourly.digest/trigger');
    assert.equal(triggered.status, 201, triggered.text);
    assert.deepEqual(triggered.body.callback, { url: hook.url, events: ['completed'] });
    const request = await hook.request(0);
    const body = JSON.parse(request.rawBody);
    assert.equal(body.id, triggered.body.id);
    assert.equal(body.schedule, 'hourly.digest');
    assert.ok(verifySignature(SECRET, request.headers['kiln-signature'] as string, request.rawBody));
  });

  it('refuses a malformed callback with a validation error naming the field', async () => {
    const kiln = await server();
    for (const [callback, path] of [
      [{ url: 'not a url' }, 'callback.url'],
      [{ url: 'ftp://example.com/x' }, 'callback.url'],
      [{ url: 'http://example.com', events: ['running'] }, 'callback.events.0'],
      [{ url: 'http://example.com', events: [] }, 'callback.events'],
      [{ url: 'http://example.com', events: ['failed', 'failed'] }, 'callback.events'],
      [{ url: 'http://example.com', secret: 'x' }, 'callback.secret'],
    ] as const) {
      const response = await kiln.request('POST', '/v1/jobs', { type: 'test.quick', callback });
      assert.equal(response.status, 400, JSON.stringify(callback));
      assert.equal(response.body.code, 'validation_error');
      assert.ok(
        response.body.errors.some((error: any) => error.path === path),
        `${JSON.stringify(callback)}: ${response.text}`,
      );
    }
  });
});

describe('callbacks without KILN_CALLBACK_SECRET', () => {
  it('refuses a callback with 400 callbacks_disabled, alone and in a batch', async () => {
    const kiln = await startServer({});
    servers.push(kiln);
    assert.equal(kiln.kiln.callbacks, null);
    const single = await kiln.request('POST', '/v1/jobs', {
      type: 'test.quick',
      callback: { url: 'https://example.com/hook' },
    });
    assert.equal(single.status, 400);
    assert.equal(single.body.code, 'callbacks_disabled');
    assert.match(single.body.detail, /KILN_CALLBACK_SECRET/);
    assert.deepEqual(
      single.body.errors.map((error: any) => error.path),
      ['callback'],
    );
    const batch = await kiln.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'test.quick' }, { type: 'test.quick', callback: { url: 'https://example.com/hook' } }],
    });
    assert.equal(batch.status, 400);
    assert.equal(batch.body.code, 'callbacks_disabled');
    assert.match(batch.body.detail, /^jobs\.1\.callback/);
    assert.equal((await kiln.request('GET', '/v1/jobs')).body.jobs.length, 0, 'nothing was stored');
  });
});

describe('the address guard at submission (KILN_CALLBACK_ALLOW_PRIVATE off)', () => {
  it('refuses a batch whose item names a private host, storing nothing', async () => {
    const kiln = await startServer({ KILN_CALLBACK_SECRET: SECRET });
    servers.push(kiln);
    const response = await kiln.request('POST', '/v1/jobs/batch', {
      jobs: [
        { type: 'test.quick', callback: { url: 'http://93.184.215.14/hook' } },
        { type: 'test.quick', callback: { url: 'http://10.0.0.1/hook' } },
      ],
    });
    assert.equal(response.status, 400, response.text);
    assert.equal(response.body.code, 'validation_error');
    assert.deepEqual(
      response.body.errors.map((error: any) => error.path),
      ['jobs.1.callback.url'],
    );
    assert.equal((await kiln.request('GET', '/v1/jobs')).body.jobs.length, 0);
  });

  for (const [url, reason] of [
    ['http://127.0.0.1:8080/hook', /127\.0\.0\.1 is a loopback address/],
    ['http://[::1]:8080/hook', /::1 is a loopback address/],
    ['http://10.0.0.1/hook', /10\.0\.0\.1 is a private address/],
    ['http://192.168.1.20/hook', /private address/],
    ['http://[fd00::1]/hook', /private address/],
    ['http://169.254.169.254/latest/meta-data/', /169\.254\.169\.254 is a link-local address/],
    ['http://0.0.0.0/hook', /unspecified address/],
    ['http://[::ffff:127.0.0.1]/hook', /loopback address/],
    ['http://localhost:8080/hook', /the host localhost resolves to [0-9a-f:.]+, a loopback address/],
  ] as const) {
    it(`refuses ${url}`, async () => {
      const kiln = await startServer({ KILN_CALLBACK_SECRET: SECRET });
      servers.push(kiln);
      const response = await kiln.request('POST', '/v1/jobs', { type: 'test.quick', callback: { url } });
      assert.equal(response.status, 400, response.text);
      assert.equal(response.body.code, 'validation_error');
      assert.equal(response.body.errors[0].path, 'callback.url');
      assert.match(response.body.errors[0].message, reason);
      assert.match(response.body.detail, /^callback\.url: /);
    });
  }
});
