import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { cliEnv, cliScript, collect, runKiln, watchOutput } from '../support/cli.js';
import { closedPortUrl } from '../support/http.js';
import { startServer, type TestServer } from '../support/kiln.js';
import { repoRoot } from '../support/paths.js';

/** The `kiln` command (package.json "bin") run as a child process against a real server. */

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';

describe('kiln, the command line', () => {
  let server: TestServer;
  let dir: string;
  const kiln = (args: string[], input?: string) =>
    runKiln(args, { env: { KILN_URL: server.url }, ...(input === undefined ? {} : { input }) });
  const submitJson = async (args: string[]) => {
    const run = await kiln(['submit', '--json', ...args]);
    assert.equal(run.code, 0, run.stderr);
    return JSON.parse(run.stdout);
  };
  /** The problem document the server answers for a request, to compare with what kiln prints. */
  const problemOf = async (method: string, path: string, body?: unknown) => {
    const response = await server.request(method, path, body);
    assert.ok(response.status >= 400, response.text);
    return response.body;
  };

  before(async () => {
    server = await startServer({ KILN_THREADS: '2' });
    dir = mkdtempSync(join(tmpdir(), 'kiln-cli-'));
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('submit prints the new job in one line', async () => {
    const run = await kiln(['submit', 'noop', '{"echo":1}']);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, new RegExp(`^${UUID}  noop  (queued|running|completed)\\n$`));
    const id = run.stdout.split(' ')[0]!;
    const job = await server.waitForJob(id);
    assert.deepEqual(job.result, 1);
  });

  it('submit --json sends every option as a field of the request', async () => {
    const parent = await submitJson(['noop']);
    const job = await submitJson([
      'noop',
      '{"echo":"x"}',
      '--priority',
      '8',
      '--delay',
      '3600000',
      '--idempotency-key',
      'cli-key-1',
      '--max-attempts',
      '5',
      '--timeout',
      '1234',
      '--metadata',
      '{"team":"a"}',
      '--depends-on',
      parent.id,
    ]);
    assert.equal(job.type, 'noop');
    assert.deepEqual(job.payload, { echo: 'x' });
    assert.equal(job.priority, 8);
    assert.equal(job.idempotencyKey, 'cli-key-1');
    assert.equal(job.maxAttempts, 5);
    assert.equal(job.timeoutMs, 1234);
    assert.deepEqual(job.metadata, { team: 'a' });
    assert.deepEqual(job.dependsOn, [parent.id]);
    assert.ok(Date.parse(job.runAt) - Date.parse(job.createdAt) >= 3_600_000, job.runAt);
    const runAt = await submitJson(['noop', '--run-at', '2099-01-01T00:00:00Z']);
    assert.equal(runAt.status, 'scheduled');
    assert.equal(runAt.runAt, '2099-01-01T00:00:00.000Z');
    const deduped = await submitJson(['noop', '--dedupe', 'cli-dedupe', '--delay', '3600000']);
    assert.equal((await submitJson(['noop', '--dedupe', 'cli-dedupe'])).id, deduped.id);
  });

  it('submit - reads the payload from stdin; --wait waits and exits 0 when the job completed', async () => {
    const run = await kiln(['submit', 'hash.sha256', '-', '--wait', '--json'], '{"data":"hello"}');
    assert.equal(run.code, 0, run.stderr);
    const job = JSON.parse(run.stdout);
    assert.equal(job.status, 'completed');
    assert.deepEqual(job.payload, { data: 'hello', encoding: 'utf8', rounds: 1 });
    assert.equal(job.result.digest, '2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824');
  });

  it('submit --wait exits 1 when the job failed and shows its error', async () => {
    const run = await kiln(['submit', 'test.fatal', '--wait']);
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stdout, /^status +failed$/m);
    assert.match(run.stdout, /^error +handler_error: .+ \(attempt 1\)$/m);
  });

  it('exits 2 on a wrong command line, saying what is wrong', async () => {
    const badJson = await kiln(['submit', 'noop', '{bad']);
    assert.equal(badJson.code, 2);
    assert.match(badJson.stderr, /^kiln: PAYLOAD is not JSON: /);
    const badPriority = await kiln(['submit', 'noop', '--priority', '12']);
    assert.equal(badPriority.code, 2);
    assert.match(badPriority.stderr, /--priority.*'12' is invalid\. must be an integer from 0 to 9/);
    const unknownCommand = await kiln(['frobnicate']);
    assert.equal(unknownCommand.code, 2);
    assert.match(unknownCommand.stderr, /unknown command 'frobnicate'/);
    const missing = await kiln(['submit']);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /missing required argument 'type'/);
    const noLimits = await kiln(['tasks', 'limits', 'noop']);
    assert.equal(noLimits.code, 2);
    assert.equal(noLimits.stderr, 'kiln: give --concurrency, --rate or --reset\n');
    const badRate = await kiln(['tasks', 'limits', 'noop', '--rate', 'fast']);
    assert.equal(badRate.code, 2);
    assert.match(badRate.stderr, /must be MAX\/PER_MS/);
  });

  it('exits 3 on an HTTP error and prints the problem detail', async () => {
    const unknownType = await kiln(['submit', 'no.such.task']);
    assert.equal(unknownType.code, 3);
    const problem = await problemOf('POST', '/v1/jobs', { type: 'no.such.task' });
    assert.equal(problem.code, 'unknown_task_type');
    assert.equal(unknownType.stderr, `kiln: ${problem.detail}\n`);
    assert.equal(unknownType.stdout, '');
    const invalid = await kiln(['submit', 'cpu.spin', '{"ms":-1}']);
    assert.equal(invalid.code, 3);
    assert.equal(
      invalid.stderr,
      `kiln: ${(await problemOf('POST', '/v1/jobs', { type: 'cpu.spin', payload: { ms: -1 } })).detail}\n`,
    );
    const id = '01a20e38-0000-7000-8000-000000000000';
    const missing = await kiln(['get', id]);
    assert.equal(missing.code, 3);
    assert.equal(missing.stderr, `kiln: ${(await problemOf('GET', `/v1/jobs/${id}`)).detail}\n`);
  });

  it('exits 3 when the server cannot be reached; --url wins over KILN_URL', async () => {
    const down = await closedPortUrl();
    const run = await runKiln(['queue'], { env: { KILN_URL: down } });
    assert.equal(run.code, 3);
    assert.match(run.stderr, new RegExp(`^kiln: cannot reach ${down}: .*ECONNREFUSED`));
    const flag = await runKiln(['--url', server.url, 'queue', '--json'], { env: { KILN_URL: down } });
    assert.equal(flag.code, 0, flag.stderr);
    assert.equal(JSON.parse(flag.stdout).paused, false);
  });

  it('get shows a job for people, or as JSON', async () => {
    const job = await submitJson(['hash.sha256', '{"data":"hello"}']);
    await server.waitForJob(job.id);
    const human = await kiln(['get', job.id]);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, new RegExp(`^id +${job.id}$`, 'm'));
    assert.match(human.stdout, /^status +completed$/m);
    assert.match(human.stdout, /^attempts +1 of 3$/m);
    assert.match(human.stdout, /"digest": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"/);
    const json = await kiln(['get', job.id, '--json']);
    assert.equal(JSON.parse(json.stdout).status, 'completed');
  });

  it('get shows how many times a job snoozed and when it runs next', async () => {
    const job = await submitJson(['test.snooze', '{"times":1,"ms":86400000}']);
    const snoozed = await server.whenStatus(job.id, 'scheduled');
    assert.equal(snoozed.snoozes, 1);
    const human = await kiln(['get', job.id]);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /^status +scheduled$/m);
    assert.match(human.stdout, /^attempts +0 of 3$/m);
    assert.match(human.stdout, /^snoozes +1$/m);
    assert.match(human.stdout, new RegExp(`^run at +${new Date(snoozed.runAt ?? 0).toISOString()}$`, 'm'));
    assert.equal((await kiln(['cancel', job.id])).code, 0);
  });

  it('wait exits 0 for a completed job and 1 for a cancelled one; cancel prints the new status', async () => {
    const done = await submitJson(['noop']);
    const ok = await kiln(['wait', done.id, '--json']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).status, 'completed');

    const held = await submitJson(['test.hold', JSON.stringify({ release: join(dir, 'never') })]);
    const child = spawn(process.execPath, [cliScript, 'wait', held.id], {
      cwd: repoRoot,
      env: cliEnv({ KILN_URL: server.url }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output = watchOutput(child);
    const exited = collect(child);
    await output.until((text) => /running/.test(text));
    const cancel = await kiln(['cancel', held.id]);
    assert.equal(cancel.code, 0, cancel.stderr);
    assert.equal(cancel.stdout, `${held.id}  cancelled\n`);
    const waited = await exited;
    assert.equal(waited.code, 1, waited.stderr);
    assert.match(output.text(), /^status +cancelled$/m);
    const again = await kiln(['cancel', held.id]);
    assert.equal(again.code, 3);
    assert.equal(again.stderr, `kiln: ${(await problemOf('POST', `/v1/jobs/${held.id}/cancel`)).detail}\n`);
  });

  it('watch prints every change, as JSON lines with --json, and exits by how the job ended', async () => {
    const steps = mkdtempSync(join(dir, 'watch-'));
    const job = await submitJson(['test.steps', JSON.stringify({ dir: steps, steps: 2 })]);
    const child = spawn(process.execPath, [cliScript, 'watch', job.id, '--json'], {
      cwd: repoRoot,
      env: cliEnv({ KILN_URL: server.url }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const output = watchOutput(child);
    const exited = collect(child);
    await output.until((text) => text.includes('"status":"running"'));
    writeFileSync(join(steps, 'step-1'), '');
    await output.until((text) => text.includes('"percent":50'));
    writeFileSync(join(steps, 'step-2'), '');
    const run = await exited;
    assert.equal(run.code, 0, run.stderr);
    const events = output
      .text()
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    assert.equal(events.at(-1).status, 'completed');
    const percents = events.filter((event) => event.progress !== null).map((event) => event.progress.percent);
    assert.deepEqual(
      percents,
      [...percents].sort((a, b) => a - b),
    );
    assert.ok(percents.includes(100));
    assert.ok(events.some((event) => event.progress?.percent === 50));

    const failed = await submitJson(['test.fatal']);
    const human = await kiln(['watch', failed.id]);
    assert.equal(human.code, 1, human.stderr);
    assert.match(human.stdout.trim().split('\n').at(-1)!, new RegExp(`^\\S+Z  ${failed.id}  failed$`));
  });

  it('list shows a table, filters, limits, and prints JSON with --json', async () => {
    const ids: string[] = [];
    for (let n = 0; n < 5; n++) ids.push((await submitJson(['test.quick', JSON.stringify({ n })])).id);
    for (const id of ids) await server.waitForJob(id);
    const table = await kiln(['list', '--type', 'test.quick', '--limit', '3']);
    assert.equal(table.code, 0, table.stderr);
    const lines = table.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, /^ID +TYPE +STATUS +PRI +ATTEMPTS +CREATED$/);
    assert.deepEqual(
      lines.slice(1).map((line) => line.split(/ +/)[0]),
      ids.slice(-3).reverse(),
    );
    assert.match(lines[1]!, /^\S+ +test\.quick +completed +5 +1\/3 +\S+Z$/);
    // Pages of 2 (limit 5 asks for 5): the list follows the cursor.
    const json = await kiln(['list', '--type', 'test.quick', '--status', 'completed', '--json', '-n', '5']);
    assert.deepEqual(
      JSON.parse(json.stdout).map((job: { id: string }) => job.id),
      [...ids].reverse(),
    );
    const none = await kiln(['list', '--type', 'test.quick', '--status', 'failed']);
    assert.equal(none.stdout, 'no jobs\n');
    const badStatus = await kiln(['list', '--status', 'bogus']);
    assert.equal(badStatus.code, 3);
    assert.match(badStatus.stderr, /^kiln: .*unknown status "bogus"/);
  });

  it('submit --group and list --group, with a GROUP column when jobs have groups', async () => {
    const job = await submitJson(['noop', '--group', 'customer-7']);
    assert.equal(job.group, 'customer-7');
    await server.waitForJob(job.id);
    await submitJson(['noop', '--group', 'customer-8']);
    const table = await kiln(['list', '--group', 'customer-7']);
    assert.equal(table.code, 0, table.stderr);
    const lines = table.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, /^ID +TYPE +STATUS +PRI +ATTEMPTS +GROUP +CREATED$/);
    assert.deepEqual(
      lines.slice(1).map((line) => line.split(/ +/)[0]),
      [job.id],
    );
    assert.match(lines[1]!, /^\S+ +noop +completed +5 +1\/3 +customer-7 +\S+Z$/);
    const shown = await kiln(['get', job.id]);
    assert.match(shown.stdout, /^group +customer-7$/m);
    const bad = await kiln(['submit', 'noop', '--group', 'no spaces']);
    assert.equal(bad.code, 3);
    assert.equal(
      bad.stderr,
      `kiln: ${(await problemOf('POST', '/v1/jobs', { type: 'noop', group: 'no spaces' })).detail}\n`,
    );
  });

  it('retry and rm', async () => {
    const failed = await submitJson(['test.fatal']);
    await server.waitForJob(failed.id);
    const retried = await kiln(['retry', failed.id, '--json']);
    assert.equal(retried.code, 0, retried.stderr);
    assert.equal(JSON.parse(retried.stdout).attempts, 0);
    await server.waitForJob(failed.id);
    const removed = await kiln(['rm', failed.id]);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(removed.stdout, `${failed.id}  removed\n`);
    assert.equal((await server.request('GET', `/v1/jobs/${failed.id}`)).status, 404);
    const scheduled = await submitJson(['noop', '--delay', '3600000']);
    const refused = await kiln(['rm', scheduled.id]);
    assert.equal(refused.code, 3);
    assert.equal(refused.stderr, `kiln: ${(await problemOf('DELETE', `/v1/jobs/${scheduled.id}`)).detail}\n`);
  });

  it('queue, pause and resume', async () => {
    const paused = await kiln(['pause', '--json']);
    assert.equal(paused.code, 0, paused.stderr);
    assert.equal(JSON.parse(paused.stdout).paused, true);
    const human = await kiln(['queue']);
    assert.match(human.stdout, /^paused +yes$/m);
    assert.match(human.stdout, /^threads +\d of 2 busy$/m);
    assert.match(human.stdout, /^pending +\d+ of 100000$/m);
    const resumed = await kiln(['resume', '--json']);
    assert.equal(JSON.parse(resumed.stdout).paused, false);
  });

  it('groups lists the groups; groups limits sets and resets them', async () => {
    const set = await kiln(['groups', 'limits', 'tenant-cli', '--concurrency', '2', '--rate', '10/1000', '--json']);
    assert.equal(set.code, 0, set.stderr);
    assert.deepEqual(JSON.parse(set.stdout), {
      name: 'tenant-cli',
      limits: { concurrency: 2, rateLimit: { max: 10, perMs: 1000 } },
      running: 0,
      queued: 0,
    });
    const list = await kiln(['groups']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^GROUP +CONCURRENCY +RATE +RUNNING +QUEUED$/m);
    assert.match(list.stdout, /^tenant-cli +2 +10\/1000ms +0 +0$/m);
    const rateOnly = await kiln(['groups', 'limits', 'tenant-cli', '--rate', '5/1000']);
    assert.match(rateOnly.stdout, /^concurrency +none$/m, 'each call sets the whole limits');
    assert.match(rateOnly.stdout, /^rate limit +5\/1000ms$/m);
    const reset = await kiln(['groups', 'limits', 'tenant-cli', '--reset']);
    assert.equal(reset.code, 0, reset.stderr);
    assert.match(reset.stdout, /^concurrency +none$/m);
    assert.doesNotMatch((await kiln(['groups'])).stdout, /tenant-cli/);
    const both = await kiln(['groups', 'limits', 'tenant-cli', '--reset', '--concurrency', '1']);
    assert.equal(both.code, 2, both.stderr);
    const invalid = await kiln(['groups', 'limits', 'tenant cli', '--concurrency', '1']);
    assert.notEqual(invalid.code, 0);
  });

  it('tasks lists the tasks; tasks limits sets and resets limits', async () => {
    const list = await kiln(['tasks']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^NAME +CONCURRENCY +RATE +RUNNING +LIMITS +DESCRIPTION$/m);
    assert.match(list.stdout, /^test\.limited +1 +- +0 +Spins/m);
    const set = await kiln(['tasks', 'limits', 'cpu.spin', '--concurrency', '2', '--rate', '10/1000', '--json']);
    assert.equal(set.code, 0, set.stderr);
    assert.deepEqual(JSON.parse(set.stdout).limits, { concurrency: 2, rateLimit: { max: 10, perMs: 1000 } });
    const shown = await kiln(['tasks', 'list']);
    assert.match(shown.stdout, /^cpu\.spin +2 +10\/1000ms +0 +override +Busy-waits/m);
    // A PUT replaces the whole override: what it leaves out is the module's own limit again.
    const removed = await kiln(['tasks', 'limits', 'cpu.spin', '--concurrency', '2', '--rate', 'none', '--json']);
    assert.deepEqual(JSON.parse(removed.stdout).limits, { concurrency: 2, rateLimit: null });
    const reset = await kiln(['tasks', 'limits', 'cpu.spin', '--reset']);
    assert.equal(reset.code, 0, reset.stderr);
    assert.match(reset.stdout, /^override +none$/m);
    const unknown = await kiln(['tasks', 'limits', 'no.such.task', '--concurrency', '1']);
    assert.equal(unknown.code, 3);
    assert.equal(
      unknown.stderr,
      `kiln: ${(await problemOf('PUT', '/v1/tasks/no.such.task/limits', { concurrency: 1 })).detail}\n`,
    );
  });

  it('--help lists the commands and the exit codes', async () => {
    const help = await kiln(['--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^Exit codes:$/m);
    assert.match(help.stdout, /^ {2}2 {2}the command line is wrong$/m);
    for (const command of [
      'serve',
      'submit',
      'get',
      'wait',
      'watch',
      'list',
      'cancel',
      'retry',
      'rm',
      'queue',
      'pause',
      'resume',
      'tasks',
      'schedules',
    ]) {
      assert.match(help.stdout, new RegExp(`^ {2}${command}\\b`, 'm'), command);
    }
  });
});

describe('kiln wait shows progress', () => {
  let server: TestServer;
  let dir: string;
  before(async () => {
    server = await startServer();
    dir = mkdtempSync(join(tmpdir(), 'kiln-cli-progress-'));
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Submits a test.steps job of three steps; `step(n)` lets it report (n/3 × 100) %. */
  const stepsJob = async () => {
    const steps = mkdtempSync(join(dir, 'steps-'));
    const created = await server.request('POST', '/v1/jobs', { type: 'test.steps', payload: { dir: steps, steps: 3 } });
    assert.equal(created.status, 201, created.text);
    return { id: created.body.id as string, step: (n: number) => writeFileSync(join(steps, `step-${n}`), '') };
  };

  it('as a bar redrawn in place on a terminal (a pseudo-terminal from script(1))', async (t) => {
    if (spawnSync('script', ['--version']).error !== undefined) {
      assert.notEqual(process.env.CI, 'true', 'script(1) is not on PATH: CI must have it (Debian package util-linux)');
      t.skip('script(1) is not installed (util-linux): the progress bar on a terminal was NOT checked');
      return;
    }
    const job = await stepsJob();
    const quoted = [process.execPath, cliScript, 'wait', job.id].map((arg) => `'${arg.replace(/'/g, `'\\''`)}'`);
    const child = spawn('script', ['-q', '-e', '-c', quoted.join(' '), '/dev/null'], {
      cwd: repoRoot,
      env: cliEnv({ KILN_URL: server.url, COLUMNS: '100', LINES: '30' }),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const output = watchOutput(child);
    const exited = collect(child);
    const frames = () => output.text().split('\r\x1b[2K').slice(1);
    await output.until(() => frames().some((frame) => /^░{30} {3}0% {2}running/.test(frame)));
    job.step(1);
    await output.until(() =>
      frames().some((frame) => frame.startsWith(`${'█'.repeat(10)}${'░'.repeat(20)}  33%  running  step 1 of 3`)),
    );
    job.step(2);
    await output.until(() => frames().some((frame) => / 67% {2}running {2}step 2 of 3/.test(frame)));
    job.step(3);
    const run = await exited;
    assert.equal(run.code, 0, output.text());
    const percents = frames().map((frame) => Number(/(\d+)%/.exec(frame)?.[1]));
    assert.deepEqual(
      percents,
      [...percents].sort((a, b) => a - b),
      'the bar only moves forward',
    );
    assert.ok(percents.includes(100));
    assert.match(frames().at(-1)!, /^█{30} 100% {2}completed {2}step 3 of 3\r?\n/);
    assert.match(output.text(), /^status +completed\r?$/m);
  });

  it('as plain lines when the output is a pipe', async () => {
    const job = await stepsJob();
    const child = spawn(process.execPath, [cliScript, 'wait', job.id], {
      cwd: repoRoot,
      env: cliEnv({ KILN_URL: server.url }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
    const output = watchOutput(child);
    // A whole line (ended by its newline) like `pattern`, with `m`: ^ and $ at line ends.
    const lineLike = (pattern: RegExp) => output.until((text) => pattern.test(text.slice(0, text.lastIndexOf('\n'))));
    await lineLike(/ {2}running( {2}0% .*)?$/m);
    job.step(1);
    await lineLike(/ running {2}33% step 1 of 3$/m);
    job.step(2);
    await lineLike(/ running {2}67% step 2 of 3$/m);
    job.step(3);
    assert.equal(await exited, 0);
    const lines = output.text().split('\n');
    const progress = lines.filter((line) => line.startsWith('20'));
    for (const line of progress) assert.match(line, new RegExp(`^\\S+Z  ${job.id}  (queued|running|completed)( .*)?$`));
    assert.ok(!lines.join('\n').includes('\r'));
    assert.match(progress.at(-1)!, /completed {2}100% step 3 of 3$/);
    assert.ok(lines.some((line) => /^status +completed$/.test(line)));
  });
});

describe('kiln with tokens', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ KILN_API_TOKENS: 'cli-token' });
  });
  after(async () => {
    await server.close();
  });

  it('sends KILN_TOKEN or --token; without one, prints the 401 detail and exits 3', async () => {
    const denied = await runKiln(['queue'], { env: { KILN_URL: server.url } });
    assert.equal(denied.code, 3);
    const problem = (await server.request('GET', '/v1/queue')).body;
    assert.equal(problem.code, 'unauthorized');
    assert.equal(denied.stderr, `kiln: ${problem.detail}\n`);
    const env = await runKiln(['queue', '--json'], { env: { KILN_URL: server.url, KILN_TOKEN: 'cli-token' } });
    assert.equal(env.code, 0, env.stderr);
    const flag = await runKiln(['--token', 'cli-token', 'queue', '--json'], { env: { KILN_URL: server.url } });
    assert.equal(flag.code, 0, flag.stderr);
  });
});

describe('kiln with scoped tokens', () => {
  let server: TestServer;
  const dir = mkdtempSync(join(tmpdir(), 'kiln-cli-tokens-'));
  before(async () => {
    const file = join(dir, 'tokens.json');
    writeFileSync(
      file,
      JSON.stringify([
        { name: 'viewer', token: 'viewer-token', scopes: ['read'] },
        { name: 'ci', token: 'ci-token', scopes: ['submit'] },
      ]),
    );
    server = await startServer({ KILN_API_TOKENS: 'admin-token', KILN_API_TOKENS_FILE: file });
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('exits 4 with the problem detail when the token lacks the scope, and does nothing', async () => {
    const as = (token: string) => ({ env: { KILN_URL: server.url, KILN_TOKEN: token } });
    const submitted = await runKiln(['submit', 'noop', '--json'], as('ci-token'));
    assert.equal(submitted.code, 0, submitted.stderr);
    const id = (JSON.parse(submitted.stdout) as { id: string }).id;

    const refusedSubmit = await runKiln(['submit', 'noop'], as('viewer-token'));
    assert.equal(refusedSubmit.code, 4, refusedSubmit.stderr);
    assert.equal(refusedSubmit.stderr, 'kiln: POST /v1/jobs needs the scope submit; the token "viewer" has read\n');
    assert.equal(refusedSubmit.stdout, '');

    for (const [args, action] of [
      [['pause'], 'POST /v1/queue/pause'],
      [['rm', id], 'DELETE /v1/jobs/{id}'],
      [['tasks', 'limits', 'noop', '--concurrency', '1'], 'PUT /v1/tasks/{name}/limits'],
    ] as const) {
      const refused = await runKiln([...args], as('ci-token'));
      assert.equal(refused.code, 4, `${args.join(' ')}: ${refused.stderr}`);
      assert.equal(refused.stderr, `kiln: ${action} needs the scope admin; the token "ci" has submit\n`);
    }
    const queue = await runKiln(['queue', '--json'], as('viewer-token'));
    assert.equal(queue.code, 0, queue.stderr);
    assert.equal((JSON.parse(queue.stdout) as { paused: boolean }).paused, false, 'the refused pause did nothing');
    const job = await runKiln(['get', id, '--json'], as('viewer-token'));
    assert.equal(job.code, 0, 'the refused rm removed nothing');

    // A wrong token is not a refusal of scope: 3, as any other HTTP error.
    assert.equal((await runKiln(['queue'], as('wrong-token'))).code, 3);
    assert.equal((await runKiln(['wait', id, '--json'], as('viewer-token'))).code, 0, 'read may wait');
    assert.equal((await runKiln(['rm', id], as('admin-token'))).code, 0);
  });
});

describe('kiln serve', () => {
  it('serves as npm start does and stops on SIGTERM with exit code 0', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'kiln-serve-'));
    const child = spawn(process.execPath, [cliScript, 'serve'], {
      cwd: repoRoot,
      env: cliEnv({
        PORT: '0',
        HOST: '127.0.0.1',
        KILN_STORE: `sqlite:${join(dataDir, 'kiln.db')}`,
        KILN_THREADS: '1',
        LOG_LEVEL: 'info',
      }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = collect(child);
    try {
      const serving = await new Promise<{ address: string }>((resolve, reject) => {
        createInterface({ input: child.stdout! }).on('line', (line) => {
          const entry = JSON.parse(line);
          if (entry.msg === 'kiln is serving') resolve(entry);
        });
        child.once('close', (code) => reject(new Error(`kiln serve exited with ${code}`)));
      });
      const submitted = await runKiln(['submit', 'hash.sha256', '{"data":"hello"}', '--wait', '--json'], {
        env: { KILN_URL: serving.address },
      });
      assert.equal(submitted.code, 0, submitted.stderr);
      assert.equal(JSON.parse(submitted.stdout).status, 'completed');
      child.kill('SIGTERM');
      const run = await exited;
      assert.equal(run.code, 0, run.stderr);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
