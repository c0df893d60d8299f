import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';

interface Ran {
  start: number;
  end: number;
}

/** Submits `n` jobs of `type` in one batch; answers their ids. */
async function submit(server: TestServer, type: string, n: number, payload: unknown, priority = 5): Promise<string[]> {
  const response = await server.request('POST', '/v1/jobs/batch', {
    jobs: Array.from({ length: n }, () => ({ type, payload, priority })),
  });
  assert.equal(response.status, 201, response.text);
  return response.body.jobs.map((job: { id: string }) => job.id);
}

async function results(server: TestServer, ids: string[]): Promise<Ran[]> {
  const ran: Ran[] = [];
  for (const id of ids) {
    const job = await server.waitForJob(id);
    assert.equal(job.status, 'completed', JSON.stringify(job));
    ran.push(job.result as Ran);
  }
  return ran;
}

function overlaps(a: Ran, b: Ran): boolean {
  return a.start < b.end && b.start < a.end;
}

async function task(server: TestServer, name: string) {
  const tasks = await server.request('GET', '/v1/tasks');
  assert.equal(tasks.status, 200);
  return tasks.body.tasks.find((t: { name: string }) => t.name === name);
}

describe('task limits', () => {
  let server: TestServer;

  before(async () => {
    server = await startServer({ KILN_THREADS: '2', KILN_STORE: 'sqlite' });
  });

  after(async () => {
    await server.close();
  });

  it('never runs two attempts of a type limited to 1 at once, while other types run beside it', async () => {
    // The limited jobs are first in line; the second thread must not wait behind them.
    const limited = await submit(server, 'test.limited', 6, { ms: 80 });
    const others = await submit(server, 'test.timed', 12, { ms: 40 });
    const limitedRuns = (await results(server, limited)).sort((a, b) => a.start - b.start);
    const otherRuns = await results(server, others);
    for (let i = 1; i < limitedRuns.length; i++) {
      const previous = limitedRuns[i - 1] as Ran;
      const next = limitedRuns[i] as Ran;
      assert.ok(next.start >= previous.end, `attempt ${i} started at ${next.start}, before ${previous.end}`);
    }
    assert.ok(
      otherRuns.some((other) => limitedRuns.some((run) => overlaps(run, other))),
      'another type ran while a limited attempt ran',
    );
    const metrics = await server.request('GET', '/metrics');
    assert.match(metrics.text, /^kiln_task_limited_total\{type="test.limited",limit="concurrency"\} [1-9]/m);
    const info = await task(server, 'test.limited');
    assert.equal(info.concurrency, 1, "the module's own limit");
    assert.deepEqual(info.limits, { concurrency: 1, rateLimit: null });
    assert.equal(info.running, 0);
  });

  it('starts at most max attempts in any window of perMs, by the recorded start times', async () => {
    const put = await server.request('PUT', '/v1/tasks/test.timed/limits', { rateLimit: { max: 2, perMs: 300 } });
    assert.equal(put.status, 200, put.text);
    assert.deepEqual(put.body.limits, { concurrency: null, rateLimit: { max: 2, perMs: 300 } });
    assert.deepEqual(put.body.override, { rateLimit: { max: 2, perMs: 300 } });
    try {
      const ids = await submit(server, 'test.timed', 8, { ms: 5 });
      const starts: number[] = [];
      for (const id of ids) {
        const job = await server.waitForJob(id);
        assert.equal(job.status, 'completed');
        starts.push(Date.parse(job.startedAt as string));
      }
      starts.sort((a, b) => a - b);
      // Any window of 300 ms holds at most 2 starts: the third after a start is 300 ms on at least.
      for (let i = 2; i < starts.length; i++) {
        const gap = (starts[i] as number) - (starts[i - 2] as number);
        assert.ok(gap >= 300, `starts ${i - 2} and ${i} are ${gap} ms apart: ${starts.join(', ')}`);
      }
      const info = await task(server, 'test.timed');
      assert.equal(typeof info.tokens, 'number');
      assert.ok(info.tokens >= 0 && info.tokens <= 2);
    } finally {
      const back = await server.request('DELETE', '/v1/tasks/test.timed/limits');
      assert.equal(back.status, 200);
      assert.equal(back.body.override, null);
      assert.deepEqual(back.body.limits, { concurrency: null, rateLimit: null });
    }
  });

  it('passes over a held backlog: jobs of another type behind it run, the held ones stay first of their type', async () => {
    const put = await server.request('PUT', '/v1/tasks/test.hold/limits', { concurrency: 1 });
    assert.equal(put.status, 200);
    const release = join(mkdtempSync(join(tmpdir(), 'kiln-limits-')), 'release');
    try {
      const held = await submit(server, 'test.hold', 30, { release }, 9);
      await server.whenStatus(held[0] as string, 'running');
      // Lower priority and later: only the limit lets these run before the held backlog.
      const others = await submit(server, 'test.timed', 20, { ms: 1 }, 1);
      // The thread that holds test.hold may have taken one of them as its look-ahead,
      // which waits for the running attempt (README: the priority promise); the other
      // thread runs the rest while the held backlog waits.
      await new Promise<void>((resolve, reject) => {
        let done = 0;
        for (const id of others) {
          server.waitForJob(id).then(() => {
            if (++done === others.length - 1) resolve();
          }, reject);
        }
      });
      const queued = await server.request('GET', '/v1/jobs?status=queued&type=test.hold&limit=100');
      assert.equal(queued.body.jobs.length, 29, 'the rest of the held backlog waits, queued');
      assert.equal((await task(server, 'test.hold')).running, 1);
      writeFileSync(release, '');
      await results(server, others);
      const order: number[] = [];
      for (const id of held) order.push(Date.parse((await server.waitForJob(id)).startedAt as string));
      assert.deepEqual(
        order,
        [...order].sort((a, b) => a - b),
        'the held jobs ran in their order',
      );
    } finally {
      writeFileSync(release, '');
      await server.request('DELETE', '/v1/tasks/test.hold/limits');
    }
  });

  it('refuses bad limits and unknown tasks with problem documents', async () => {
    const empty = await server.request('PUT', '/v1/tasks/test.timed/limits', {});
    assert.equal(empty.status, 400);
    assert.equal(empty.body.code, 'validation_error');
    const zero = await server.request('PUT', '/v1/tasks/test.timed/limits', { concurrency: 0 });
    assert.equal(zero.status, 400);
    const extra = await server.request('PUT', '/v1/tasks/test.timed/limits', { concurrency: 2, burst: 3 });
    assert.equal(extra.status, 400);
    const badRate = await server.request('PUT', '/v1/tasks/test.timed/limits', { rateLimit: { max: 1 } });
    assert.equal(badRate.status, 400);
    const unknown = await server.request('PUT', '/v1/tasks/no.such.task/limits', { concurrency: 1 });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.code, 'not_found');
    const unknownDelete = await server.request('DELETE', '/v1/tasks/no.such.task/limits');
    assert.equal(unknownDelete.status, 404);
  });

  it('keeps an override across a restart on the same data file', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'kiln-limits-')), 'kiln.db');
    const first = await startServer({ KILN_STORE: `sqlite:${file}` });
    try {
      const put = await first.request('PUT', '/v1/tasks/test.limited/limits', { concurrency: 3, rateLimit: null });
      assert.equal(put.status, 200);
    } finally {
      await first.close();
    }
    const second = await startServer({ KILN_STORE: `sqlite:${file}` });
    try {
      const info = await task(second, 'test.limited');
      assert.deepEqual(info.override, { concurrency: 3, rateLimit: null });
      assert.deepEqual(info.limits, { concurrency: 3, rateLimit: null });
      const back = await second.request('DELETE', '/v1/tasks/test.limited/limits');
      assert.deepEqual(back.body.limits, { concurrency: 1, rateLimit: null }, "back to the module's own");
    } finally {
      await second.close();
    }
  });
});
