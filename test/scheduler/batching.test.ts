import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';

async function submitBatch(server: TestServer, jobs: object[]): Promise<string[]> {
  const response = await server.request('POST', '/v1/jobs/batch', { jobs });
  assert.equal(response.status, 201, response.text);
  return response.body.jobs.map((job: { id: string }) => job.id);
}

describe('micro-batches of tiny jobs', () => {
  let server: TestServer;
  before(async () => {
    // Any type measured under 50 ms counts as tiny here, so the test does not depend on
    // how fast this machine runs test.quick (cpu.spin of a second never qualifies).
    server = await startServer({ KILN_THREADS: '1' }, undefined, { microBatch: { tinyMs: 50 } });
    // Teach the dispatcher that test.quick is tiny: a few jobs, one message each.
    const warm = await submitBatch(
      server,
      Array.from({ length: 5 }, (_, n) => ({ type: 'test.quick', payload: { n } })),
    );
    for (const id of warm) assert.equal((await server.waitForJob(id)).status, 'completed');
  });
  after(async () => {
    await server.close();
  });

  it('sends a deep backlog of tiny jobs to a thread several per message, in priority order', async () => {
    await server.request('POST', '/v1/queue/pause');
    const before = server.kiln.scheduler.dispatchStats;
    const low = await submitBatch(
      server,
      Array.from({ length: 300 }, (_, n) => ({ type: 'test.quick', priority: 1, payload: { n } })),
    );
    const high = await submitBatch(
      server,
      Array.from({ length: 300 }, (_, n) => ({ type: 'test.quick', priority: 8, payload: { n } })),
    );
    await server.request('POST', '/v1/queue/resume');
    const done = await Promise.all([...low, ...high].map((id) => server.waitForJob(id)));
    assert.ok(done.every((job) => job.status === 'completed'));
    const after = server.kiln.scheduler.dispatchStats;
    const attempts = after.attempts - before.attempts;
    const messages = after.messages - before.messages;
    assert.equal(attempts, 600);
    assert.ok(messages < attempts / 2, `600 attempts went in ${messages} messages`);
    const lastHigh = Math.max(...done.slice(300).map((job: any) => Date.parse(job.startedAt)));
    const firstLow = Math.min(...done.slice(0, 300).map((job: any) => Date.parse(job.startedAt)));
    assert.ok(lastHigh <= firstLow, 'every priority-8 job started no later than the first priority-1 job');
  });

  it('re-runs a timed-out batch one job per message, so only the job at fault fails', async () => {
    await server.request('POST', '/v1/queue/pause');
    const jobs = [
      ...Array.from({ length: 20 }, (_, n) => ({ type: 'test.quick', payload: { n } })),
      { type: 'test.quick', payload: { block: true }, timeoutMs: 300, maxAttempts: 1 },
      ...Array.from({ length: 20 }, (_, n) => ({ type: 'test.quick', payload: { n: 100 + n } })),
    ];
    const ids = await submitBatch(server, jobs);
    await server.request('POST', '/v1/queue/resume');
    const done: any[] = await Promise.all(ids.map((id) => server.waitForJob(id)));
    const blocker = done[20];
    assert.equal(blocker.status, 'failed');
    assert.equal(blocker.error.code, 'timeout');
    assert.equal(blocker.attempts, 1);
    const others = done.filter((_, index) => index !== 20);
    assert.deepEqual(
      others.filter((job) => job.status !== 'completed').map((job) => job.id),
      [],
      'every tiny job completed',
    );
  });

  it('never puts a slow job in a batch of tiny ones, so the batch timeout cannot kill it', async () => {
    await server.request('POST', '/v1/queue/pause');
    const ids = await submitBatch(server, [
      // Batches of tiny jobs take milliseconds; had the spin joined one, the batch's
      // timeout (its jobs' least, 500 ms) would end it after half of its 1 s.
      ...Array.from({ length: 30 }, (_, n) => ({ type: 'test.quick', payload: { n }, timeoutMs: 500 })),
      { type: 'cpu.spin', payload: { ms: 1000 }, maxAttempts: 1 },
      ...Array.from({ length: 30 }, (_, n) => ({ type: 'test.quick', payload: { n }, timeoutMs: 500 })),
    ]);
    await server.request('POST', '/v1/queue/resume');
    const done: any[] = await Promise.all(ids.map((id) => server.waitForJob(id)));
    const spin = done[30];
    assert.equal(spin.status, 'completed', JSON.stringify(spin.error));
    assert.equal(spin.attempts, 1);
    assert.equal(spin.error, null);
    assert.ok(done.every((job) => job.status === 'completed'));
  });
});
