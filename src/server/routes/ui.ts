import { createHash } from 'node:crypto';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';

/**
 * The dashboard at /ui/: a page that loads ES modules in the browser, with no build
 * step of its own and nothing from a CDN. Its modules are compiled by `npm run build`
 * into dist/src/ui/, served as /ui/app/, and call the API through the typed client
 * `kiln-queue/client` (dist/src/client/, served as /ui/client/); preact, htm and uPlot are served from their packages in
 * node_modules, only the files the page imports (an import map names them).
 *
 * /ui/ itself holds no data and needs no token: the page asks for one when the API
 * answers 401.
 */

const dashboardDir = fileURLToPath(new URL('../../ui/', import.meta.url));
/** The typed client `kiln-queue/client`, compiled beside the server (fetch only, so it runs in a browser too). */
const clientDir = fileURLToPath(new URL('../../client/', import.meta.url));

/** The one file of each package the page needs, by the name it is served under. */
function vendorFiles(): Map<string, string> {
  const file = (specifier: string) => fileURLToPath(import.meta.resolve(specifier));
  const uplotDir = dirname(file('uplot'));
  return new Map([
    ['preact.mjs', file('preact')],
    ['hooks.mjs', file('preact/hooks')],
    ['htm.mjs', file('htm')],
    ['index.mjs', file('htm/preact')],
    ['uPlot.esm.js', `${uplotDir}/uPlot.esm.js`],
    ['uPlot.min.css', `${uplotDir}/uPlot.min.css`],
  ]);
}

const IMPORT_MAP = JSON.stringify({
  imports: {
    preact: './vendor/preact.mjs',
    'preact/hooks': './vendor/hooks.mjs',
    htm: './vendor/htm.mjs',
    'htm/preact': './vendor/index.mjs',
    uplot: './vendor/uPlot.esm.js',
    'kiln-queue/client': './client/index.js',
  },
});

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Kiln</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="vendor/uPlot.min.css">
<link rel="stylesheet" href="app/static/style.css">
<script type="importmap">${IMPORT_MAP}</script>
<script type="module" src="app/main.js"></script>
</head>
<body>
<div id="app"></div>
<noscript>The Kiln dashboard needs JavaScript.</noscript>
</body>
</html>
`;

// Scripts only from this server (and the one inline import map, by its hash): a page
// that holds an API token must not run anything injected into it.
const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  `script-src 'self' 'sha256-${createHash('sha256').update(IMPORT_MAP).digest('base64')}'`,
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

export async function registerUiRoutes(app: FastifyInstance): Promise<void> {
  // The router ignores trailing slashes, but the page's relative URLs need one: /ui is
  // sent to ui/ (relative, so that a Kiln behind a proxy under a path prefix stays in it).
  app.get('/ui/', { schema: { hide: true } }, (request, reply) => {
    if (!request.url.split('?')[0]?.endsWith('/')) return reply.redirect('ui/');
    return reply
      .type('text/html; charset=utf-8')
      .header('content-security-policy', CONTENT_SECURITY_POLICY)
      .header('cache-control', 'no-cache')
      .send(PAGE);
  });
  await app.register(fastifyStatic, {
    root: dashboardDir,
    prefix: '/ui/app/',
    index: false,
    decorateReply: false,
    schemaHide: true,
    cacheControl: false,
    setHeaders: (response) => response.setHeader('cache-control', 'no-cache'),
  });
  await app.register(fastifyStatic, {
    root: clientDir,
    prefix: '/ui/client/',
    index: false,
    decorateReply: false,
    schemaHide: true,
    cacheControl: false,
    setHeaders: (response) => response.setHeader('cache-control', 'no-cache'),
    // Its modules only: not the declarations and source maps beside them.
    allowedPath: (pathName) => pathName.endsWith('.js'),
  });
  const vendor = vendorFiles();
  const vendorDirs = [...new Set([...vendor.values()].map((path) => dirname(path)))];
  await app.register(fastifyStatic, {
    root: vendorDirs,
    prefix: '/ui/vendor/',
    index: false,
    decorateReply: false,
    schemaHide: true,
    // Each name is found in one directory only; anything else in them is not served.
    allowedPath: (pathName) => vendor.has(pathName.replace(/^\//, '')),
  });
}
