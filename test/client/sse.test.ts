import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { KilnClient } from '../../src/client/index.js';
import { readServerSentEvents, type ServerSentEvent } from '../../src/client/sse.js';

/** A body that delivers `chunks` one by one, as a network would split them. */
function bodyOf(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

async function read(chunks: string[]): Promise<{ events: ServerSentEvent[]; retries: number[] }> {
  const events: ServerSentEvent[] = [];
  const retries: number[] = [];
  for await (const event of readServerSentEvents(bodyOf(chunks), { onRetry: (ms) => retries.push(ms) })) {
    events.push(event);
  }
  return { events, retries };
}

describe('readServerSentEvents', () => {
  it('reads events whose lines end in LF, CRLF or CR, also when a chunk splits a CRLF', async () => {
    const { events } = await read(['event: job\ndata: {"a":1}\r', '\n\r\n', 'data: x\rdata: y\r\r', ': comment\n\n']);
    assert.deepEqual(events, [
      { event: 'job', data: '{"a":1}', id: null },
      { event: 'message', data: 'x\ny', id: null },
    ]);
  });

  it('keeps the last id and drops an event the stream ends inside', async () => {
    const { events } = await read(['id: 7\ndata: a\n\ndata: b\n\ndata: cut']);
    assert.deepEqual(events, [
      { event: 'message', data: 'a', id: '7' },
      { event: 'message', data: 'b', id: '7' },
    ]);
  });

  it('hears retry: with only ASCII digits, and ignores any other value', async () => {
    const { events, retries } = await read([
      'retry: 1500\n',
      'retry: soon\nretry: -5\nretry: 2.5\n',
      'retry:250\ndata: a\n\n',
    ]);
    assert.deepEqual(retries, [1500, 250]);
    assert.deepEqual(events, [{ event: 'message', data: 'a', id: null }]);
  });
});

describe('KilnClient.events() and retry:', () => {
  let server: Server;
  let url: string;
  const job = { id: 'j1', type: 'noop', status: 'completed', progress: null };

  before(async () => {
    server = createServer((request, response) => {
      assert.equal(request.url, '/v1/jobs/j1/events');
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.end(`retry: 4000\n\nevent: job\ndata: ${JSON.stringify(job)}\n\n`);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it("hands the server's retry hint to onRetry and still yields the job", async () => {
    const client = new KilnClient({ url });
    const retries: number[] = [];
    const seen: unknown[] = [];
    for await (const event of client.events('j1', { onRetry: (ms) => retries.push(ms) })) seen.push(event);
    assert.deepEqual(retries, [4000]);
    assert.deepEqual(seen, [job]);
  });
});
