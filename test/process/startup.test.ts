import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { inheritedEnv, kilnProcessEnv, killAllKilns, mainScript, spawnKiln } from '../support/kiln-process.js';
import { collect, watchOutput } from '../support/cli.js';
import { fixtureTasksDir, repoRoot } from '../support/paths.js';

/** Runs `node dist/src/main.js` with `env` until it exits by itself; answers its exit code and output. */
async function runToExit(
  env: Record<string, string>,
): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const child = spawn(process.execPath, [mainScript], {
    cwd: repoRoot,
    env: { ...inheritedEnv(), KILN_STORE: 'memory', KILN_THREADS: '1', KILN_TASKS_DIR: fixtureTasksDir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return collect(child);
}

/** One line on stderr, no stack trace. */
function assertOneLineReason(stderr: string, reason: RegExp): void {
  const lines = stderr.split('\n').filter((line) => line.trim() !== '');
  assert.equal(lines.length, 1, `one line on stderr, got:\n${stderr}`);
  assert.match(lines[0]!, /^kiln: /);
  assert.match(lines[0]!, reason);
  assert.doesNotMatch(stderr, /^\s+at /m, 'no stack trace');
}

describe('starting Kiln: a clear reason when it cannot', () => {
  let blocker: Server;
  let blockedPort: number;
  const dir = mkdtempSync(join(tmpdir(), 'kiln-startup-'));
  before(async () => {
    blocker = createServer();
    blocker.listen(0, '127.0.0.1');
    await once(blocker, 'listening');
    blockedPort = (blocker.address() as { port: number }).port;
  });
  after(async () => {
    blocker.close();
    await killAllKilns();
    rmSync(dir, { recursive: true, force: true });
  });

  it('names a port in use, exit 1', async () => {
    const run = await runToExit({ PORT: String(blockedPort), HOST: '127.0.0.1' });
    assert.equal(run.code, 1);
    assertOneLineReason(run.stderr, new RegExp(`127\\.0\\.0\\.1:${blockedPort}: the port is in use`));
  });

  it('names a HOST that does not resolve, and one that is not an address of this machine, exit 1', async () => {
    const unresolved = await runToExit({ PORT: '0', HOST: 'no-such-host.invalid' });
    assert.equal(unresolved.code, 1);
    assertOneLineReason(unresolved.stderr, /HOST="no-such-host\.invalid" does not resolve/);
    // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this machine.
    const foreign = await runToExit({ PORT: '0', HOST: '192.0.2.1' });
    assert.equal(foreign.code, 1);
    assertOneLineReason(foreign.stderr, /HOST="192\.0\.2\.1" is not an address of this machine/);
  });

  it('refuses KILN_API_TOKENS that holds no token instead of opening the API', async () => {
    for (const value of [',', ' ', ' , ,']) {
      const run = await runToExit({ PORT: '0', KILN_API_TOKENS: value });
      assert.equal(run.code, 1, JSON.stringify(value));
      assertOneLineReason(run.stderr, /KILN_API_TOKENS must be comma-separated tokens/);
    }
  });

  it('refuses a tokens file with a wrong entry in one line naming the file and the entry, not the secret', async () => {
    const file = join(dir, 'tokens.json');
    writeFileSync(
      file,
      JSON.stringify([
        { name: 'ci', token: 'first-secret', scopes: ['submit'] },
        { name: 'deploy', token: 'second-secret', scopes: ['deploy'] },
      ]),
    );
    const run = await runToExit({ PORT: '0', KILN_API_TOKENS_FILE: file });
    assert.equal(run.code, 1);
    assertOneLineReason(
      run.stderr,
      new RegExp(`KILN_API_TOKENS_FILE ".*tokens\\.json": entry 2 \\("deploy"\\) has the scope "deploy"`),
    );
    assert.doesNotMatch(run.stderr + run.stdout, /secret/);
  });

  it('names the pid of the process that holds the SQLite database', async () => {
    const store = `sqlite:${join(dir, 'held.db')}`;
    const holder = await spawnKiln({ KILN_STORE: store });
    const second = await runToExit({ PORT: '0', KILN_STORE: store });
    assert.equal(second.code, 1);
    assertOneLineReason(second.stderr, new RegExp(`in use by another Kiln process: pid ${holder.child.pid} \\(`));
    holder.child.kill('SIGTERM');
    assert.deepEqual(await holder.exited, { code: 0, signal: null });
  });
});

describe('logs', () => {
  after(async () => {
    await killAllKilns();
  });

  it('are JSON lines when piped, one line per request', async () => {
    const kiln = await spawnKiln({ KILN_STORE: 'memory' });
    const answer = await kiln.request('GET', '/v1/queue');
    assert.equal(answer.status, 200);
    await kiln.waitForLog(/^GET \/v1\/queue 200 [\d.]+ ms$/);
    kiln.child.kill('SIGTERM');
    await kiln.exited;
    const about = kiln.logs.filter((entry) => JSON.stringify(entry).includes('/v1/queue'));
    assert.equal(about.length, 1, `one line for the request: ${JSON.stringify(about)}`);
    assert.deepEqual(Object.keys(about[0]?.http as object).sort(), ['method', 'ms', 'status', 'url']);
    assert.ok(
      kiln.logs.every((entry) => entry.level > 0),
      'every line on stdout is JSON',
    );
  });

  it(
    'are one readable line each on a terminal, and JSON there with LOG_FORMAT=json',
    { timeout: 120_000 },
    async (t) => {
      if (spawnSync('script', ['--version']).error !== undefined) {
        assert.notEqual(process.env.CI, 'true', 'script (util-linux) is not on PATH: CI needs it for this test');
        t.skip('script (util-linux) is not installed: logging on a terminal was NOT checked');
        return;
      }
      const pretty = await onTerminal({});
      const serving = pretty.lines.find((line) => line.includes('kiln is serving'));
      assert.match(serving ?? '', /^\[\d\d:\d\d:\d\d\.\d{3}\] .*INFO.*kiln is serving/, pretty.lines.join('\n'));
      const about = pretty.lines.filter((line) => line.includes('/v1/queue'));
      assert.equal(about.length, 1, about.join('\n'));
      assert.match(about[0]!, /INFO.*GET \/v1\/queue 200 [\d.]+ ms/);
      assert.ok(
        pretty.lines.every((line) => !line.startsWith('{')),
        'no JSON on a terminal by default',
      );

      const json = await onTerminal({ LOG_FORMAT: 'json' });
      for (const line of json.lines) assert.doesNotThrow(() => JSON.parse(line), line);
      assert.equal(json.lines.filter((line) => line.includes('/v1/queue')).length, 1);
    },
  );
});

/**
 * Runs Kiln on a pseudo-terminal (util-linux `script`), asks GET /v1/queue once, stops
 * it with SIGTERM and answers the lines it wrote on the terminal (colours stripped).
 */
async function onTerminal(env: Record<string, string>): Promise<{ lines: string[] }> {
  const child: ChildProcess = spawn('script', ['-qfec', `exec "${process.execPath}" "${mainScript}"`, '/dev/null'], {
    cwd: repoRoot,
    env: kilnProcessEnv({ KILN_STORE: 'memory', KILN_THREADS: '1', ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = watchOutput(child);
  const exited = once(child, 'close');
  const seen = (pattern: RegExp) => output.match(pattern, plain);
  const serving = (await seen(/^.*kiln is serving.*$/m))[0];
  const address = /"address":"(http:\/\/[^"]+)"/.exec(serving)?.[1];
  assert.ok(address !== undefined, serving);
  assert.equal((await fetch(`${address}/v1/queue`)).status, 200);
  await seen(/GET \/v1\/queue 200/);
  const nodes = (await (await fetch(`${address}/v1/nodes`)).json()) as { nodes: { pid: number }[] };
  process.kill(nodes.nodes[0]!.pid, 'SIGTERM');
  await exited;
  return {
    lines: plain(output.text())
      .split(/\r?\n/)
      .filter((line) => line.trim() !== ''),
  };
}

/** Terminal output without its colour codes. */
function plain(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\u001b\[[0-9;]*m/g, '');
}
