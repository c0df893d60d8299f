import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { inheritedEnv } from '../support/kiln-process.js';
import { repoRoot } from '../support/paths.js';

/**
 * `kiln-queue/client` is for browsers and for apps that talk to Kiln: its built module graph
 * holds nothing of the server (fastify, piscina, better-sqlite3, pg, zod), no Node.js
 * built-in, and only relative imports ending in .js, which a browser loads as they are.
 */

const packageJson = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8'));
const clientEntry = join(repoRoot, packageJson.exports['./client'].default);

/** Every `import … from '…'`, `export … from '…'` and `import('…')` specifier in a module's text. */
function importSpecifiers(source: string): string[] {
  const pattern =
    /(?:^|[;\s])(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|(?:^|[;\s])import\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/gm;
  return [...source.matchAll(pattern)].map((match) => match[1] ?? match[2] ?? match[3] ?? '');
}

describe('the kiln-queue/client module', () => {
  it('is reached through the package exports', () => {
    assert.equal(packageJson.exports['./client'].default, './dist/src/client/index.js');
    assert.equal(packageJson.exports['./client'].types, './dist/src/client/index.d.ts');
  });

  it('imports only its own files, by relative paths ending in .js (resolved statically)', () => {
    const seen = new Set<string>();
    const pending = [clientEntry];
    while (pending.length > 0) {
      const file = pending.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      for (const specifier of importSpecifiers(readFileSync(file, 'utf8'))) {
        assert.match(specifier, /^\.\.?\/.*\.js$/, `${file} imports "${specifier}"`);
        pending.push(join(dirname(file), specifier));
      }
    }
    const clientDir = join(repoRoot, 'dist', 'src', 'client');
    for (const file of seen) assert.ok(file.startsWith(clientDir), `the client's graph reaches ${file}`);
    assert.ok(seen.has(join(clientDir, 'client.js')) && seen.has(join(clientDir, 'sse.js')));
  });

  it('loads in a fresh process without loading any other module (resolved at run time)', () => {
    // A resolve hook reports every module the import of kiln-queue/client (by package name) loads.
    const hook = `import { writeSync } from 'node:fs';
      export async function resolve(specifier, context, next) {
        const resolved = await next(specifier, context);
        writeSync(2, 'RESOLVED ' + resolved.url + '\\n');
        return resolved;
      }`;
    const script = `import { register } from 'node:module';
      register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}));
      const client = await import('kiln-queue/client');
      const instance = new client.KilnClient({ url: 'http://127.0.0.1:1' });
      process.stdout.write(JSON.stringify({ exports: Object.keys(client).sort(), url: instance.url }));`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: repoRoot,
      env: inheritedEnv(),
      encoding: 'utf8',
    });
    assert.equal(run.status, 0, run.stderr);
    const loaded = run.stderr
      .split('\n')
      .filter((line) => line.startsWith('RESOLVED '))
      .map((line) => line.slice('RESOLVED '.length));
    const clientDir = pathToFileURL(join(repoRoot, 'dist', 'src', 'client')).href;
    assert.ok(loaded.includes(pathToFileURL(clientEntry).href), run.stderr);
    for (const url of loaded) assert.ok(url.startsWith(`${clientDir}/`), `loading kiln-queue/client loaded ${url}`);
    for (const name of ['fastify', 'piscina', 'better-sqlite3', 'pg', 'zod', 'commander']) {
      assert.ok(!loaded.some((url) => url.includes(`/node_modules/${name}/`)), `${name} was loaded`);
    }
    assert.ok(!loaded.some((url) => url.startsWith('node:')), 'a Node.js built-in was loaded');
    const answer = JSON.parse(run.stdout);
    assert.deepEqual(answer.exports, [
      'DEFAULT_URL',
      'JOB_STATUSES',
      'KilnClient',
      'KilnError',
      'TERMINAL_STATUSES',
      'isFinished',
      'retryAfterMs',
    ]);
    assert.equal(answer.url, 'http://127.0.0.1:1');
  });
});
