import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServerResponse } from 'node:http';
import { after, describe, it } from 'node:test';
import { killAllKilns, spawnKiln } from '../support/kiln-process.js';
import { pollUntil } from '../support/poll.js';
import { startReceiver, verifySignature } from '../support/receiver.js';

/**
 * Callback deliveries are stored: a server killed with SIGKILL while a delivery is in
 * flight (the receiver holds the request open, so it is certainly pending) delivers it
 * after the restart, under the same Kiln-Delivery id. A server stopped with SIGTERM
 * waits for the answer of a delivery in flight and records it.
 */
const SECRET = 'crash-test-secret';

describe('callbacks across a SIGKILL on the SQLite store', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-callback-crash-'));
  const env = {
    KILN_STORE: `sqlite:${join(dir, 'kiln.db')}`,
    KILN_CALLBACK_SECRET: SECRET,
    KILN_CALLBACK_ALLOW_PRIVATE: 'true',
  };
  after(async () => {
    await killAllKilns();
    rmSync(dir, { recursive: true, force: true });
  });

  it('delivers after the restart a delivery that was pending at the kill', async () => {
    // The first request is held open until the receiver closes; later ones are answered.
    const hook = await startReceiver((_request, n, response) => {
      if (n > 0) response.writeHead(204).end();
    });
    try {
      const first = await spawnKiln(env);
      const submitted = await first.request('POST', '/v1/jobs', {
        type: 'test.quick',
        payload: { n: 42 },
        callback: { url: `${hook.url}/hook` },
      });
      assert.equal(submitted.status, 201, submitted.text);
      const id = submitted.body.id as string;
      const held = await hook.request(0);
      const pending = await first.request('GET', `/v1/jobs/${id}/callbacks`);
      assert.deepEqual(
        pending.body.deliveries.map((d: any) => [d.id, d.attempt, d.status]),
        [[held.headers['kiln-delivery'], 1, 'pending']],
      );
      first.child.kill('SIGKILL');
      assert.equal((await first.exited).signal, 'SIGKILL');

      const second = await spawnKiln(env);
      const again = await hook.request(1);
      assert.equal(again.headers['kiln-delivery'], held.headers['kiln-delivery']);
      assert.equal(again.headers['kiln-event'], 'job.completed');
      assert.equal(again.rawBody, held.rawBody);
      assert.ok(verifySignature(SECRET, again.headers['kiln-signature'] as string, again.rawBody));
      assert.equal(JSON.parse(again.rawBody).id, id);
      // The attempt is recorded right after the answer: read until it shows (or 30 s pass).
      const deliveries: any[] = await pollUntil(
        async () => (await second.request('GET', `/v1/jobs/${id}/callbacks`)).body.deliveries,
        (read: any[]) => read.some((d) => d.status === 'delivered'),
        { what: 'the delivery to be recorded as delivered', deadlineMs: 30_000, everyMs: 10 },
      );
      assert.deepEqual(
        deliveries.map((d) => [d.attempt, d.status, d.httpStatus]),
        [[1, 'delivered', 204]],
      );
      assert.equal(hook.received.length, 2);
    } finally {
      await hook.close();
    }
  });

  it('on SIGTERM, waits for the answer of a delivery in flight and records it', async () => {
    let held: ServerResponse | null = null;
    const hook = await startReceiver((_request, n, response) => {
      if (n === 0) held = response;
      else response.writeHead(204).end();
    });
    try {
      // A database of its own: the server of the test before holds the other one.
      const own = { ...env, KILN_STORE: `sqlite:${join(dir, 'sigterm.db')}` };
      const first = await spawnKiln({ ...own, KILN_SHUTDOWN_GRACE_MS: '20000' });
      const submitted = await first.request('POST', '/v1/jobs', {
        type: 'test.quick',
        callback: { url: `${hook.url}/hook` },
      });
      assert.equal(submitted.status, 201, submitted.text);
      const id = submitted.body.id as string;
      await hook.request(0);
      first.child.kill('SIGTERM');
      // The receiver answers once the server says it waits for the delivery.
      const waiting = await first.waitForLog('shutting down: waiting for callback deliveries in flight');
      assert.equal(waiting.inFlight, 1);
      (held as ServerResponse | null)?.writeHead(204).end();
      const exit = await first.exited;
      assert.equal(exit.code, 0, JSON.stringify(exit));

      // Recorded by the server that made it: the next start finds it delivered, and sends nothing.
      const second = await spawnKiln(own);
      const deliveries = (await second.request('GET', `/v1/jobs/${id}/callbacks`)).body.deliveries;
      assert.deepEqual(
        deliveries.map((d: any) => [d.attempt, d.status, d.httpStatus]),
        [[1, 'delivered', 204]],
      );
      assert.equal(hook.received.length, 1);
    } finally {
      await hook.close();
    }
  });
});
