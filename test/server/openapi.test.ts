import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { JOB_STATUSES } from '../../src/contract/job.js';
import { problemCodesOf } from '../../src/server/openapi.js';
import { PROBLEM_CODES } from '../../src/contract/problem-codes.js';
import { startServer, type TestResponse, type TestServer } from '../support/kiln.js';

type Json = Record<string, any>; // the OpenAPI document, read by key

const METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const;

/** Every operation of the document: method, path template and the operation object. */
function operations(document: Json): { method: string; path: string; operation: Json }[] {
  return Object.entries<Json>(document.paths).flatMap(([path, item]) =>
    METHODS.filter((method) => item[method] !== undefined).map((method) => ({
      method,
      path,
      operation: item[method] as Json,
    })),
  );
}

/**
 * Answers checked against the document: for each real answer, the operation it belongs to
 * must declare its status, with the answer's media type and a schema the body fits.
 */
class ResponseChecker {
  readonly #document: Json;
  readonly #ajv: Ajv2020;
  readonly #compiled = new Map<string, ValidateFunction>();
  /** "METHOD /path status" of every answer checked. */
  readonly seen = new Set<string>();

  constructor(document: Json) {
    this.#document = document;
    // strict: false, because OpenAPI schemas carry keywords JSON Schema does not know (example).
    this.#ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats.default(this.#ajv);
    this.#ajv.addSchema({ $id: 'openapi', components: document.components });
  }

  get document(): Json {
    return this.#document;
  }

  check(method: string, path: string, response: TestResponse): void {
    const where = `${method.toUpperCase()} ${path} ${response.status}`;
    const declared = this.#document.paths[path]?.[method]?.responses?.[String(response.status)];
    assert.ok(declared !== undefined, `${where}: the document does not declare this answer (${response.text})`);
    this.seen.add(where);
    for (const name of Object.keys(declared.headers ?? {})) {
      assert.ok(response.headers.get(name) !== null, `${where}: declared header ${name} is missing`);
    }
    if (declared.content === undefined) {
      assert.equal(response.text, '', `${where}: declared without a body`);
      return;
    }
    const contentType = response.headers.get('content-type') ?? '';
    const mediaType = Object.keys(declared.content).find((type) => contentType.split(';')[0] === type.split(';')[0]);
    assert.ok(
      mediaType !== undefined,
      `${where}: answered ${contentType}, declared ${Object.keys(declared.content).join(', ')}`,
    );
    const schema = declared.content[mediaType].schema;
    const key = `${where} ${mediaType}`;
    let validate = this.#compiled.get(key);
    if (validate === undefined) {
      const local = JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"openapi#/components/'));
      validate = this.#ajv.compile(local);
      this.#compiled.set(key, validate);
    }
    const body = schema.type === 'string' ? response.text : response.body;
    assert.ok(validate(body), `${where}: ${this.#ajv.errorsText(validate.errors)}\n${response.text.slice(0, 500)}`);
  }
}

describe('the OpenAPI document', () => {
  let server: TestServer;
  let document: Json;
  before(async () => {
    server = await startServer({ KILN_THREADS: '2' });
    document = (await server.request('GET', '/openapi.json')).body;
  });
  after(async () => {
    await server.close();
  });

  it('passes an OpenAPI 3.1 validator', async () => {
    const validator = new Validator();
    const result = await validator.validate(document);
    assert.equal(validator.version, '3.1');
    assert.deepEqual(result.errors ?? [], []);
    assert.equal(result.valid, true);
  });

  it('declares the job status and the problem code as enums of the real values', () => {
    const schemas = document.components.schemas;
    assert.deepEqual(schemas.Job.properties.status.enum, [...JOB_STATUSES]);
    assert.deepEqual([...schemas.Problem.properties.code.enum].sort(), Object.keys(PROBLEM_CODES).sort());
    for (const time of ['createdAt', 'startedAt', 'finishedAt', 'runAt']) {
      assert.match(JSON.stringify(schemas.Job.properties[time]), /"format":"date-time"/, time);
    }
  });

  it("declares the job's snoozes as an integer from 0, always present, and snooze_limit among its error codes", () => {
    const job = document.components.schemas.Job;
    assert.equal(job.properties.snoozes.type, 'integer');
    assert.equal(job.properties.snoozes.minimum, 0);
    assert.ok(job.required.includes('snoozes'));
    assert.match(JSON.stringify(document.components.schemas), /"snooze_limit"/);
  });

  it('declares every error answer as a problem document of its status, with its codes and headers', () => {
    let checked = 0;
    for (const { method, path, operation } of operations(document)) {
      for (const [status, response] of Object.entries<Json>(operation.responses)) {
        const code = Number(status);
        if (code < 400 || path === '/ready') continue; // /ready's 503 is its own shape (API.md)
        const where = `${method.toUpperCase()} ${path} ${status}`;
        assert.deepEqual(Object.keys(response.content), ['application/problem+json'], where);
        const schema = document.components.schemas[`Problem${status}`];
        assert.equal(response.content['application/problem+json'].schema.$ref, `#/components/schemas/Problem${status}`);
        assert.deepEqual(schema.allOf[1].properties.code.enum, problemCodesOf(code), where);
        assert.ok(schema.allOf[1].properties.code.enum.length > 0, `${where}: a status no code has`);
        if (code === 401) assert.ok(response.headers?.['WWW-Authenticate'], where);
        if (code === 429 || code === 503) assert.ok(response.headers?.['Retry-After'], where);
        checked++;
      }
    }
    assert.ok(checked > 30, `${checked} problem answers`);
  });

  it('declares no status a GET cannot answer, 401 on /metrics, and the media types of text answers', () => {
    for (const { method, path, operation } of operations(document)) {
      if (method !== 'get') continue;
      for (const impossible of ['409', '413', '415', '429']) {
        assert.equal(operation.responses[impossible], undefined, `GET ${path} declares ${impossible}`);
      }
    }
    const metrics = document.paths['/metrics'].get.responses;
    assert.ok(metrics['401']);
    assert.deepEqual(Object.keys(metrics['200'].content), ['text/plain; version=0.0.4']);
    assert.deepEqual(Object.keys(document.paths['/v1/jobs/{id}/events'].get.responses['200'].content), [
      'text/event-stream',
    ]);
    assert.ok(document.paths['/v1/jobs'].post.responses['201'].headers.Location);
  });

  it('names Kiln on the /docs page, not the framework', async () => {
    const page = await (await fetch(`${server.url}/docs`)).text();
    assert.match(page, /<title>Kiln API<\/title>/);
    assert.doesNotMatch(page, /favicon-32x32\.png/);
    const icon = /<link rel="icon" type="image\/svg\+xml" href="([^"]+)"/.exec(page);
    assert.ok(icon?.[1], 'an SVG icon');
    const iconAnswer = await fetch(new URL(icon[1], `${server.url}/docs`));
    assert.equal(iconAnswer.status, 200);
    const initializer = await (await fetch(`${server.url}/docs/static/swagger-initializer.js`)).text();
    assert.match(initializer, /image\/svg\+xml/, 'the logo is Kiln’s SVG');
  });

  it('has request examples that succeed when sent as they are, as /docs fills them in', async () => {
    let sent = 0;
    for (const { method, path, operation } of operations(document)) {
      const example = operation.requestBody?.content?.['application/json']?.example;
      if (example === undefined) continue;
      let url = path;
      for (const parameter of operation.parameters ?? []) {
        if (parameter.in !== 'path') continue;
        assert.notEqual(
          parameter.example,
          undefined,
          `${method} ${path}: path parameter ${parameter.name} has no example`,
        );
        url = url.replace(`{${parameter.name}}`, encodeURIComponent(String(parameter.example)));
      }
      const answer = await server.request(method.toUpperCase(), url, example);
      assert.ok(answer.status >= 200 && answer.status < 300, `${method} ${url} with its example: ${answer.text}`);
      sent++;
    }
    assert.ok(sent >= 3, `${sent} examples sent`);
  });
});

describe('real answers against the OpenAPI document', () => {
  let server: TestServer;
  let checker: ResponseChecker;
  const token = 'openapi-test-token';
  const auth = { authorization: `Bearer ${token}` };
  const releaseDir = mkdtempSync(join(tmpdir(), 'kiln-openapi-'));
  const release = join(releaseDir, 'release');

  before(async () => {
    server = await startServer({
      KILN_THREADS: '1',
      KILN_MAX_QUEUED: '3',
      KILN_MAX_BODY_BYTES: '2048',
      KILN_API_TOKENS: token,
    });
    checker = new ResponseChecker((await server.request('GET', '/openapi.json')).body);
  });
  after(async () => {
    writeFileSync(release, '');
    await server.close();
    rmSync(releaseDir, { recursive: true, force: true });
  });

  /** Sends a request and checks its answer against the operation at `template`. */
  async function send(
    method: string,
    path: string,
    template: string,
    body?: unknown,
    headers: Record<string, string> = auth,
  ): Promise<TestResponse> {
    const answer = await server.request(method, path, body, headers);
    checker.check(method.toLowerCase(), template, answer);
    return answer;
  }

  it('matches the schemas for each route’s success and its main errors', async () => {
    await send('GET', '/', '/', undefined, {});
    await send('GET', '/health', '/health', undefined, {});
    await send('GET', '/ready', '/ready', undefined, {});
    await send('GET', '/metrics', '/metrics');
    await send('GET', '/metrics', '/metrics', undefined, {});
    await send('GET', '/v1/tasks', '/v1/tasks');
    await send('GET', '/v1/tasks', '/v1/tasks', undefined, {});
    await send('GET', '/v1/nodes', '/v1/nodes');
    assert.deepEqual((await send('GET', '/v1/token', '/v1/token')).body, {
      name: 'env:1',
      scopes: ['read', 'submit', 'admin'],
    });

    const created = await send('POST', '/v1/jobs', '/v1/jobs', {
      type: 'noop',
      idempotencyKey: 'k1',
      metadata: { a: 1 },
    });
    assert.equal(created.status, 201);
    const id = created.body.id as string;
    assert.equal(
      (await send('POST', '/v1/jobs', '/v1/jobs', { type: 'noop', idempotencyKey: 'k1', metadata: { a: 1 } })).status,
      200,
    );
    assert.equal(
      (await send('POST', '/v1/jobs', '/v1/jobs', { type: 'noop', payload: { echo: 'other' }, idempotencyKey: 'k1' }))
        .status,
      409,
    );
    assert.equal((await send('POST', '/v1/jobs', '/v1/jobs', { type: 'nope' })).status, 400);
    assert.equal((await send('POST', '/v1/jobs', '/v1/jobs', '{"type":', { ...auth })).status, 400);
    assert.equal(
      (await send('POST', '/v1/jobs', '/v1/jobs', 'x', { ...auth, 'content-type': 'text/plain' })).status,
      415,
    );
    assert.equal((await send('POST', '/v1/jobs', '/v1/jobs', { type: 'noop', payload: 'x'.repeat(4000) })).status, 413);
    assert.equal((await send('POST', '/v1/jobs', '/v1/jobs', { type: 'noop' }, {})).status, 401);

    assert.equal((await send('GET', `/v1/jobs/${id}?wait=30`, '/v1/jobs/{id}')).body.status, 'completed');
    assert.equal((await send('GET', '/v1/jobs/no-such-job', '/v1/jobs/{id}')).status, 404);
    assert.equal((await send('GET', `/v1/jobs/${id}?wait=99`, '/v1/jobs/{id}')).status, 400);
    assert.equal((await send('GET', `/v1/jobs/${id}/events`, '/v1/jobs/{id}/events')).status, 200);
    assert.equal((await send('GET', '/v1/jobs/no-such-job/events', '/v1/jobs/{id}/events')).status, 404);
    assert.equal((await send('GET', `/v1/jobs/${id}/callbacks`, '/v1/jobs/{id}/callbacks')).status, 200);
    assert.equal((await send('GET', '/v1/jobs/no-such-job/callbacks', '/v1/jobs/{id}/callbacks')).status, 404);
    assert.equal((await send('GET', '/v1/jobs?limit=2', '/v1/jobs')).status, 200);
    assert.equal((await send('GET', '/v1/jobs?status=bogus', '/v1/jobs')).status, 400);

    const batch = await send('POST', '/v1/jobs/batch', '/v1/jobs/batch', {
      jobs: [
        { ref: 'a', type: 'noop' },
        { type: 'noop', dependsOn: ['ref:a'] },
      ],
    });
    assert.equal(batch.status, 201);
    assert.equal((await send('POST', '/v1/jobs/batch', '/v1/jobs/batch', { jobs: [] })).status, 400);
    const batchPath = `/v1/batches/${batch.body.batch}`;
    assert.equal((await send('GET', batchPath, '/v1/batches/{id}')).status, 200);
    assert.equal((await send('GET', '/v1/batches/no-such-batch', '/v1/batches/{id}')).status, 404);
    assert.equal((await send('GET', `/v1/jobs?batch=${batch.body.batch}`, '/v1/jobs')).status, 200);
    assert.equal((await send('DELETE', batchPath, '/v1/batches/{id}')).status, 200);
    assert.equal((await send('DELETE', '/v1/batches/no-such-batch', '/v1/batches/{id}')).status, 404);

    assert.equal((await send('POST', `/v1/jobs/${id}/cancel`, '/v1/jobs/{id}/cancel')).status, 409);
    assert.equal((await send('POST', '/v1/jobs/no-such-job/cancel', '/v1/jobs/{id}/cancel')).status, 404);
    assert.equal((await send('POST', `/v1/jobs/${id}/retry`, '/v1/jobs/{id}/retry')).status, 409);

    // A job held running: cancel it, retry it, delete it.
    const held = await send('POST', '/v1/jobs', '/v1/jobs', { type: 'test.hold', payload: { release } });
    await server.whenStatus(held.body.id, 'running');
    assert.equal((await send('DELETE', `/v1/jobs/${held.body.id}`, '/v1/jobs/{id}')).status, 409);
    assert.equal((await send('POST', `/v1/jobs/${held.body.id}/cancel`, '/v1/jobs/{id}/cancel')).status, 200);
    assert.equal((await send('POST', `/v1/jobs/${held.body.id}/retry`, '/v1/jobs/{id}/retry')).status, 200);
    assert.equal((await send('POST', `/v1/jobs/${held.body.id}/cancel`, '/v1/jobs/{id}/cancel')).status, 200);
    assert.equal((await send('DELETE', `/v1/jobs/${held.body.id}`, '/v1/jobs/{id}')).status, 204);
    assert.equal((await send('DELETE', `/v1/jobs/${held.body.id}`, '/v1/jobs/{id}')).status, 404);

    // The queue: paused, filled to its capacity of 3, refused, resumed.
    assert.equal((await send('POST', '/v1/queue/pause', '/v1/queue/pause')).body.paused, true);
    for (let i = 0; i < 3; i++) await send('POST', '/v1/jobs', '/v1/jobs', { type: 'noop' });
    const full = await send('POST', '/v1/jobs', '/v1/jobs', { type: 'noop' });
    assert.equal(full.status, 429);
    assert.equal((await send('GET', '/v1/queue', '/v1/queue')).body.pending, 3);
    assert.equal((await send('POST', '/v1/queue/resume', '/v1/queue/resume')).body.paused, false);

    assert.equal(
      (await send('PUT', '/v1/tasks/noop/limits', '/v1/tasks/{name}/limits', { concurrency: 1 })).status,
      200,
    );
    assert.equal(
      (await send('PUT', '/v1/tasks/nope/limits', '/v1/tasks/{name}/limits', { concurrency: 1 })).status,
      404,
    );
    assert.equal((await send('PUT', '/v1/tasks/noop/limits', '/v1/tasks/{name}/limits', {})).status, 400);
    assert.equal((await send('DELETE', '/v1/tasks/noop/limits', '/v1/tasks/{name}/limits')).status, 200);

    const groupLimits = '/v1/groups/{group}/limits';
    assert.equal((await send('PUT', '/v1/groups/tenant-a/limits', groupLimits, { concurrency: 1 })).status, 200);
    assert.equal((await send('PUT', '/v1/groups/tenant-a/limits', groupLimits, {})).status, 400);
    assert.equal((await send('GET', '/v1/groups', '/v1/groups')).status, 200);
    assert.equal((await send('DELETE', '/v1/groups/tenant-a/limits', groupLimits)).status, 204);

    const schedule = { cron: '0 0 1 1 *', job: { type: 'noop', group: 'tenant-a' } };
    const one = '/v1/schedules/{name}';
    assert.equal((await send('PUT', '/v1/schedules/yearly', one, schedule)).status, 201);
    assert.equal((await send('PUT', '/v1/schedules/yearly', one, { ...schedule, overlap: 'skip' })).status, 200);
    assert.equal((await send('PUT', '/v1/schedules/yearly', one, { ...schedule, cron: 'often' })).status, 400);
    assert.equal((await send('GET', '/v1/schedules', '/v1/schedules')).status, 200);
    assert.equal((await send('GET', '/v1/schedules/yearly', one)).status, 200);
    assert.equal((await send('GET', '/v1/schedules/none', one)).status, 404);
    assert.equal((await send('POST', '/v1/schedules/yearly/pause', `${one}/pause`)).status, 200);
    assert.equal((await send('POST', '/v1/schedules/yearly/resume', `${one}/resume`)).status, 200);
    assert.equal((await send('POST', '/v1/schedules/none/resume', `${one}/resume`)).status, 404);
    const triggered = await send('POST', '/v1/schedules/yearly/trigger', `${one}/trigger`);
    assert.equal(triggered.status, 201);
    assert.equal((await send('GET', `/v1/jobs/${triggered.body.id}?wait=30`, '/v1/jobs/{id}')).body.schedule, 'yearly');
    assert.equal((await send('DELETE', '/v1/schedules/yearly', one)).status, 204);
    assert.equal((await send('DELETE', '/v1/schedules/yearly', one)).status, 404);

    // After the jobs above the window has samples, so its percentiles are numbers (null without samples).
    const stats = await send('GET', '/v1/stats?window=60', '/v1/stats');
    assert.equal(stats.status, 200);
    assert.equal(typeof stats.body.totals.runMsP50, 'number');
    assert.equal((await send('GET', '/v1/stats?window=5', '/v1/stats')).status, 400);

    // Draining: a running attempt holds the server in its grace period, submissions get 503.
    const last = await send('POST', '/v1/jobs', '/v1/jobs', { type: 'test.hold', payload: { release } });
    await server.whenStatus(last.body.id, 'running');
    const stopping = server.kiln.stop();
    const refused = await send('POST', '/v1/jobs', '/v1/jobs', { type: 'noop' });
    assert.equal(refused.status, 503);
    writeFileSync(release, '');
    await stopping;

    const unseen = operations(checker.document)
      .map(({ method, path }) => `${method.toUpperCase()} ${path}`)
      .filter((route) => ![...checker.seen].some((seen) => seen.startsWith(`${route} 2`)));
    assert.deepEqual(unseen, [], 'every route has a success answer checked here: add a sample for a new route');
  });
});
