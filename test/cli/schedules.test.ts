import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KilnClient, KilnError } from '../../src/client/index.js';
import { runKiln } from '../support/cli.js';
import { startServer, type TestServer } from '../support/kiln.js';

/** Schedules through the typed client and through `kiln schedules …`, against a real server. */

describe('schedules through the client and the command line', () => {
  let server: TestServer;
  let client: KilnClient;
  const kiln = (args: string[], input?: string) =>
    runKiln(args, { env: { KILN_URL: server.url }, ...(input === undefined ? {} : { input }) });

  before(async () => {
    server = await startServer();
    client = new KilnClient({ url: server.url });
  });
  after(async () => {
    await server.close();
  });

  it('the client creates, replaces, reads, pauses, resumes, triggers and removes a schedule', async () => {
    const body = { cron: '0 3 * * *', timezone: 'Europe/Berlin', job: { type: 'noop', payload: { echo: 1 } } };
    const created = await client.putSchedule('nightly', body);
    assert.equal(created.created, true);
    assert.equal(created.schedule.name, 'nightly');
    assert.equal(created.schedule.timezone, 'Europe/Berlin');
    assert.equal(typeof created.schedule.nextRunAt, 'string');
    const replaced = await client.putSchedule('nightly', { ...body, overlap: 'skip' });
    assert.equal(replaced.created, false);
    assert.equal(replaced.schedule.overlap, 'skip');
    assert.deepEqual(
      (await client.schedules()).map((schedule) => schedule.name),
      ['nightly'],
    );
    assert.equal((await client.schedule('nightly')).cron, '0 3 * * *');
    assert.equal((await client.pauseSchedule('nightly')).paused, true);
    assert.equal((await client.resumeSchedule('nightly')).paused, false);
    const job = await client.triggerSchedule('nightly');
    assert.equal(job.schedule, 'nightly');
    assert.equal((await client.wait(job.id)).status, 'completed');
    const made: string[] = [];
    for await (const summary of client.list({ schedule: 'nightly' })) made.push(summary.id);
    assert.deepEqual(made, [job.id]);
    await client.removeSchedule('nightly');
    const gone = await client.schedule('nightly').then(
      () => assert.fail('the schedule is still there'),
      (error: unknown) => error,
    );
    assert.ok(gone instanceof KilnError);
    assert.equal(gone.status, 404);
    assert.equal(gone.code, 'not_found');
  });

  it('kiln schedules put, list, get, pause, resume, trigger and rm', async () => {
    const put = await kiln([
      'schedules',
      'put',
      'reports',
      '--cron',
      '*/5 * * * *',
      '--type',
      'noop',
      '--payload',
      '{"echo":2}',
    ]);
    assert.equal(put.code, 0, put.stderr);
    assert.match(put.stdout, /^reports {2}created$/m);
    assert.match(put.stdout, /^cron +\*\/5 \* \* \* \* \(UTC\)$/m);
    const fromStdin = await kiln(
      ['schedules', 'put', 'reports', '-', '--json'],
      JSON.stringify({ cron: '*/10 * * * *', job: { type: 'noop' }, overlap: 'skip' }),
    );
    assert.equal(fromStdin.code, 0, fromStdin.stderr);
    assert.equal(JSON.parse(fromStdin.stdout).overlap, 'skip');
    const list = await kiln(['schedules']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^NAME +CRON +TIMEZONE +TYPE +NEXT RUN +LAST JOB$/m);
    assert.match(list.stdout, /^reports +\*\/10 \* \* \* \* +UTC +noop +\S+Z +-$/m);
    const paused = await kiln(['schedules', 'pause', 'reports']);
    assert.match(paused.stdout, /^paused +yes$/m);
    const resumed = await kiln(['schedules', 'resume', 'reports', '--json']);
    assert.equal(JSON.parse(resumed.stdout).paused, false);
    const triggered = await kiln(['schedules', 'trigger', 'reports']);
    assert.equal(triggered.code, 0, triggered.stderr);
    const jobId = triggered.stdout.split(' ')[0]!;
    assert.match(triggered.stdout, /^\S+ {2}noop {2}(queued|running|completed)\n$/);
    await server.waitForJob(jobId);
    const got = await kiln(['schedules', 'get', 'reports']);
    assert.match(got.stdout, new RegExp(`^last job +${jobId}$`, 'm'));
    const table = await kiln(['list', '--schedule', 'reports']);
    assert.match(table.stdout, /^ID +TYPE +STATUS +PRI +ATTEMPTS +SCHEDULE +CREATED$/m);
    assert.match(table.stdout, new RegExp(`^${jobId} +noop +completed +5 +1/3 +reports +\\S+Z$`, 'm'));
    const listed = await kiln(['list', '--schedule', 'reports', '--json']);
    assert.deepEqual(
      JSON.parse(listed.stdout).map((job: { id: string }) => job.id),
      [jobId],
    );
    const removed = await kiln(['schedules', 'rm', 'reports']);
    assert.equal(removed.stdout, 'reports  removed\n');
    const missing = await kiln(['schedules', 'get', 'reports']);
    assert.equal(missing.code, 3);
    const problem = (await server.request('GET', '/v1/schedules/reports')).body;
    assert.equal(missing.stderr, `kiln: ${problem.detail}\n`);
  });

  it('kiln schedules put says what is missing, and prints the server’s refusal', async () => {
    const nothing = await kiln(['schedules', 'put', 'empty']);
    assert.equal(nothing.code, 2);
    assert.match(nothing.stderr, /^kiln: a schedule needs a cron expression and a job/);
    const badCron = await kiln(['schedules', 'put', 'bad', '--cron', 'every day', '--type', 'noop']);
    assert.equal(badCron.code, 3);
    const problem = (await server.request('PUT', '/v1/schedules/bad', { cron: 'every day', job: { type: 'noop' } }))
      .body;
    assert.equal(problem.code, 'validation_error');
    assert.equal(badCron.stderr, `kiln: ${problem.detail}\n`);
  });
});
