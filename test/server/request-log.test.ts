import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import type { FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import { startServer } from '../support/kiln.js';
import { pollUntil } from '../support/poll.js';
import { DEADLINE_MS } from '../support/raw-http.js';

describe('request logs', () => {
  it('never write a credential given in a query string', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString('utf8'));
        done();
      },
    });
    const logger = pino({ level: 'info' }, sink) as FastifyBaseLogger;
    const server = await startServer({ KILN_API_TOKENS: 'right-token' }, undefined, { logger });
    try {
      const secrets = ['s3cret-one', 's3cret-two', 's3cret-three', 's3cret-four'];
      const authorized = { authorization: 'Bearer right-token' };
      const targets: Array<[string, Record<string, string>, number]> = [
        [`/v1/queue?token=${secrets[0]}`, {}, 401],
        [`/v1/jobs?limit=5&access_token=${secrets[1]}`, authorized, 400],
        [`/v1/jobs/x?api_key=${secrets[2]}&wait=0`, authorized, 400],
        [`/no/such/route?password=${secrets[3]}`, authorized, 404],
      ];
      for (const [target, headers, status] of targets) {
        assert.equal((await server.request('GET', target, undefined, headers)).status, status, target);
      }
      const requestLines = () => lines.filter((line) => line.includes('"http"'));
      await pollUntil(
        async () => requestLines().length,
        (n) => n >= targets.length,
        { what: 'the request lines', deadlineMs: DEADLINE_MS, everyMs: 0 },
      );
      for (const secret of secrets) {
        assert.deepEqual(
          lines.filter((line) => line.includes(secret)),
          [],
          `${secret} was logged`,
        );
      }
      const urls = requestLines().map((line) => JSON.parse(line).http.url as string);
      assert.ok(urls.includes('/v1/queue?token=***'), urls.join(' '));
      assert.ok(urls.includes('/v1/jobs?limit=5&access_token=***'), urls.join(' '));
      assert.ok(urls.includes('/v1/jobs/x?api_key=***&wait=0'), urls.join(' '));
      assert.ok(urls.includes('/no/such/route?password=***'), urls.join(' '));
    } finally {
      await server.close();
    }
  });
});
