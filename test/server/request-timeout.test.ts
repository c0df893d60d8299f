import assert from 'node:assert/strict';
import { getEventListeners, once } from 'node:events';
import { get as httpGet } from 'node:http';
import { connect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { followJobEvents } from '../support/http.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { pollUntil } from '../support/poll.js';
import { assertProblem, DEADLINE_MS, exchange, withDeadline } from '../support/raw-http.js';

const REQUEST_TIMEOUT_MS = 1000;

const UNFINISHED_CHUNKED =
  'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"typ\r\n';
const SHORT_OF_CONTENT_LENGTH =
  'POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"type":';
const UNFINISHED_HEADERS = 'GET /v1/queue HTTP/1.1\r\nHost: x\r\nX-Slow: 1';

describe('the time to receive a request is bounded (KILN_REQUEST_TIMEOUT_MS)', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS) });
  });
  after(async () => {
    await server.close();
  });

  for (const [name, bytes] of [
    ['a chunked body that never ends', UNFINISHED_CHUNKED],
    ['a body shorter than its Content-Length', SHORT_OF_CONTENT_LENGTH],
    ['headers that never end', UNFINISHED_HEADERS],
  ] as const) {
    it(`answers ${name} with 408 request_timeout and closes the connection`, async () => {
      const answer = await exchange(server.url, bytes);
      assertProblem(answer, 408, 'request_timeout', answer.headers['content-type'] ?? '');
      assert.equal(answer.body.detail, `the request did not arrive in full within ${REQUEST_TIMEOUT_MS} ms`);
    });
  }

  it('closes the connection after such an answer even when the client never closes its side', async () => {
    for (const [bytes, status] of [
      [UNFINISHED_CHUNKED, 408],
      [`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
      ['GET /health HTTP/1.1\r\nHost: x\r\n\0\r\n\r\n', 400],
    ] as const) {
      // Listened for as soon as the server has the socket, which may close before the answer is read.
      // Listened for as soon as the server has the socket, which may close before the answer is read.
      // Not events.once: the server reports the timeout as an error on the socket before it closes.
      const serverClosed = new Promise<void>((resolve) =>
        server.kiln.app.server.once('connection', (socket: Socket) => socket.once('close', () => resolve())),
      );
      const { hostname, port } = new URL(server.url);
      const client = connect({ host: hostname, port: Number(port), allowHalfOpen: true });
      let answer = '';
      client.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
      const answered = once(client, 'end');
      client.write(bytes);
      try {
        await withDeadline(answered, `the answer ${status}`);
        await withDeadline(serverClosed, `the server to close the connection it answered ${status}`);
      } finally {
        client.destroy();
      }
      assert.match(answer, new RegExp(`^HTTP/1\\.1 ${status} `));
    }
  });

  it('does not cut a long poll or an event stream, which are long answers, not slow requests', async () => {
    const created = await server.request('POST', '/v1/jobs', { type: 'noop', delayMs: 3_600_000 });
    assert.equal(created.status, 201);
    const id: string = created.body.id;
    const drainListeners = () => getEventListeners(server.kiln.scheduler.drainSignal, 'abort').length;

    let polled: { status: number; body: string } | null = null;
    const poll = new Promise<{ status: number; body: string }>((resolve, reject) => {
      httpGet(`${server.url}/v1/jobs/${id}?wait=60`, (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => {
          polled = { status: response.statusCode ?? 0, body };
          resolve(polled);
        });
      }).on('error', reject);
    });
    const shown: string[] = [];
    const stream = followJobEvents(server.url, id, (job) => shown.push(job.status));
    let streamEnded = false;
    void stream.ended.then(() => (streamEnded = true));
    // Both are waiting inside the server (each listens for a drain) before the bound starts to count.
    await pollUntil(
      async () => drainListeners(),
      (n) => n === 2,
      {
        what: 'the long poll and the event stream to be open',
        deadlineMs: DEADLINE_MS,
        everyMs: 0,
      },
    );

    // A request that started after both is ended by the bound: the bound has passed for both.
    const witness = await exchange(server.url, UNFINISHED_CHUNKED);
    assert.equal(witness.status, 408);
    assert.equal(polled, null, 'the long poll was answered before its job finished');
    assert.equal(streamEnded, false, 'the event stream ended before its job finished');
    assert.equal(drainListeners(), 2);

    assert.equal((await server.request('POST', `/v1/jobs/${id}/cancel`)).status, 200);
    const answer = await poll;
    assert.equal(answer.status, 200);
    assert.equal(JSON.parse(answer.body).status, 'cancelled');
    await stream.ended;
    assert.deepEqual(shown, ['scheduled', 'cancelled']);
  });
});
