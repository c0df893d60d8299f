import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { startServer } from '../support/kiln.js';
import { holdFixture, holdJob, serverStores } from '../support/hold.js';

const { dir, schema } = holdFixture('kiln-pause-');

for (const [name, env] of serverStores(schema)) {
  describe(`pause over HTTP: ${name}`, () => {
    it('starts no job once a pause is answered: jobs claimed ahead of the thread go back, the running one finishes', async () => {
      const server = await startServer({ ...env, KILN_THREADS: '1' });
      try {
        const first = await holdJob(server, dir, 'first');
        await server.whenStatus(first.id, 'running');
        const second = await holdJob(server, dir, 'second');
        // Claimed ahead of the one thread, waiting for it.
        await server.whenHeld(second.id);

        const paused = await server.request('POST', '/v1/queue/pause');
        assert.equal(paused.status, 200, paused.text);
        assert.equal(server.kiln.scheduler.holdsAttempt(second.id), false, 'the job claimed ahead went back');
        writeFileSync(first.release, '');
        assert.equal((await server.waitForJob(first.id)).status, 'completed', 'the running attempt finished');
        const waiting = (await server.request('GET', `/v1/jobs/${second.id}`)).body;
        assert.equal(waiting.status, 'queued');
        assert.equal(waiting.attempts, 0);
        assert.equal(server.kiln.scheduler.holdsAttempt(second.id), false, 'nothing was claimed while paused');

        assert.equal((await server.request('POST', '/v1/queue/resume')).status, 200);
        writeFileSync(second.release, '');
        const done = await server.waitForJob(second.id);
        assert.equal(done.status, 'completed');
        assert.equal(done.attempts, 1);
      } finally {
        await server.close();
      }
    });
  });
}
