import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';
import { assertProblem, exchange } from '../support/raw-http.js';

describe('answers that are problem documents', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.close();
  });

  it('answers an HTTP/1.1 request without Host with 400 validation_error', async () => {
    const answer = await exchange(server.url, 'GET /health HTTP/1.1\r\nConnection: close\r\n\r\n');
    assertProblem(answer, 400, 'validation_error', answer.headers['content-type'] ?? '');
    assert.match(answer.body.detail, /Host/);
  });

  it('answers an Expect it cannot meet with 417 expectation_failed', async () => {
    const answer = await exchange(
      server.url,
      'GET /health HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nConnection: close\r\n\r\n',
    );
    assertProblem(answer, 417, 'expectation_failed', answer.headers['content-type'] ?? '');
    assert.match(answer.body.detail, /200-ok/);
  });

  it('answers oversized headers with 431 headers_too_large', async () => {
    const answer = await exchange(
      server.url,
      `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    assertProblem(answer, 431, 'headers_too_large', answer.headers['content-type'] ?? '');
    assert.match(answer.body.detail, /larger than \d+ bytes/);
  });
});
