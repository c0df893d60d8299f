import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import { registerAuth } from '../../src/server/auth.js';
import { startServer, type TestResponse, type TestServer } from '../support/kiln.js';
import { captureLog, LEVELS } from '../support/log-lines.js';
import { pollUntil } from '../support/poll.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../support/postgres.js';
import { DEADLINE_MS } from '../support/raw-http.js';

/**
 * Scoped tokens through a real server: KILN_API_TOKENS (every scope) beside a file of
 * named tokens, one given in clear, one as its SHA-256; the scope each operation
 * needs, as the OpenAPI document declares it, is what the server enforces; the log
 * names the token on every request and writes one audit line per admin action, and
 * never a secret.
 */

const SECRETS = { env: 'env-secret-token', viewer: 'viewer-secret-token', ci: 'ci-secret-token' };
const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });
/** How the log names the token of these headers. */
const nameOf = (headers: { authorization: string }) =>
  ({ [SECRETS.env]: 'env:1', [SECRETS.viewer]: 'viewer', [SECRETS.ci]: 'ci' })[headers.authorization.slice(7)];

function assertForbidden(response: TestResponse, scope: string, where: string): void {
  assert.equal(response.status, 403, `${where}: ${response.status} ${response.text}`);
  assert.match(response.headers.get('content-type') ?? '', /^application\/problem\+json/);
  assert.equal(response.body.code, 'forbidden', where);
  assert.match(String(response.body.detail), new RegExp(`needs the scope ${scope}\\b`), where);
}

interface Operation {
  method: string;
  path: string;
  scope: string;
}

/** Every operation of the OpenAPI document that declares a scope. */
function operationsOf(document: { paths: Record<string, Record<string, { 'x-kiln-scope'?: string }>> }): Operation[] {
  return Object.entries(document.paths).flatMap(([path, operations]) =>
    Object.entries(operations).flatMap(([method, operation]) =>
      operation['x-kiln-scope'] === undefined ? [] : [{ method, path, scope: operation['x-kiln-scope'] }],
    ),
  );
}

for (const store of ['sqlite', 'postgres'] as const) {
  describe(`scoped tokens on ${store}`, () => {
    let server: TestServer;
    const lines: string[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'kiln-tokens-'));
    const schema = freshSchemaName();

    before(async () => {
      const file = join(dir, 'tokens.json');
      writeFileSync(
        file,
        JSON.stringify([
          {
            name: 'viewer',
            // Upper-case hex is accepted as well.
            sha256: createHash('sha256').update(SECRETS.viewer).digest('hex').toUpperCase(),
            scopes: ['read'],
          },
          { name: 'ci', token: SECRETS.ci, scopes: ['submit'] },
        ]),
      );
      const sink = new Writable({
        write(chunk: Buffer, _encoding, done) {
          lines.push(chunk.toString('utf8'));
          done();
        },
      });
      const logger = pino({ level: 'info' }, sink) as FastifyBaseLogger;
      server = await startServer(
        {
          KILN_API_TOKENS: SECRETS.env,
          KILN_API_TOKENS_FILE: file,
          ...(store === 'sqlite' ? { KILN_STORE: 'sqlite' } : { KILN_STORE: TEST_PG_URL, KILN_PG_SCHEMA: schema }),
        },
        undefined,
        { logger },
      );
    });
    after(async () => {
      await server.close();
      if (store === 'postgres') await dropSchema(schema);
      rmSync(dir, { recursive: true, force: true });
    });

    it('lets each token do what its scopes allow and answers 403 naming the scope otherwise', async () => {
      const viewer = bearer(SECRETS.viewer);
      const ci = bearer(SECRETS.ci);
      const admin = bearer(SECRETS.env);

      // read: every GET, the event stream and /metrics.
      assert.equal((await server.request('GET', '/v1/queue', undefined, viewer)).status, 200);
      assert.equal((await server.request('GET', '/metrics', undefined, viewer)).status, 200);
      assertForbidden(await server.request('POST', '/v1/jobs', { type: 'noop' }, viewer), 'submit', 'read submits');
      assertForbidden(
        await server.request('POST', '/v1/jobs/batch', { jobs: [{ type: 'noop' }] }, viewer),
        'submit',
        'read submits a batch',
      );

      // submit: read, and jobs and batches.
      const submitted = await server.request('POST', '/v1/jobs', { type: 'noop' }, ci);
      assert.equal(submitted.status, 201, submitted.text);
      const id = submitted.body.id as string;
      assert.equal((await server.request('POST', '/v1/jobs/batch', { jobs: [{ type: 'noop' }] }, ci)).status, 201);
      assert.equal((await server.request('GET', `/v1/jobs/${id}?wait=30`, undefined, ci)).body.status, 'completed');
      const stream = await server.request('GET', `/v1/jobs/${id}/events`, undefined, viewer);
      assert.equal(stream.status, 200);
      assert.match(stream.text, /^event: job\n/);
      assertForbidden(await server.request('POST', `/v1/jobs/${id}/retry`, undefined, ci), 'admin', 'submit retries');
      assertForbidden(await server.request('POST', '/v1/queue/pause', undefined, ci), 'admin', 'submit pauses');
      assertForbidden(await server.request('DELETE', `/v1/jobs/${id}`, undefined, viewer), 'admin', 'read deletes');
      assert.equal((await server.request('GET', `/v1/jobs/${id}`, undefined, viewer)).status, 200, 'nothing removed');

      // admin: KILN_API_TOKENS has every scope.
      assert.equal((await server.request('POST', '/v1/queue/pause', undefined, admin)).status, 200);
      assert.equal((await server.request('POST', '/v1/queue/resume', undefined, admin)).status, 200);
      assert.equal((await server.request('DELETE', `/v1/jobs/${id}`, undefined, admin)).status, 204);

      // Neither a wrong token nor none is let in; the refusal is 401, not 403.
      const wrong = await server.request('GET', '/v1/queue', undefined, bearer('not-a-token'));
      assert.equal(wrong.status, 401);
      assert.equal(wrong.body.code, 'unauthorized');
    });

    it('tells a token its name and every scope it holds', async () => {
      const answers = await Promise.all(
        [SECRETS.viewer, SECRETS.ci, SECRETS.env].map((secret) =>
          server.request('GET', '/v1/token', undefined, bearer(secret)),
        ),
      );
      assert.deepEqual(
        answers.map((answer) => answer.body),
        [
          { name: 'viewer', scopes: ['read'] },
          { name: 'ci', scopes: ['read', 'submit'] },
          { name: 'env:1', scopes: ['read', 'submit', 'admin'] },
        ],
      );
      assert.equal((await server.request('GET', '/v1/token')).status, 401);
    });

    it('enforces for every operation the scope the OpenAPI document declares', async () => {
      const document = (await server.request('GET', '/openapi.json')).body as Parameters<typeof operationsOf>[0];
      const operations = operationsOf(document);
      const paths = Object.keys(document.paths).filter((path) => path.startsWith('/v1/') || path === '/metrics');
      for (const path of paths) {
        for (const method of Object.keys(document.paths[path] ?? {})) {
          assert.ok(
            operations.some((o) => o.path === path && o.method === method),
            `${method} ${path} declares its scope`,
          );
        }
      }
      for (const { method, path, scope } of operations) {
        const expected = method === 'get' ? 'read' : ['/v1/jobs', '/v1/jobs/batch'].includes(path) ? 'submit' : 'admin';
        assert.equal(scope, expected, `${method} ${path}`);
        const entry = document.paths[path]?.[method] as { security?: unknown; responses?: Record<string, unknown> };
        assert.deepEqual(entry.security, [{ bearer: [scope] }], `${method} ${path}: security`);
        assert.ok(entry.responses?.['401'], `${method} ${path} declares 401`);
        assert.equal(entry.responses?.['403'] !== undefined, scope !== 'read', `${method} ${path}: 403 iff not read`);
        // The read token on an operation that needs more is refused before anything runs
        // (no job or schedule of these names exists, so an operation let in would answer 404).
        if (scope === 'read') continue;
        const concrete = path.replace('{id}', 'no-such-job').replace('{name}', 'no-such-thing');
        const refused = await server.request(method.toUpperCase(), concrete, {}, bearer(SECRETS.viewer));
        assertForbidden(refused, scope, `${method} ${path}`);
        assert.match(String(refused.body.detail), /the token "viewer" has read/);
      }
    });

    it('names the token on every request line and writes an audit line per admin action, never a secret', async () => {
      const from = lines.length;
      const admin = bearer(SECRETS.env);
      const viewer = bearer(SECRETS.viewer);
      const submitted = await server.request('POST', '/v1/jobs', { type: 'noop' }, bearer(SECRETS.ci));
      assert.equal(submitted.status, 201, submitted.text);
      const id = submitted.body.id as string;
      assert.equal((await server.request('GET', `/v1/jobs/${id}?wait=30`, undefined, admin)).body.status, 'completed');
      const taken = [
        ['POST', '/v1/queue/pause', undefined, admin, 200],
        ['POST', '/v1/queue/resume', undefined, viewer, 403],
        ['PUT', '/v1/tasks/noop/limits', { concurrency: 2 }, admin, 200],
        ['DELETE', '/v1/tasks/noop/limits', undefined, admin, 200],
        ['POST', `/v1/jobs/${id}/retry`, undefined, bearer(SECRETS.ci), 403],
        ['DELETE', `/v1/jobs/${id}`, undefined, viewer, 403],
        ['DELETE', `/v1/jobs/${id}`, undefined, admin, 204],
      ] as const;
      for (const [method, path, body, headers, status] of taken) {
        assert.equal((await server.request(method, path, body, headers)).status, status, `${method} ${path}`);
      }
      // The audit line is written once the answer has gone out, maybe after the client has read it.
      const audits = () =>
        lines
          .slice(from)
          .map((line) => JSON.parse(line))
          .filter((entry) => entry.audit !== undefined)
          .map((entry) => entry.audit);
      const entries = await pollUntil(
        async () => audits(),
        (found) => found.length >= taken.length,
        { what: 'the audit lines', deadlineMs: DEADLINE_MS, everyMs: 0 },
      );
      const byAction = (a: { action: string; token: string }, b: { action: string; token: string }) =>
        `${a.action} ${a.token}`.localeCompare(`${b.action} ${b.token}`);
      // Reads and submissions are not audited: one line for each admin action, and no other.
      assert.deepEqual(
        entries.sort(byAction),
        [
          { token: 'env:1', action: 'POST /v1/queue/pause', target: {}, status: 200 },
          { token: 'viewer', action: 'POST /v1/queue/resume', target: {}, status: 403 },
          { token: 'env:1', action: 'PUT /v1/tasks/{name}/limits', target: { name: 'noop' }, status: 200 },
          { token: 'env:1', action: 'DELETE /v1/tasks/{name}/limits', target: { name: 'noop' }, status: 200 },
          { token: 'ci', action: 'POST /v1/jobs/{id}/retry', target: { id }, status: 403 },
          { token: 'viewer', action: 'DELETE /v1/jobs/{id}', target: { id }, status: 403 },
          { token: 'env:1', action: 'DELETE /v1/jobs/{id}', target: { id }, status: 204 },
        ].sort(byAction),
      );

      // The submission, its wait and each action: a line each, naming its token.
      const requestLines = lines
        .slice(from)
        .map((line) => JSON.parse(line))
        .filter((entry) => entry.http !== undefined);
      assert.deepEqual(
        requestLines.map((entry) => entry.token).sort(),
        ['ci', 'env:1', ...taken.map(([, , , headers]) => nameOf(headers))].sort(),
      );
      for (const entry of requestLines) assert.ok(entry.msg.endsWith(` token=${entry.token}`), entry.msg);
      // Neither a secret nor its SHA-256 (which the file may hold instead) in any case.
      for (const secret of Object.values(SECRETS)) {
        const digest = createHash('sha256').update(secret).digest('hex');
        assert.deepEqual(
          lines.filter((line) => line.includes(secret) || line.toLowerCase().includes(digest)),
          [],
          `${secret} or its SHA-256 was logged`,
        );
      }
    });
  });
}

describe('audit lines at LOG_LEVEL=warn', () => {
  let server: TestServer;
  const log = captureLog('warn');
  const dir = mkdtempSync(join(tmpdir(), 'kiln-tokens-'));
  const file = join(dir, 'tokens.json');

  before(async () => {
    writeFileSync(file, JSON.stringify([{ name: 'viewer', token: SECRETS.viewer, scopes: ['read'] }]));
    // Secrets in clear that every user may read: the server starts, with a warning.
    chmodSync(file, 0o644);
    server = await startServer(
      { KILN_API_TOKENS: SECRETS.env, KILN_API_TOKENS_FILE: file, LOG_LEVEL: 'warn' },
      undefined,
      { logger: log.logger },
    );
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('warns at start of a tokens file of clear secrets that every user may read', () => {
    const warnings = log.lines.filter((line) => line.level === LEVELS.warn && line.msg.includes(file));
    assert.equal(warnings.length, 1, JSON.stringify(log.lines));
    assert.match(
      warnings[0]?.msg ?? '',
      /holds secrets in clear and every user of this machine may read it \(mode 644\)/,
    );
  });

  it('writes an audit line for every admin action, though no request line is written', async () => {
    assert.equal((await server.request('POST', '/v1/queue/pause', undefined, bearer(SECRETS.env))).status, 200);
    assert.equal((await server.request('POST', '/v1/queue/resume', undefined, bearer(SECRETS.viewer))).status, 403);
    const resumed = await log.waitFor((line) => line.msg === 'audit: viewer POST /v1/queue/resume 403', 'resume');
    const paused = await log.waitFor((line) => line.msg === 'audit: env:1 POST /v1/queue/pause 200', 'pause');
    assert.equal(paused.level, LEVELS.info);
    assert.deepEqual(resumed.audit, { token: 'viewer', action: 'POST /v1/queue/resume', target: {}, status: 403 });
    assert.deepEqual(
      log.lines.filter((line) => line.http !== undefined),
      [],
      'LOG_LEVEL=warn writes no request line',
    );
  });

  it('writes no status for an admin request the client abandoned before the answer', async () => {
    const { port } = new URL(server.url);
    const socket = connect({ host: '127.0.0.1', port: Number(port) });
    socket.on('error', () => {
      // Reset by the server once this side has gone: expected.
    });
    // The headers and half the body: the server has matched the route and checked the
    // token when it emits 'request', and then waits for the rest, which never comes.
    const received = new Promise<void>((resolve) => server.kiln.app.server.once('request', () => resolve()));
    socket.write(
      [
        'PUT /v1/tasks/noop/limits HTTP/1.1',
        `Host: 127.0.0.1:${port}`,
        `Authorization: Bearer ${SECRETS.env}`,
        'Content-Type: application/json',
        'Content-Length: 40',
        '',
        '{"concurrency":',
      ].join('\r\n'),
    );
    await received;
    socket.destroy();
    const line = await log.waitFor(
      (entry) => (entry.audit as { action?: string } | undefined)?.action === 'PUT /v1/tasks/{name}/limits',
      'the audit line',
    );
    assert.deepEqual(line.audit, {
      token: 'env:1',
      action: 'PUT /v1/tasks/{name}/limits',
      target: { name: 'noop' },
      status: null,
      aborted: true,
    });
    assert.equal(line.msg, 'audit: env:1 PUT /v1/tasks/{name}/limits noop aborted');
    // Nothing was set.
    const tasks = await server.request('GET', '/v1/tasks', undefined, bearer(SECRETS.env));
    assert.equal(tasks.body.tasks.find((task: { name: string }) => task.name === 'noop').override, null);
  });
});

describe('the scope of a route', () => {
  it('is declared by every route under /v1 and /metrics, or the server does not start', async () => {
    for (const url of ['/v1/unscoped', '/v1/jobs/:id/unscoped', '/metrics']) {
      const app = Fastify();
      registerAuth(app, []);
      assert.throws(
        () => app.get(url, async () => 'open'),
        (error: unknown) =>
          error instanceof Error && error.message === `GET ${url} declares no scope: give it config: { scope }`,
        url,
      );
      await app.close();
    }
    // Elsewhere a route without a scope is open, and one under /v1 with a scope is taken.
    const app = Fastify();
    registerAuth(app, []);
    app.get('/open', async () => 'open');
    app.get('/v1/scoped', { config: { scope: 'read' } }, async () => 'read');
    await app.ready();
    assert.equal((await app.inject({ url: '/open' })).body, 'open');
    await app.close();
  });
});
