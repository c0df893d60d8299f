import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { gzipSync } from 'node:zlib';
import { startServer, type TestServer } from '../support/kiln.js';
import { assertProblem } from '../support/raw-http.js';

describe('request bodies', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
    // Nothing runs: the test reads back what was stored.
    await server.request('POST', '/v1/queue/pause');
  });
  after(async () => {
    await server.close();
  });

  it('answers a compressed body with 415 unsupported_media_type naming the encoding', async () => {
    const response = await fetch(`${server.url}/v1/jobs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gzipSync(JSON.stringify({ type: 'noop' })),
    });
    const body = (await response.json()) as { detail: string };
    assertProblem(
      { status: response.status, body },
      415,
      'unsupported_media_type',
      response.headers.get('content-type') ?? '',
    );
    assert.match(body.detail, /Content-Encoding gzip/);
  });

  it('refuses a __proto__ key, naming where it is, whether written plainly or escaped', async () => {
    for (const [text, path] of [
      ['{"type":"noop","payload":{"echo":{"a":{"__proto__":{"polluted":true}}}}}', 'payload.echo.a.__proto__'],
      ['{"type":"noop","payload":{"echo":{"\\u005f_proto__":{"polluted":true}}}}', 'payload.echo.__proto__'],
      ['{"__proto__":{"polluted":true},"type":"noop"}', '__proto__'],
    ]) {
      const response = await server.request('POST', '/v1/jobs', text);
      assertProblem(response, 400, 'validation_error', response.headers.get('content-type') ?? '');
      assert.deepEqual(response.body.errors, [{ path, message: 'the key __proto__ is not accepted' }]);
    }
    const batch = await server.request(
      'POST',
      '/v1/jobs/batch',
      '{"jobs":[{"type":"noop"},{"type":"noop","payload":{"__proto__":{}}}]}',
    );
    assert.deepEqual(batch.body.errors, [
      { path: 'jobs.1.payload.__proto__', message: 'the key __proto__ is not accepted' },
    ]);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  it('refuses a number that would not be stored as written, naming its field', async () => {
    const cases: Array<[string, RegExp]> = [
      ['1e309', /1e309 is too large.*become Infinity/],
      ['-1e309', /-1e309 is too large.*become -Infinity/],
      ['1e-400', /1e-400 is too small.*become 0/],
      [`0.${'0'.repeat(400)}1`, /is too small.*become 0/],
      ['9007199254740993', /the number 9007199254740993 cannot be stored exactly.*become 9007199254740992\)/],
      ['-12345678901234567891', /-12345678901234567891 cannot be stored exactly/],
    ];
    for (const [literal, said] of cases) {
      const response = await server.request(
        'POST',
        '/v1/jobs',
        `{"type":"noop","payload":{"echo":{"n":[1,${literal}]}}}`,
      );
      assertProblem(response, 400, 'validation_error', response.headers.get('content-type') ?? '');
      assert.equal(response.body.errors.length, 1, response.text);
      assert.equal(response.body.errors[0].path, 'payload.echo.n.1');
      assert.match(response.body.errors[0].message, said);
    }
    const metadata = await server.request('POST', '/v1/jobs', '{"type":"noop","metadata":{"n":1e309}}');
    assert.deepEqual(metadata.body.errors, [
      { path: 'metadata.n', message: 'the number 1e309 is too large to store (it would become Infinity)' },
    ]);
    const batch = await server.request(
      'POST',
      '/v1/jobs/batch',
      '{"jobs":[{"type":"noop"},{"type":"noop","priority":1e400}]}',
    );
    assert.equal(batch.status, 400);
    assert.equal(batch.body.errors[0].path, 'jobs.1.priority');
  });

  it('stores every number that survives the trip as it was written', async () => {
    const literals = [
      '9007199254740992',
      '-9007199254740991',
      '1152921504606847000',
      '1e20',
      '1.5e300',
      '1e-300',
      '5e-324',
      '0',
      '0.0',
      '0e-400',
      '1E2',
      '123456789.123456789',
      '100000000000000000000000.0',
    ];
    const text = `{"type":"noop","payload":{"echo":[${literals.join(',')}]},"metadata":{"s":"1e309 9007199254740993"}}`;
    const response = await server.request('POST', '/v1/jobs', text);
    assert.equal(response.status, 201, response.text);
    assert.deepEqual(response.body.payload.echo, JSON.parse(`[${literals.join(',')}]`));
    assert.deepEqual(response.body.metadata, { s: '1e309 9007199254740993' });
  });
});
