import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { get as httpGet, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { killAllKilns, spawnKiln } from '../support/kiln-process.js';

/**
 * Clients that follow a job (SSE, long polls) must not hold a graceful shutdown
 * open: the jobs they watch may never finish in this process (queued ones are not
 * dispatched while draining; released ones only finish after the next start).
 */

function openEvents(url: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = httpGet(url, (response) => {
      response.setEncoding('utf8');
      // Resolve once the first frame (the job as it is) has arrived.
      response.once('data', () => resolve(response));
    });
    request.on('error', reject);
  });
}

describe('shutdown with clients following jobs', { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'kiln-streams-'));
  after(async () => {
    await killAllKilns();
    rmSync(dir, { recursive: true, force: true });
  });

  it(
    'SIGTERM exits 0 while an event stream follows a job that will not finish in this process',
    {
      timeout: 20_000,
    },
    async () => {
      const kiln = await spawnKiln({
        KILN_STORE: `sqlite:${join(dir, 'kiln.db')}`,
        KILN_THREADS: '1',
        // Certain to expire: the running job is held, and nothing releases it.
        KILN_SHUTDOWN_GRACE_MS: '200',
      });
      const running = await kiln.request('POST', '/v1/jobs', {
        type: 'test.hold',
        payload: { release: join(dir, 'never-created') },
      });
      assert.equal(running.status, 201, running.text);
      const queued = await kiln.request('POST', '/v1/jobs', { type: 'noop' });
      assert.equal(queued.status, 201, queued.text);
      await kiln.waitForStatus(running.body.id, 'running');
      const streams = await Promise.all([
        openEvents(`${kiln.url}/v1/jobs/${running.body.id}/events`),
        openEvents(`${kiln.url}/v1/jobs/${queued.body.id}/events`),
      ]);
      const streamsEnded = streams.map((stream) => new Promise((resolve) => stream.once('close', resolve)));

      kiln.child.kill('SIGTERM');
      await kiln.waitForLog('shutting down: draining running attempts');
      // Bounded by the test's timeout: a drain that waits for the streams never exits.
      assert.deepEqual(await kiln.exited, { code: 0, signal: null }, kiln.stderr());
      await Promise.all(streamsEnded);
    },
  );
});
