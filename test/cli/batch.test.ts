import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { cliEnv, cliScript, collect, runKiln, watchOutput } from '../support/cli.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { repoRoot } from '../support/paths.js';

/** `kiln batch <id>` against a real server: the batch, and --wait with its progress. */
describe('kiln batch', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_THREADS: '1' });
  });
  after(async () => {
    await server.close();
  });

  /** A batch of `n` noop jobs submitted while dispatch is paused, so none has run yet. */
  const pausedBatch = async (jobs: object[]) => {
    await server.request('POST', '/v1/queue/pause');
    const posted = await server.request('POST', '/v1/jobs/batch', { jobs });
    assert.equal(posted.status, 201, posted.text);
    return posted.body as { batch: string; jobs: { id: string }[] };
  };

  it('shows a batch: its counts, and with --json the API object', async () => {
    const { batch } = await pausedBatch([{ type: 'noop' }, { type: 'noop' }]);
    try {
      const run = await runKiln(['batch', batch], { env: { KILN_URL: server.url } });
      assert.equal(run.code, 0, run.stderr);
      assert.match(run.stdout, new RegExp(`^id +${batch}$`, 'm'));
      assert.match(run.stdout, /^progress +0\/2 finished {2}\(queued 2\)$/m);
      assert.match(run.stdout, /^queued +2$/m);
      const listed = await runKiln(['list', '--json', '--batch', batch], { env: { KILN_URL: server.url } });
      assert.equal((JSON.parse(listed.stdout) as unknown[]).length, 2);
      const json = await runKiln(['batch', '--json', batch], { env: { KILN_URL: server.url } });
      assert.deepEqual(JSON.parse(json.stdout), (await server.request('GET', `/v1/batches/${batch}`)).body);
      const missing = await runKiln(['batch', '01936f4e-8d2a-7c3b-9e1f-2a4b6c8d0e20'], {
        env: { KILN_URL: server.url },
      });
      assert.equal(missing.code, 3);
      assert.match(missing.stderr, /no batch has the id/);
    } finally {
      await server.request('POST', '/v1/queue/resume');
    }
  });

  it('--wait prints a line per change when the output is a pipe, and exits 0 when all completed', async () => {
    const { batch } = await pausedBatch([{ type: 'noop' }, { type: 'noop' }]);
    const child = spawn(process.execPath, [cliScript, 'batch', '--wait', batch], {
      cwd: repoRoot,
      env: cliEnv({ KILN_URL: server.url }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output = watchOutput(child);
    const exited = collect(child);
    await output.until((text) => text.includes(`${batch}  0/2 finished  (queued 2)\n`));
    await server.request('POST', '/v1/queue/resume');
    const run = await exited;
    assert.equal(run.code, 0, run.stderr);
    assert.ok(!output.text().includes('\r'));
    assert.match(output.text(), new RegExp(`Z  ${batch}  2/2 finished  \\(completed 2\\)\\n`));
    assert.match(output.text(), /^completed +2$/m);
  });

  it('--wait exits 1 when a job of the batch was cancelled', async () => {
    const { batch } = await pausedBatch([{ type: 'noop' }, { type: 'noop' }]);
    try {
      const child = spawn(process.execPath, [cliScript, 'batch', '--wait', batch], {
        cwd: repoRoot,
        env: cliEnv({ KILN_URL: server.url }),
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const output = watchOutput(child);
      const exited = collect(child);
      await output.until((text) => text.includes('0/2 finished'));
      await server.request('DELETE', `/v1/batches/${batch}`);
      const run = await exited;
      assert.equal(run.code, 1, run.stderr);
      assert.match(output.text(), /2\/2 finished {2}\(cancelled 2\)/);
    } finally {
      await server.request('POST', '/v1/queue/resume');
    }
  });

  it('--wait draws a bar redrawn in place on a terminal (a pseudo-terminal from script(1))', async (t) => {
    if (spawnSync('script', ['--version']).error !== undefined) {
      assert.notEqual(process.env.CI, 'true', 'script(1) is not on PATH: CI must have it (Debian package util-linux)');
      t.skip('script(1) is not installed (util-linux): the progress bar on a terminal was NOT checked');
      return;
    }
    const { batch, jobs } = await pausedBatch([{ type: 'noop' }, { type: 'noop', delayMs: 3_600_000 }]);
    try {
      const quoted = [process.execPath, cliScript, 'batch', '--wait', batch].map(
        (arg) => `'${arg.replace(/'/g, `'\\''`)}'`,
      );
      const child = spawn('script', ['-q', '-e', '-c', quoted.join(' '), '/dev/null'], {
        cwd: repoRoot,
        env: cliEnv({ KILN_URL: server.url, COLUMNS: '100', LINES: '30' }),
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const output = watchOutput(child);
      const exited = collect(child);
      const frames = () => output.text().split('\r\x1b[2K').slice(1);
      await output.until(() => frames().some((frame) => frame.startsWith(`${'░'.repeat(30)}   0%  0/2 finished`)));
      await server.request('POST', '/v1/queue/resume');
      await output.until(() =>
        frames().some((frame) => frame.startsWith(`${'█'.repeat(15)}${'░'.repeat(15)}  50%  1/2 finished`)),
      );
      await server.request('POST', `/v1/jobs/${jobs[1]?.id}/cancel`);
      const run = await exited;
      assert.equal(run.code, 1, output.text());
      assert.match(frames().at(-1)!, /^█{30} 100% {2}2\/2 finished {2}\(completed 1, cancelled 1\)\r?\n/);
    } finally {
      await server.request('POST', '/v1/queue/resume');
    }
  });
});
