import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FakeClock } from '../support/fake-clock.js';
import { STATS_BUCKET_MS } from '../../src/contract/stats.js';
import { startServer, type TestServer } from '../support/kiln.js';

describe('GET /v1/stats', () => {
  let server: TestServer;
  // The server's clock stands still unless the test moves it, so every sample lands in a known bucket.
  const start = 1_800_000_000_000 - (1_800_000_000_000 % STATS_BUCKET_MS) + 5000;
  const clock = new FakeClock(start);

  before(async () => {
    // No timer is set on it: nothing here is scheduled.
    server = await startServer({ KILN_STORE: 'sqlite', KILN_API_TOKENS: 'stats-token' }, undefined, { clock });
  });

  after(async () => {
    await server.close();
  });

  const auth = { authorization: 'Bearer stats-token' };

  it('counts submitted, completed and failed jobs and their wait and run percentiles in the current bucket', async () => {
    const batch = await server.request(
      'POST',
      '/v1/jobs/batch',
      { jobs: [{ type: 'noop' }, { type: 'noop' }, { type: 'noop' }, { type: 'test.fatal' }] },
      auth,
    );
    assert.equal(batch.status, 201, batch.text);
    for (const job of batch.body.jobs) await server.request('GET', `/v1/jobs/${job.id}?wait=30`, undefined, auth);

    const response = await server.request('GET', '/v1/stats?window=60', undefined, auth);
    assert.equal(response.status, 200, response.text);
    const { window, bucketSeconds, buckets, totals } = response.body;
    assert.equal(window, 60);
    assert.equal(bucketSeconds, 10);
    assert.equal(buckets.length, 6);
    const current = buckets.at(-1);
    assert.equal(current.at, new Date(start - 5000).toISOString());
    assert.equal(buckets[0].at, new Date(start - 5000 - 50_000).toISOString());
    assert.deepEqual(
      { submitted: current.submitted, completed: current.completed, failed: current.failed },
      { submitted: 4, completed: 3, failed: 1 },
    );
    for (const field of ['waitMsP50', 'waitMsP99', 'runMsP50', 'runMsP99']) {
      assert.equal(typeof current[field], 'number', field);
      assert.ok(current[field] >= 0, field);
    }
    assert.ok(current.waitMsP99 >= current.waitMsP50);
    assert.ok(current.runMsP99 >= current.runMsP50);
    assert.equal(buckets[0].submitted, 0);
    assert.equal(buckets[0].runMsP50, null);
    assert.deepEqual(
      { submitted: totals.submitted, completed: totals.completed, failed: totals.failed },
      { submitted: 4, completed: 3, failed: 1 },
    );
    assert.equal(totals.runMsP99, current.runMsP99);
  });

  it('moves on with the clock: a new bucket starts empty, the window defaults to 900 seconds', async () => {
    clock.set(start + STATS_BUCKET_MS);
    const response = await server.request('GET', '/v1/stats', undefined, auth);
    assert.equal(response.status, 200, response.text);
    assert.equal(response.body.window, 900);
    assert.equal(response.body.buckets.length, 90);
    assert.equal(response.body.buckets.at(-1).submitted, 0);
    assert.equal(response.body.buckets.at(-2).submitted, 4);
    assert.equal(response.body.totals.submitted, 4);
  });

  it('refuses a window out of range, not a number, or an unknown parameter', async () => {
    for (const query of ['window=59', 'window=3601', 'window=abc', 'window=90.5', 'from=0']) {
      const response = await server.request('GET', `/v1/stats?${query}`, undefined, auth);
      assert.equal(response.status, 400, query);
      assert.equal(response.body.code, 'validation_error', query);
    }
  });

  it('needs the bearer token like every /v1 route', async () => {
    const response = await server.request('GET', '/v1/stats');
    assert.equal(response.status, 401);
    assert.equal(response.body.code, 'unauthorized');
  });

  it('is described in the OpenAPI document', async () => {
    const response = await server.request('GET', '/openapi.json');
    const operation = response.body.paths['/v1/stats'].get;
    assert.ok(operation);
    assert.ok(operation.parameters.some((p: { name: string }) => p.name === 'window'));
    const schema = operation.responses['200'].content['application/json'].schema;
    const resolved = schema.$ref === undefined ? schema : response.body.components.schemas.Stats;
    assert.deepEqual(Object.keys(resolved.properties).sort(), ['bucketSeconds', 'buckets', 'totals', 'window']);
    assert.deepEqual(Object.keys(resolved.properties.buckets.items.properties).sort(), [
      'at',
      'completed',
      'failed',
      'runMsP50',
      'runMsP99',
      'submitted',
      'waitMsP50',
      'waitMsP99',
    ]);
  });
});
