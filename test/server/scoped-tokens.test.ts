import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import { registerAuth } from '../../src/server/auth.js';
import { startServer, type TestResponse, type TestServer } from '../support/kiln.js';
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
      await server.request('POST', '/v1/queue/pause', undefined, bearer(SECRETS.env));
      await server.request('POST', '/v1/queue/resume', undefined, bearer(SECRETS.viewer));
      await server.request('PUT', '/v1/tasks/noop/limits', { concurrency: 2 }, bearer(SECRETS.env));
      await server.request('DELETE', '/v1/tasks/noop/limits', undefined, bearer(SECRETS.env));
      const audits = () => lines.map((line) => JSON.parse(line)).filter((entry) => entry.audit !== undefined);
      await pollUntil(
        async () => audits().filter((entry) => entry.audit.action.endsWith('/limits')).length,
        (n) => n >= 2,
        { what: 'the audit lines', deadlineMs: DEADLINE_MS, everyMs: 0 },
      );
      const entries = audits().map((entry) => entry.audit);
      assert.deepEqual(entries.filter((audit) => audit.action.startsWith('POST /v1/queue/')).slice(-2), [
        { token: 'env:1', action: 'POST /v1/queue/pause', target: {}, status: 200 },
        { token: 'viewer', action: 'POST /v1/queue/resume', target: {}, status: 403 },
      ]);
      assert.deepEqual(entries.slice(-2), [
        { token: 'env:1', action: 'PUT /v1/tasks/{name}/limits', target: { name: 'noop' }, status: 200 },
        { token: 'env:1', action: 'DELETE /v1/tasks/{name}/limits', target: { name: 'noop' }, status: 200 },
      ]);
      // The first test's actions are there too: one line each, with the job.
      const deletes = entries.filter((audit) => audit.action === 'DELETE /v1/jobs/{id}').slice(0, 2);
      assert.deepEqual(
        deletes.map((audit) => [audit.token, audit.status]),
        [
          ['viewer', 403],
          ['env:1', 204],
        ],
      );
      assert.equal(deletes[0].target.id, deletes[1].target.id);
      // Reads and submissions are not audited.
      assert.ok(entries.every((audit) => !audit.action.startsWith('GET ') && audit.action !== 'POST /v1/jobs'));

      const requestLines = lines.map((line) => JSON.parse(line)).filter((entry) => entry.http !== undefined);
      const authorized = requestLines.filter((entry) => entry.http.status !== 401);
      assert.ok(authorized.length > 10, `${authorized.length} request lines`);
      for (const entry of authorized) {
        if (!entry.http.url.startsWith('/v1/') && !entry.http.url.startsWith('/metrics')) continue;
        assert.ok(['viewer', 'ci', 'env:1'].includes(entry.token), JSON.stringify(entry));
        assert.ok(entry.msg.endsWith(` token=${entry.token}`), entry.msg);
      }
      for (const secret of Object.values(SECRETS)) {
        assert.deepEqual(
          lines.filter((line) => line.includes(secret)),
          [],
          `${secret} was logged`,
        );
      }
    });
  });
}

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
