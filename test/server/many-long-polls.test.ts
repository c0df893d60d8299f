import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { describe, it } from 'node:test';
import { startServer } from '../support/kiln.js';
import { pollUntil } from '../support/poll.js';
import { DEADLINE_MS } from '../support/raw-http.js';

describe('many long polls at once', () => {
  it('print no MaxListenersExceededWarning and leave no listener behind', async () => {
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    const server = await startServer();
    try {
      const created = await server.request('POST', '/v1/jobs', { type: 'noop', delayMs: 3_600_000 });
      const id: string = created.body.id;
      const drainListeners = () => getEventListeners(server.kiln.scheduler.drainSignal, 'abort').length;
      const polls = Array.from({ length: 25 }, () => server.request('GET', `/v1/jobs/${id}?wait=60`));
      await pollUntil(
        async () => drainListeners(),
        (n) => n === 25,
        {
          what: '25 long polls to be open',
          deadlineMs: DEADLINE_MS,
          everyMs: 0,
        },
      );
      // A warning is emitted on the next tick after the listener that crosses the limit.
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal((await server.request('POST', `/v1/jobs/${id}/cancel`)).status, 200);
      for (const answer of await Promise.all(polls)) assert.equal(answer.body.status, 'cancelled');
      assert.equal(drainListeners(), 0);
      assert.deepEqual(
        warnings.map((warning) => `${warning.name}: ${warning.message}`),
        [],
      );
    } finally {
      process.off('warning', onWarning);
      await server.close();
    }
  });
});
