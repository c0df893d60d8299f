import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import {
  isFinished,
  type Job,
  JOB_STATUSES,
  KilnClient,
  KilnError,
  retryAfterMs,
  TERMINAL_STATUSES,
} from '../../src/client/index.js';
import { isTerminal, JOB_STATUSES as SERVER_STATUSES } from '../../src/contract/job.js';
import { closedPortUrl } from '../support/http.js';
import { type Receiver, startReceiver } from '../support/receiver.js';
import { startServer, type TestServer } from '../support/kiln.js';

/** Waits for nothing and keeps what it was asked to wait, so retries are checked without wall time. */
function recordingSleep(onSleep: (ms: number) => void | Promise<void> = () => undefined) {
  const sleeps: number[] = [];
  return {
    sleeps,
    sleep: async (ms: number) => {
      sleeps.push(ms);
      await onSleep(ms);
    },
  };
}

async function caught(promise: Promise<unknown>): Promise<KilnError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof KilnError, `expected a KilnError, got ${String(error)}`);
    return error;
  }
  assert.fail('expected the call to fail');
}

describe('the typed client against a real server', () => {
  let server: TestServer;
  let client: KilnClient;
  let dir: string;
  before(async () => {
    server = await startServer({ KILN_THREADS: '2' });
    client = new KilnClient({ url: server.url });
    dir = mkdtempSync(join(tmpdir(), 'kiln-client-'));
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('submits a job, waits for it and reads it back', async () => {
    const job = await client.submit({ type: 'hash.sha256', payload: { data: 'hello' }, priority: 7 });
    assert.equal(job.type, 'hash.sha256');
    assert.equal(job.priority, 7);
    const done = await client.wait(job.id);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.result, {
      digest: '2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824',
      rounds: 1,
    });
    const read = await client.get(job.id);
    assert.deepEqual(read, done);
    const longPolled = await client.get(job.id, { wait: 5 });
    assert.equal(longPolled.status, 'completed');
  });

  it('wait() answers the job as it is when the total timeout passes first', async () => {
    const release = join(dir, 'release-wait');
    const job = await client.submit({ type: 'test.hold', payload: { release } });
    const seen = await client.wait(job.id, { timeoutMs: 0 });
    assert.equal(seen.id, job.id);
    assert.ok(['queued', 'running'].includes(seen.status), seen.status);
    writeFileSync(release, '');
    assert.equal((await client.wait(job.id)).status, 'completed');
  });

  it('sends the idempotency key as the header: a replay answers the first job', async () => {
    const first = await client.submit({ type: 'noop' }, { idempotencyKey: 'client-key-1' });
    const replay = await client.submit({ type: 'noop' }, { idempotencyKey: 'client-key-1' });
    assert.equal(replay.id, first.id);
    assert.equal(first.idempotencyKey, 'client-key-1');
  });

  it('submits a batch with refs and answers the batch and the jobs in request order', async () => {
    const { batch, jobs } = await client.submitBatch([
      { ref: 'a', type: 'test.sum', payload: { value: 1 } },
      { ref: 'b', type: 'test.sum', payload: { value: 2 }, dependsOn: ['ref:a'] },
    ]);
    assert.equal(jobs.length, 2);
    assert.deepEqual(
      jobs.map((job) => job.batch),
      [batch, batch],
    );
    assert.deepEqual(jobs[1]?.dependsOn, [jobs[0]?.id]);
    const last = await client.wait(jobs[1]!.id);
    assert.equal(last.status, 'completed');
    assert.deepEqual(last.result, { total: 3, parents: [jobs[0]?.id] });
    const done = await client.batch(batch);
    assert.equal(done.total, 2);
    assert.equal(done.counts.completed, 2);
    assert.notEqual(done.finishedAt, null);
    const listed = await client.listPage({ batch });
    assert.deepEqual(listed.jobs.map((job) => job.id).sort(), jobs.map((job) => job.id).sort());
    assert.equal((await client.cancelBatch(batch)).counts.completed, 2);
  });

  it('events() yields the job at every change and ends by itself after the terminal event', async () => {
    const steps = mkdtempSync(join(dir, 'steps-'));
    const job = await client.submit({ type: 'test.steps', payload: { dir: steps, steps: 2 } });
    const seen: Job[] = [];
    let released = 0;
    for await (const event of client.events(job.id)) {
      seen.push(event);
      // The test moves the job on only once the client has seen where it is.
      if (event.status === 'running' && released === 0) writeFileSync(join(steps, `step-${++released}`), '');
      if (event.progress?.percent === 50 && released === 1) writeFileSync(join(steps, `step-${++released}`), '');
    }
    assert.equal(seen.at(-1)?.status, 'completed');
    assert.deepEqual(seen.at(-1)?.result, { steps: 2 });
    assert.ok(
      seen.some((event) => event.progress?.percent === 50 && event.progress.message === 'step 1 of 2'),
      JSON.stringify(seen.map((event) => [event.status, event.progress])),
    );
    assert.equal(seen.filter((event) => event.status === 'completed').length, 1);
  });

  it('events() of a finished job yields it once and ends', async () => {
    const job = await client.wait((await client.submit({ type: 'noop' })).id);
    const seen: Job[] = [];
    for await (const event of client.events(job.id)) seen.push(event);
    assert.deepEqual(
      seen.map((event) => event.status),
      ['completed'],
    );
  });

  it('list() goes through every page by cursor, newest first', async () => {
    const type = 'test.quick';
    const submitted: string[] = [];
    for (let n = 0; n < 7; n++) submitted.push((await client.submit({ type, payload: { n } })).id);
    const first = await client.listPage({ type, pageSize: 3 });
    assert.equal(first.jobs.length, 3);
    assert.equal(typeof first.nextCursor, 'string');
    const listed: string[] = [];
    for await (const job of client.list({ type, pageSize: 3 })) {
      assert.equal('payload' in job, false);
      listed.push(job.id);
    }
    assert.deepEqual(listed, submitted.reverse());
  });

  it('list() filters by status', async () => {
    const job = await client.wait((await client.submit({ type: 'test.fatal', maxAttempts: 1 })).id);
    assert.equal(job.status, 'failed');
    const failed: string[] = [];
    for await (const summary of client.list({ status: ['failed', 'cancelled'] })) failed.push(summary.id);
    assert.ok(failed.includes(job.id));
    const completed: string[] = [];
    for await (const summary of client.list({ status: 'completed' })) completed.push(summary.id);
    assert.equal(completed.includes(job.id), false);
  });

  it('submits jobs of a group and lists one group', async () => {
    const ours = await client.submit({ type: 'noop', group: 'tenant-a' });
    assert.equal(ours.group, 'tenant-a');
    await client.submit({ type: 'noop', group: 'tenant-b' });
    const listed: string[] = [];
    for await (const job of client.list({ group: 'tenant-a' })) {
      assert.equal(job.group, 'tenant-a');
      listed.push(job.id);
    }
    assert.deepEqual(listed, [ours.id]);
  });

  it('cancels, retries and removes a job', async () => {
    const job = await client.submit({ type: 'noop', delayMs: 3_600_000 });
    assert.equal(job.status, 'scheduled');
    const cancelled = await client.cancel(job.id);
    assert.equal(cancelled.status, 'cancelled');
    const retried = await client.retry(job.id);
    assert.equal(retried.attempts, 0);
    assert.equal((await client.wait(job.id)).status, 'completed');
    await client.remove(job.id);
    const gone = await caught(client.get(job.id));
    assert.equal(gone.status, 404);
    assert.equal(gone.code, 'not_found');
  });

  it('reads the queue, pauses and resumes it', async () => {
    const queue = await client.queue();
    assert.equal(queue.paused, false);
    assert.equal(queue.threads.size, 2);
    assert.equal((await client.pause()).paused, true);
    assert.equal((await client.queue()).paused, true);
    assert.equal((await client.resume()).paused, false);
  });

  it('lists the tasks and sets and clears a task limit', async () => {
    const tasks = await client.tasks();
    assert.ok(tasks.some((task) => task.name === 'cpu.spin'));
    const limited = await client.setTaskLimits('cpu.spin', { concurrency: 1, rateLimit: { max: 5, perMs: 1000 } });
    assert.deepEqual(limited.limits, { concurrency: 1, rateLimit: { max: 5, perMs: 1000 } });
    const cleared = await client.clearTaskLimits('cpu.spin');
    assert.equal(cleared.override, null);
    assert.deepEqual(cleared.limits, { concurrency: null, rateLimit: null });
    const unknown = await caught(client.setTaskLimits('no.such.task', { concurrency: 1 }));
    assert.equal(unknown.code, 'not_found');
  });

  it("sets, lists and clears a group's limits", async () => {
    const set = await client.setGroupLimits('tenant-c', { concurrency: 2 });
    assert.deepEqual(set, { name: 'tenant-c', limits: { concurrency: 2, rateLimit: null }, running: 0, queued: 0 });
    assert.deepEqual(
      (await client.groups()).find((group) => group.name === 'tenant-c'),
      set,
    );
    await client.clearGroupLimits('tenant-c');
    assert.equal(
      (await client.groups()).find((group) => group.name === 'tenant-c'),
      undefined,
    );
    const invalid = await caught(client.setGroupLimits('tenant c', { concurrency: 1 }));
    assert.equal(invalid.status, 400);
  });

  it('reads nodes, health, readiness and metrics', async () => {
    const nodes = await client.nodes();
    assert.equal(nodes.length, 1);
    assert.equal(nodes[0]?.pid, process.pid);
    assert.deepEqual(await client.health(), { ok: true, status: 'ok' });
    assert.deepEqual(await client.ready(), { ok: true, status: 'ready' });
    assert.match(await client.metrics(), /^# HELP kiln_jobs_submitted_total /m);
  });

  it('throws a KilnError carrying the problem document', async () => {
    const error = await caught(client.submit({ type: 'noop', priority: 12 }));
    assert.equal(error.name, 'KilnError');
    assert.equal(error.status, 400);
    assert.equal(error.code, 'validation_error');
    assert.match(error.detail, /priority/);
    assert.equal(error.message, error.detail);
    assert.equal(error.errors[0]?.path, 'priority');
    assert.equal(error.problem?.title, 'Bad Request');
    const unknownType = await caught(client.submit({ type: 'no.such.task' }));
    assert.equal(unknownType.code, 'unknown_task_type');
    assert.deepEqual(unknownType.errors, unknownType.problem?.errors ?? []);
  });
});

describe('the typed client with tokens', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_API_TOKENS: 'secret-token' });
  });
  after(async () => {
    await server.close();
  });

  it('sends the bearer token; without one the server answers 401 unauthorized', async () => {
    const denied = await caught(new KilnClient({ url: server.url }).queue());
    assert.equal(denied.status, 401);
    assert.equal(denied.code, 'unauthorized');
    const queue = await new KilnClient({ url: server.url, token: 'secret-token' }).queue();
    assert.equal(queue.paused, false);
  });
});

describe('the typed client with scoped tokens', () => {
  let server: TestServer;
  const dir = mkdtempSync(join(tmpdir(), 'kiln-client-tokens-'));
  before(async () => {
    const file = join(dir, 'tokens.json');
    writeFileSync(file, JSON.stringify([{ name: 'ci', token: 'ci-token', scopes: ['submit'] }]));
    server = await startServer({ KILN_API_TOKENS_FILE: file });
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('tells its token, the scope of each operation, and throws 403 forbidden naming the scope', async () => {
    const client = new KilnClient({ url: server.url, token: 'ci-token' });
    assert.deepEqual(await client.token(), { name: 'ci', scopes: ['read', 'submit'] });
    const scopes = await client.operationScopes();
    assert.equal(scopes.get('GET /v1/jobs/{id}'), 'read');
    assert.equal(scopes.get('POST /v1/jobs'), 'submit');
    assert.equal(scopes.get('POST /v1/jobs/{id}/cancel'), 'admin');
    assert.equal(scopes.get('GET /health'), undefined, 'an open route needs none');
    const job = await client.submit({ type: 'noop' });
    const refused = await caught(client.cancel(job.id));
    assert.equal(refused.status, 403);
    assert.equal(refused.code, 'forbidden');
    assert.equal(refused.detail, 'POST /v1/jobs/{id}/cancel needs the scope admin; the token "ci" has submit');
  });
});

describe('the typed client retrying 429 from a real server', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_MAX_QUEUED: '1' });
  });
  after(async () => {
    await server.close();
  });

  it('waits as Retry-After says and submits once there is room', async () => {
    const admin = new KilnClient({ url: server.url });
    await admin.pause();
    const first = await admin.submit({ type: 'noop' });
    const refused = await server.request('POST', '/v1/jobs', { type: 'noop' });
    assert.equal(refused.status, 429);
    const retryAfterSeconds = Number(refused.headers.get('retry-after'));
    assert.ok(retryAfterSeconds >= 1);
    // While the client waits, room is made: the retry is then admitted.
    const { sleeps, sleep } = recordingSleep(async () => {
      await admin.cancel(first.id);
    });
    const second = await new KilnClient({ url: server.url, retry: { sleep } }).submit({ type: 'noop' });
    assert.deepEqual(sleeps, [retryAfterSeconds * 1000]);
    assert.equal(second.status, 'queued');
    const once = await caught(new KilnClient({ url: server.url, retry: { attempts: 1 } }).submit({ type: 'noop' }));
    assert.equal(once.status, 429);
    assert.equal(once.code, 'queue_full');
    await admin.resume();
  });
});

describe('the typed client retrying against a plain HTTP server', () => {
  let server: Receiver;
  let url: string;
  /** What the server answers; `count` is 1 for the first request of a test. */
  let answer: (response: ServerResponse, count: number) => void;
  /** The bodies of the requests of this test, as they came. */
  const bodies = (): string[] => server.received.map((request) => request.rawBody);
  before(async () => {
    server = await startReceiver((_request, n, response) => answer(response, n + 1));
    url = server.url;
  });
  afterEach(() => {
    server.received.length = 0;
  });
  after(() => server.close());

  const problem = (response: ServerResponse, status: number, code: string, headers: Record<string, string> = {}) => {
    response.writeHead(status, { 'content-type': 'application/problem+json', ...headers });
    response.end(JSON.stringify({ type: 'about:blank', title: 'x', status, code, detail: `${code} detail` }));
  };

  it('retries a 429 after the Retry-After seconds, with the same request', async () => {
    answer = (response, count) => {
      if (count === 1) return problem(response, 429, 'queue_full', { 'retry-after': '1' });
      response.writeHead(201, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ id: 'job-1', status: 'queued' }));
    };
    const { sleeps, sleep } = recordingSleep();
    const job = await new KilnClient({ url, retry: { sleep } }).submit({ type: 'noop', payload: { n: 1 } });
    assert.equal(job.id, 'job-1');
    assert.deepEqual(sleeps, [1000]);
    const [first, second, ...more] = bodies();
    assert.equal(more.length, 0);
    assert.equal(second, first);
    assert.deepEqual(JSON.parse(first ?? ''), { type: 'noop', payload: { n: 1 } });
  });

  it('gives up after the bounded attempts and throws the last problem', async () => {
    answer = (response) => problem(response, 503, 'shutting_down', { 'retry-after': '2' });
    const { sleeps, sleep } = recordingSleep();
    const error = await caught(new KilnClient({ url, retry: { sleep, attempts: 3 } }).queue());
    assert.equal(error.status, 503);
    assert.equal(error.code, 'shutting_down');
    assert.equal(error.detail, 'shutting_down detail');
    assert.deepEqual(sleeps, [2000, 2000]);
    assert.equal(bodies().length, 3);
  });

  it('without Retry-After backs off exponentially, and never waits longer than maxDelayMs', async () => {
    answer = (response) => problem(response, 503, 'store_unavailable');
    const backoff = recordingSleep();
    await caught(new KilnClient({ url, retry: { sleep: backoff.sleep, attempts: 4 } }).queue());
    assert.deepEqual(backoff.sleeps, [1000, 2000, 4000]);
    answer = (response) => problem(response, 429, 'queue_full', { 'retry-after': '120' });
    const capped = recordingSleep();
    await caught(new KilnClient({ url, retry: { sleep: capped.sleep, attempts: 2, maxDelayMs: 5000 } }).queue());
    assert.deepEqual(capped.sleeps, [5000]);
  });

  it('does not retry other failures, and names an answer that is not a problem document', async () => {
    answer = (response) => {
      response.writeHead(502, { 'content-type': 'text/html' });
      response.end('<html>Bad Gateway</html>');
    };
    const { sleeps, sleep } = recordingSleep();
    const error = await caught(new KilnClient({ url, retry: { sleep } }).queue());
    assert.equal(error.status, 502);
    assert.equal(error.code, 'unexpected_response');
    assert.match(error.detail, /502/);
    assert.equal(error.problem, null);
    assert.deepEqual(sleeps, []);
    assert.equal(bodies().length, 1);
  });

  it('reads Retry-After as seconds or as an HTTP date', () => {
    assert.equal(retryAfterMs('3'), 3000);
    assert.equal(retryAfterMs('Wed, 21 Oct 2026 07:28:00 GMT', Date.parse('2026-10-21T07:27:30Z')), 30_000);
    assert.equal(retryAfterMs('soon'), null);
    assert.equal(retryAfterMs(null), null);
  });
});

describe('the typed client without a server', () => {
  it('throws a KilnError with status 0 and code network_error', async () => {
    const error = await caught(new KilnClient({ url: await closedPortUrl() }).queue());
    assert.equal(error.status, 0);
    assert.equal(error.code, 'network_error');
    assert.match(error.detail, /ECONNREFUSED/);
  });
});

describe('the job statuses the client exports', () => {
  it("are the server's, in its order, and the terminal ones are those the server ends a job in", () => {
    assert.deepEqual(JOB_STATUSES, SERVER_STATUSES);
    assert.deepEqual(
      TERMINAL_STATUSES,
      SERVER_STATUSES.filter((status) => isTerminal(status)),
    );
    for (const status of SERVER_STATUSES) assert.equal(isFinished({ status }), isTerminal(status), status);
  });
});
