import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KilnClient } from '../../src/client/index.js';
import { runKiln } from '../support/cli.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { type Receiver, startReceiver } from '../support/receiver.js';

/** Callbacks through `kiln submit --callback` and the client's callbacks(id), against a real server and receiver. */

describe('callbacks through the command line and the client', () => {
  let server: TestServer;
  let closed: TestServer;
  let receiver: Receiver;
  before(async () => {
    server = await startServer({ KILN_CALLBACK_SECRET: 'cli-secret', KILN_CALLBACK_ALLOW_PRIVATE: 'true' });
    closed = await startServer();
    receiver = await startReceiver();
  });
  after(async () => {
    await server.close();
    await closed.close();
    await receiver.close();
  });

  it('submit --callback stores the callback, the receiver gets the job, callbacks(id) lists the delivery', async () => {
    const url = `${receiver.url}/hooks/kiln`;
    const delivered = new Promise<void>((resolve) => {
      const stop = server.kiln.callbacks?.onRecorded((attempt) => {
        if (attempt.outcome !== 'delivered') return;
        stop?.();
        resolve();
      });
    });
    const run = await runKiln(['submit', 'test.quick', '{"n":3}', '--callback', url, '--wait', '--json'], {
      env: { KILN_URL: server.url },
    });
    assert.equal(run.code, 0, run.stderr);
    const job = JSON.parse(run.stdout);
    assert.deepEqual(job.callback, { url });
    const request = await receiver.request(0);
    assert.equal(JSON.parse(request.rawBody).id, job.id);
    await delivered;
    const deliveries = await new KilnClient({ url: server.url }).callbacks(job.id);
    assert.deepEqual(
      deliveries.map((delivery) => [delivery.event, delivery.attempt, delivery.status, delivery.httpStatus]),
      [['job.completed', 1, 'delivered', 204]],
    );
    assert.equal(deliveries[0]?.id, request.headers['kiln-delivery']);
    const shown = await runKiln(['get', job.id], { env: { KILN_URL: server.url } });
    assert.match(shown.stdout, new RegExp(`^callback +${url}$`, 'm'));
  });

  it('prints callbacks_disabled from a server without a secret and exits 3', async () => {
    const run = await runKiln(['submit', 'noop', '--callback', `${receiver.url}/x`], { env: { KILN_URL: closed.url } });
    assert.equal(run.code, 3);
    const problem = (await closed.request('POST', '/v1/jobs', { type: 'noop', callback: { url: `${receiver.url}/x` } }))
      .body;
    assert.equal(problem.code, 'callbacks_disabled');
    assert.equal(run.stderr, `kiln: ${problem.detail}\n`);
  });
});
