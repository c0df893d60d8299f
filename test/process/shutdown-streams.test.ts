import { rmSync } from 'node:fs';
import { get as httpGet, type IncomingMessage } from 'node:http';
import { after, describe, it } from 'node:test';
import { killAllKilns, spawnKiln } from '../support/kiln-process.js';
import { assertExitedCleanly, freshDir, startDrain, submit } from '../support/shutdown.js';

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
  const dirs: string[] = [];
  after(async () => {
    await killAllKilns();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it(
    'SIGTERM exits 0 while an event stream follows a job that will not finish in this process',
    {
      timeout: 20_000,
    },
    async () => {
      // The release file is never created.
      const { store, release } = freshDir(dirs);
      const kiln = await spawnKiln({
        KILN_STORE: store,
        KILN_THREADS: '1',
        // Certain to expire: the running job is held, and nothing releases it.
        KILN_SHUTDOWN_GRACE_MS: '200',
      });
      const running = await submit(kiln, { type: 'test.hold', payload: { release } });
      const queued = await submit(kiln, { type: 'noop' });
      await kiln.waitForStatus(running, 'running');
      const streams = await Promise.all([
        openEvents(`${kiln.url}/v1/jobs/${running}/events`),
        openEvents(`${kiln.url}/v1/jobs/${queued}/events`),
      ]);
      const streamsEnded = streams.map((stream) => new Promise((resolve) => stream.once('close', resolve)));

      await startDrain(kiln);
      // Bounded by the test's timeout: a drain that waits for the streams never exits.
      await assertExitedCleanly(kiln);
      await Promise.all(streamsEnded);
    },
  );
});
