import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startServer, type TestServer } from '../support/kiln.js';

/** The dashboard's files over HTTP, whether or not a browser is at hand (test/ui/ drives one). */
describe('the dashboard route', () => {
  let server: TestServer;

  before(async () => {
    server = await startServer({ KILN_API_TOKENS: 'route-token' });
  });

  after(async () => {
    await server.close();
  });

  it('serves the page and its modules from this server, and sends /ui to /ui/', async () => {
    const redirect = await fetch(`${server.url}/ui`, { redirect: 'manual' });
    assert.equal(redirect.status, 302);
    assert.equal(redirect.headers.get('location'), 'ui/');
    // Open without a token: the page and its scripts hold no data.
    const page = await fetch(`${server.url}/ui/`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    const html = await page.text();
    assert.match(html, /<script type="importmap">/);
    assert.match(html, /<script type="module" src="app\/main.js">/);
    assert.match(page.headers.get('content-security-policy') ?? '', /script-src 'self' 'sha256-/);
    for (const path of [
      'app/main.js',
      'app/static/style.css',
      'vendor/preact.mjs',
      'vendor/uPlot.esm.js',
      'client/index.js',
    ]) {
      assert.equal((await fetch(`${server.url}/ui/${path}`)).status, 200, path);
    }
    // Only the files the page imports are served from node_modules, and only the client's modules.
    for (const path of [
      'vendor/package.json',
      'vendor/preact.mjs.map',
      'vendor/htm.js',
      'vendor/%2e%2e/package.json',
      'client/index.d.ts',
      'client/index.js.map',
    ]) {
      assert.equal((await fetch(`${server.url}/ui/${path}`)).status, 404, path);
    }
    // The API behind it still asks for the token.
    assert.equal((await fetch(`${server.url}/v1/queue`)).status, 401);
  });

  it('keeps the page and its scripts out of the OpenAPI document', async () => {
    const openapi = await server.request('GET', '/openapi.json');
    assert.deepEqual(
      Object.keys(openapi.body.paths).filter((path) => path.startsWith('/ui')),
      [],
    );
  });
});
