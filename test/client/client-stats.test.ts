import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KilnClient, KilnError } from '../../src/client/index.js';
import { startServer, type TestServer } from '../support/kiln.js';

describe('the typed client reading /v1/stats', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.close();
  });

  it('answers the window in 10-second buckets with totals, and refuses a window out of range', async () => {
    const client = new KilnClient({ url: server.url });
    await client.wait((await client.submit({ type: 'noop' })).id);
    const stats = await client.stats({ windowSeconds: 60 });
    assert.equal(stats.window, 60);
    assert.equal(stats.bucketSeconds, 10);
    assert.ok(stats.buckets.length >= 6, `${stats.buckets.length} buckets`);
    assert.equal(stats.totals.submitted, 1);
    assert.equal(
      stats.buckets.reduce((sum, bucket) => sum + bucket.submitted, 0),
      1,
    );
    const refused = await client.stats({ windowSeconds: 5 }).then(
      () => assert.fail('a window of 5 s was accepted'),
      (error: unknown) => error,
    );
    assert.ok(refused instanceof KilnError);
    assert.equal(refused.status, 400);
    assert.equal(refused.code, 'validation_error');
  });
});
