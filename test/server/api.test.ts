import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';
import { inheritedEnv, mainScript } from '../support/kiln-process.js';

/** Sends raw bytes to the server and answers everything it wrote back. */
function rawRequest(url: string, text: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.end(text));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.on('error', reject);
  });
}

function assertProblem(response: { status: number; headers: Headers; body: any }, status: number, code: string) {
  assert.equal(response.status, status, JSON.stringify(response.body));
  assert.match(response.headers.get('content-type') ?? '', /^application\/problem\+json/);
  assert.equal(response.body.status, status);
  assert.equal(response.body.code, code);
  assert.equal(typeof response.body.title, 'string');
  assert.equal(typeof response.body.detail, 'string');
  assert.equal(response.body.type, 'about:blank');
}

describe('the HTTP API', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_THREADS: '2', KILN_MAX_BODY_BYTES: '4096' });
  });
  after(async () => {
    await server.close();
  });

  it('submits, long-polls and returns a completed job with the documented fields', async () => {
    const created = await server.request('POST', '/v1/jobs', {
      type: 'hash.sha256',
      payload: { data: 'hello' },
      metadata: { team: 'a' },
    });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.headers.get('location'), `/v1/jobs/${created.body.id}`);
    assert.match(created.body.id, /^[0-9a-f-]{36}$/);
    const job: any = await server.waitForJob(created.body.id);
    assert.equal(job.status, 'completed');
    assert.equal(job.result.digest, '2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824');
    for (const field of [
      'id',
      'type',
      'status',
      'priority',
      'payload',
      'result',
      'error',
      'attempts',
      'maxAttempts',
      'timeoutMs',
      'backoff',
      'progress',
      'idempotencyKey',
      'dependsOn',
      'metadata',
      'runAt',
      'createdAt',
      'startedAt',
      'finishedAt',
    ]) {
      assert.ok(field in job, `job has ${field}`);
    }
    assert.deepEqual(job.metadata, { team: 'a' });
    assert.equal(job.priority, 5);
    assert.equal(job.maxAttempts, 3);
    assert.ok(!Number.isNaN(Date.parse(job.finishedAt)));
  });

  it('answers every client error with its problem code', async () => {
    assertProblem(
      await server.request('POST', '/v1/jobs', '{"type": "noop",', { 'content-type': 'application/json' }),
      400,
      'invalid_json',
    );
    const unknownField = await server.request('POST', '/v1/jobs', { type: 'noop', colour: 'red' });
    assertProblem(unknownField, 400, 'validation_error');
    const outOfRange = await server.request('POST', '/v1/jobs', { type: 'noop', priority: 10 });
    assertProblem(outOfRange, 400, 'validation_error');
    assert.equal(outOfRange.body.errors[0].path, 'priority');
    const badPayload = await server.request('POST', '/v1/jobs', {
      type: 'hash.pbkdf2',
      payload: { password: 'x', iterations: 100_000_000 },
    });
    assertProblem(badPayload, 400, 'validation_error');
    assert.equal(badPayload.body.errors[0].path, 'payload.iterations');
    assertProblem(await server.request('POST', '/v1/jobs', { type: 'no.such.task' }), 400, 'unknown_task_type');
    assertProblem(
      await server.request('POST', '/v1/jobs', { type: 'noop', dependsOn: ['0193aaaa-0000-7000-8000-000000000000'] }),
      400,
      'unknown_dependency',
    );
    assertProblem(await server.request('GET', '/v1/jobs/0193aaaa-0000-7000-8000-000000000000'), 404, 'not_found');
    assertProblem(await server.request('GET', '/v1/nothing-here'), 404, 'not_found');
    assertProblem(await server.request('PATCH', '/v1/jobs'), 404, 'not_found');
    assertProblem(
      await server.request('POST', '/v1/jobs', { type: 'noop', payload: { echo: 'x'.repeat(5000) } }),
      413,
      'payload_too_large',
    );
    assertProblem(
      await server.request('POST', '/v1/jobs', 'type=noop', { 'content-type': 'text/plain' }),
      415,
      'unsupported_media_type',
    );
    assertProblem(await server.request('GET', '/v1/jobs/%E0%A4%A'), 400, 'validation_error');
    assertProblem(await server.request('GET', '/v1/jobs?limit=0'), 400, 'validation_error');
    assertProblem(await server.request('GET', '/v1/jobs?status=sleeping'), 400, 'validation_error');
    const cursor = await server.request('GET', '/v1/jobs?cursor=not-a-cursor!');
    assertProblem(cursor, 400, 'validation_error');
    assert.equal(cursor.body.errors[0].path, 'cursor');
  });

  it('replays an idempotency key with the same input and refuses a different one', async () => {
    const first = await server.request(
      'POST',
      '/v1/jobs',
      { type: 'test.sequence', payload: { a: 1, b: 2 } },
      {
        'idempotency-key': 'order-17',
      },
    );
    assert.equal(first.status, 201);
    assert.equal(first.body.idempotencyKey, 'order-17');
    const replay = await server.request('POST', '/v1/jobs', {
      type: 'test.sequence',
      payload: { b: 2, a: 1 },
      idempotencyKey: 'order-17',
    });
    assert.equal(replay.status, 200);
    assert.equal(replay.body.id, first.body.id);
    assertProblem(
      await server.request(
        'POST',
        '/v1/jobs',
        { type: 'test.sequence', payload: { a: 2 } },
        { 'idempotency-key': 'order-17' },
      ),
      409,
      'idempotency_conflict',
    );
  });

  it('refuses actions that do not fit the status with invalid_state', async () => {
    const created = await server.request('POST', '/v1/jobs', { type: 'noop' });
    await server.waitForJob(created.body.id);
    assertProblem(await server.request('POST', `/v1/jobs/${created.body.id}/cancel`), 409, 'invalid_state');
    assertProblem(await server.request('POST', `/v1/jobs/${created.body.id}/retry`), 409, 'invalid_state');
    await server.request('POST', '/v1/queue/pause');
    const queued = await server.request('POST', '/v1/jobs', { type: 'noop' });
    assertProblem(await server.request('DELETE', `/v1/jobs/${queued.body.id}`), 409, 'invalid_state');
    const cancelled = await server.request('POST', `/v1/jobs/${queued.body.id}/cancel`);
    assert.equal(cancelled.body.status, 'cancelled');
    await server.request('POST', '/v1/queue/resume');
    const retried = await server.request('POST', `/v1/jobs/${queued.body.id}/retry`);
    assert.equal(retried.status, 200);
    assert.equal(retried.body.attempts, 0);
    assert.equal((await server.waitForJob(queued.body.id)).status, 'completed');
    const removed = await server.request('DELETE', `/v1/jobs/${queued.body.id}`);
    assert.equal(removed.status, 204);
    assertProblem(await server.request('GET', `/v1/jobs/${queued.body.id}`), 404, 'not_found');
  });

  it('builds a fan-out/fan-in graph in one batch and hands parents their results', async () => {
    const batch = await server.request('POST', '/v1/jobs/batch', {
      jobs: [
        { ref: 'a', type: 'test.sum', payload: { value: 1 } },
        { ref: 'b', type: 'test.sum', payload: { value: 10 } },
        { ref: 'c', type: 'test.sum', payload: { value: 100 }, dependsOn: ['ref:a', 'ref:b'] },
      ],
    });
    assert.equal(batch.status, 201, batch.text);
    const [a, b, c] = batch.body.jobs;
    assert.equal(c.status, 'waiting');
    assert.deepEqual(c.dependsOn, [a.id, b.id]);
    const done: any = await server.waitForJob(c.id);
    assert.equal(done.status, 'completed');
    assert.equal(done.result.total, 111);
    assert.deepEqual(done.result.parents, [a.id, b.id]);
  });

  it('fails dependents transitively when a parent fails', async () => {
    const batch = await server.request('POST', '/v1/jobs/batch', {
      jobs: [
        { ref: 'root', type: 'test.fatal' },
        { ref: 'mid', type: 'noop', dependsOn: ['ref:root'] },
        { ref: 'leaf', type: 'noop', dependsOn: ['ref:mid'] },
      ],
    });
    assert.equal(batch.status, 201, batch.text);
    const leaf: any = await server.waitForJob(batch.body.jobs[2].id);
    assert.equal(leaf.status, 'failed');
    assert.equal(leaf.error.code, 'dependency_failed');
    const mid: any = await server.waitForJob(batch.body.jobs[1].id);
    assert.equal(mid.error.code, 'dependency_failed');
  });

  it('retries a dependent only after its failed dependency was retried and completed', async () => {
    await server.request('POST', '/v1/queue/pause');
    const batch = await server.request('POST', '/v1/jobs/batch', {
      jobs: [
        { ref: 'parent', type: 'noop' },
        { ref: 'child', type: 'noop', dependsOn: ['ref:parent'] },
      ],
    });
    const [parent, child] = batch.body.jobs;
    assert.equal((await server.request('POST', `/v1/jobs/${parent.id}/cancel`)).body.status, 'cancelled');
    const failed = await server.request('GET', `/v1/jobs/${child.id}`);
    assert.equal(failed.body.status, 'failed');
    assert.equal(failed.body.error.code, 'dependency_failed');
    const refused = await server.request('POST', `/v1/jobs/${child.id}/retry`);
    assertProblem(refused, 409, 'invalid_state');
    assert.match(refused.body.detail, new RegExp(parent.id));
    assert.equal((await server.request('POST', `/v1/jobs/${parent.id}/retry`)).body.status, 'queued');
    await server.request('POST', '/v1/queue/resume');
    assert.equal((await server.waitForJob(parent.id)).status, 'completed');
    const retried = await server.request('POST', `/v1/jobs/${child.id}/retry`);
    assert.equal(retried.body.status, 'queued');
    assert.equal((await server.waitForJob(child.id)).status, 'completed');
  });

  it('stores nothing of a batch with one bad item, and names the item', async () => {
    const before = await server.request('GET', '/v1/queue');
    const batch = await server.request('POST', '/v1/jobs/batch', {
      jobs: [{ type: 'noop' }, { type: 'hash.pbkdf2', payload: { password: 1 } }],
    });
    assertProblem(batch, 400, 'validation_error');
    assert.match(batch.body.errors[0].path, /^jobs\.1\.payload/);
    const badRef = await server.request('POST', '/v1/jobs/batch', {
      jobs: [
        { type: 'noop', dependsOn: ['ref:later'] },
        { ref: 'later', type: 'noop' },
      ],
    });
    assertProblem(badRef, 400, 'validation_error');
    const afterwards = await server.request('GET', '/v1/queue');
    const total = (q: any) => Object.values(q.byStatus as Record<string, number>).reduce((s, n) => s + n, 0);
    assert.equal(total(afterwards.body), total(before.body));
  });

  it('lists newest first with a cursor', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++)
      ids.push((await server.request('POST', '/v1/jobs', { type: 'math.primes', payload: { limit: 10 } })).body.id);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const query: string = `/v1/jobs?type=math.primes&limit=2${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`;
      const page = await server.request('GET', query);
      assert.equal(page.status, 200, page.text);
      for (const job of page.body.jobs) {
        assert.ok(!('payload' in job) && !('result' in job));
        seen.push(job.id);
      }
      cursor = page.body.nextCursor;
    } while (cursor !== null);
    assert.deepEqual(seen, [...ids].reverse());
  });

  it('serves the queue, the tasks, health, readiness, OpenAPI and docs', async () => {
    const queue = await server.request('GET', '/v1/queue');
    assert.equal(queue.status, 200);
    assert.equal(queue.body.capacity, 100_000);
    assert.deepEqual(queue.body.threads.size, 2);
    const tasks = await server.request('GET', '/v1/tasks');
    const names = tasks.body.tasks.map((t: any) => t.name);
    for (const name of [
      'hash.pbkdf2',
      'hash.scrypt',
      'hash.sha256',
      'compress.gzip',
      'compress.gunzip',
      'compress.brotli',
      'math.primes',
      'noop',
      'cpu.spin',
    ]) {
      assert.ok(names.includes(name), name);
    }
    const pbkdf2 = tasks.body.tasks.find((t: any) => t.name === 'hash.pbkdf2');
    assert.equal(pbkdf2.payloadSchema.type, 'object');
    assert.deepEqual((await server.request('GET', '/health')).body, { status: 'ok' });
    assert.equal((await server.request('GET', '/ready')).status, 200);
    const openapi = await server.request('GET', '/openapi.json');
    assert.equal(openapi.body.openapi, '3.1.0');
    assert.ok(openapi.body.paths['/v1/jobs'].post);
    assert.ok(openapi.body.paths['/v1/jobs/batch'].post);
    assert.ok(openapi.body.paths['/v1/nodes'].get);
    const docs = await fetch(`${server.url}/docs`, { redirect: 'follow' });
    assert.equal(docs.status, 200);
    assert.match(await docs.text(), /<html/i);
  });

  it('lists this server alone in GET /v1/nodes when the store is not shared', async () => {
    const nodes = await server.request('GET', '/v1/nodes');
    assert.equal(nodes.status, 200);
    assert.equal(nodes.body.nodes.length, 1);
    const [node] = nodes.body.nodes;
    assert.equal(node.pid, process.pid);
    assert.equal(node.threads, (await server.request('GET', '/v1/queue')).body.threads.size);
    assert.ok(node.lastSeenAt >= node.startedAt);
    const metrics = await server.request('GET', '/metrics');
    assert.doesNotMatch(metrics.text, /^kiln_nodes /m);
  });

  it('exposes every documented metric', async () => {
    const done = await server.request('POST', '/v1/jobs', { type: 'noop' });
    await server.waitForJob(done.body.id);
    const metrics = await fetch(`${server.url}/metrics`);
    assert.equal(metrics.status, 200);
    const text = await metrics.text();
    for (const name of [
      'kiln_jobs_submitted_total',
      'kiln_jobs_finished_total',
      'kiln_job_attempts_total',
      'kiln_jobs_snoozed_total',
      'kiln_admission_rejected_total',
      'kiln_queue_depth',
      'kiln_jobs',
      'kiln_queue_capacity',
      'kiln_job_wait_seconds',
      'kiln_job_run_seconds',
      'kiln_queue_oldest_age_seconds',
      'kiln_pool_threads',
      'kiln_pool_busy_threads',
      'kiln_store_commit_seconds',
      'kiln_task_running',
      'kiln_task_limited_total',
      'kiln_group_limited_total',
      'kiln_group_running',
      'kiln_dedupe_hits_total',
      'nodejs_eventloop_lag_seconds',
    ]) {
      assert.match(text, new RegExp(`^# TYPE ${name} `, 'm'), name);
    }
    assert.match(text, /^kiln_jobs_finished_total\{type="noop",status="completed"\} [1-9]/m);
    assert.match(text, /^kiln_store_commit_seconds_count [1-9]/m, 'the insert and the finish were commits');
  });

  it('writes metrics that promtool check metrics accepts', async (t) => {
    const done = await server.request('POST', '/v1/jobs', { type: 'noop' });
    await server.waitForJob(done.body.id);
    const text = await (await fetch(`${server.url}/metrics`)).text();
    assert.match(text, /^kiln_job_run_seconds_bucket\{/m, 'the exposition holds a histogram with samples');
    const promtool = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    if ((promtool.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
      assert.notEqual(
        process.env.CI,
        'true',
        'promtool is not on PATH: CI must install it (Debian package prometheus)',
      );
      t.skip('promtool is not installed (Debian package prometheus): the exposition format was NOT checked');
      return;
    }
    assert.equal(promtool.error, undefined, `promtool did not run: ${String(promtool.error)}`);
    assert.equal(promtool.status, 0, `promtool: ${promtool.stdout}${promtool.stderr}`);
  });
});

describe('admission and auth', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_MAX_QUEUED: '3', KILN_API_TOKENS: 'first-token, second-token' });
  });
  after(async () => {
    await server.close();
  });
  const auth = { authorization: 'Bearer second-token' };

  it('needs a bearer token on /v1 and /metrics, not on /health and /ready', async () => {
    const none = await server.request('GET', '/v1/queue');
    assertProblem(none, 401, 'unauthorized');
    assert.match(none.headers.get('www-authenticate') ?? '', /^Bearer/);
    assertProblem(
      await server.request('GET', '/v1/queue', undefined, { authorization: 'Bearer nope' }),
      401,
      'unauthorized',
    );
    assertProblem(await server.request('GET', '/metrics'), 401, 'unauthorized');
    assert.equal((await server.request('GET', '/v1/queue', undefined, auth)).status, 200);
    assert.equal(
      (await server.request('GET', '/metrics', undefined, { authorization: 'Bearer first-token' })).status,
      200,
    );
    assert.equal((await server.request('GET', '/health')).status, 200);
    assert.equal((await server.request('GET', '/ready')).status, 200);
  });

  it('cannot be side-stepped with percent-encoded or absolute-form paths', async () => {
    for (const path of ['/%761/queue', '/%76%31/tasks', '/%6detrics', '/v1/queue?x=1', '/metrics?x']) {
      const response = await server.request('GET', path);
      assert.equal(response.status, 401, `${path}: ${response.status}`);
    }
    const raw = await rawRequest(server.url, 'GET http://x/v1/queue HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.match(raw, /^HTTP\/1\.1 401 /);
    const head = await rawRequest(server.url, 'HEAD /%761/queue HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    assert.match(head, /^HTTP\/1\.1 401 /);
  });

  it('refuses admission past capacity with 429 and Retry-After, all or nothing', async () => {
    await server.request('POST', '/v1/queue/pause', undefined, auth);
    for (let i = 0; i < 2; i++)
      assert.equal((await server.request('POST', '/v1/jobs', { type: 'noop' }, auth)).status, 201);
    const batch = await server.request('POST', '/v1/jobs/batch', { jobs: [{ type: 'noop' }, { type: 'noop' }] }, auth);
    assertProblem(batch, 429, 'queue_full');
    assert.match(batch.headers.get('retry-after') ?? '', /^\d+$/);
    assert.equal((await server.request('POST', '/v1/jobs', { type: 'noop' }, auth)).status, 201);
    const full = await server.request('POST', '/v1/jobs', { type: 'noop' }, auth);
    assertProblem(full, 429, 'queue_full');
    const queue = await server.request('GET', '/v1/queue', undefined, auth);
    assert.equal(queue.body.pending, 3);
    assert.equal(queue.body.byPriority['5'], 3);
    await server.request('POST', '/v1/queue/resume', undefined, auth);
  });

  it('answers 503 shutting_down once draining', async () => {
    const stopping = server.kiln.scheduler.stop(1000);
    const refused = await server.request('POST', '/v1/jobs', { type: 'noop' }, auth);
    assertProblem(refused, 503, 'shutting_down');
    assert.ok(refused.headers.get('retry-after'));
    assert.equal((await server.request('GET', '/ready')).status, 503);
    await stopping;
  });
});

describe('configuration', () => {
  it('exits 1 with a one-line reason naming the variable and the value', () => {
    const result = spawnSync(process.execPath, [mainScript], {
      env: { ...inheritedEnv(), KILN_THREADS: 'abc', KILN_STORE: 'memory' },
      encoding: 'utf8',
    });
    assert.equal(result.status, 1);
    assert.equal(result.stderr.trim().split('\n').length, 1);
    assert.match(result.stderr, /KILN_THREADS must be an integer from 1 to 256, got "abc"/);
  });

  it('stops at start when a task module is malformed, naming the file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kiln-bad-tasks-'));
    writeFileSync(join(dir, 'broken.mjs'), 'export default { name: "x y", handler: 3 };\n');
    const result = spawnSync(process.execPath, [mainScript], {
      env: { ...inheritedEnv(), KILN_TASKS_DIR: dir, KILN_STORE: 'memory', PORT: '0' },
      encoding: 'utf8',
    });
    assert.equal(result.status, 1);
    assert.match(result.stderr, /broken\.mjs/);
    rmSync(dir, { recursive: true, force: true });
  });
});
