import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { FakeClock } from '../support/fake-clock.js';
import { startServer, type TestServer } from '../support/kiln.js';

/** A whole second, so that every-second ticks fall on round times. */
const START = Date.parse('2026-11-20T10:00:00.000Z');

/**
 * Schedules through the real HTTP API, store thread and worker threads. Time is a fake
 * clock (the store's and the schedules'): the test moves it and waits for the ticks it
 * started, so nothing waits for real seconds to pass.
 */
describe('schedules through the API', () => {
  let server: TestServer;
  let clock: FakeClock;
  const dir = mkdtempSync(join(tmpdir(), 'kiln-schedules-'));

  before(async () => {
    clock = new FakeClock(START + 400);
    server = await startServer(
      { KILN_THREADS: '2' },
      () => SqliteStore.open(':memory:', { capacity: 10_000, clock: clock.now, synchronous: 'normal' }),
      { clock },
    );
  });

  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Moves the fake clock by `ms` and waits for the ticks that it set off to be stored. */
  const advance = async (ms: number) => {
    clock.advance(ms);
    await server.kiln.scheduler.schedules.whenIdle();
  };

  const jobsOf = async (name: string) => {
    const list = await server.request('GET', `/v1/jobs?schedule=${name}&limit=500`);
    assert.equal(list.status, 200, list.text);
    return (list.body.jobs as Record<string, unknown>[]).reverse();
  };

  const metric = async (name: string, outcome: string): Promise<number> => {
    const text = (await server.request('GET', '/metrics')).text;
    const line = new RegExp(`^kiln_schedule_ticks_total\\{schedule="${name}",outcome="${outcome}"\\} (\\d+)$`, 'm');
    return Number(line.exec(text)?.[1] ?? 0);
  };

  it('a schedule ticking every second creates one job per tick, and the threads run each', async () => {
    const put = await server.request('PUT', '/v1/schedules/ticker', {
      cron: '* * * * * *',
      job: { type: 'hash.sha256', payload: { data: 'tick' } },
    });
    assert.equal(put.status, 201, put.text);
    assert.equal(put.body.nextRunAt, '2026-11-20T10:00:01.000Z');
    const expected: string[] = [];
    for (let second = 1; second <= 5; second++) {
      await advance(1000);
      expected.push(`schedule:ticker:${new Date(START + second * 1000).toISOString()}`);
      const jobs = await jobsOf('ticker');
      assert.deepEqual(
        jobs.map((job) => job.idempotencyKey),
        expected,
      );
    }
    await server.request('POST', '/v1/schedules/ticker/pause');
    for (const job of await jobsOf('ticker')) {
      const done = await server.waitForJob(job.id as string);
      assert.equal(done.status, 'completed');
      assert.equal(done.schedule, 'ticker');
      assert.equal(typeof (done.result as { digest?: unknown }).digest, 'string');
    }
    assert.equal(await metric('ticker', 'created'), 5);
    const schedule = (await server.request('GET', '/v1/schedules/ticker')).body;
    assert.equal(schedule.lastRunAt, '2026-11-20T10:00:05.000Z');
    assert.equal(schedule.lastJobId, (await jobsOf('ticker')).at(-1)?.id);
  });

  it('overlap: skip makes no job while the last one is running', async () => {
    const release = join(dir, 'release-overlap');
    const put = await server.request('PUT', '/v1/schedules/held', {
      cron: '* * * * * *',
      job: { type: 'test.hold', payload: { release } },
      overlap: 'skip',
    });
    assert.equal(put.status, 201, put.text);
    await advance(1000);
    const [first, ...none] = await jobsOf('held');
    assert.ok(first);
    assert.deepEqual(none, []);
    await server.whenStatus(first.id as string, 'running');
    await advance(3000);
    assert.equal((await jobsOf('held')).length, 1);
    assert.equal(await metric('held', 'overlap'), 3);
    writeFileSync(release, '');
    assert.equal((await server.waitForJob(first.id as string)).status, 'completed');
    await advance(1000);
    const jobs = await jobsOf('held');
    assert.equal(jobs.length, 2);
    assert.equal(await metric('held', 'created'), 2);
    await server.request('DELETE', '/v1/schedules/held');
    assert.equal((await server.waitForJob(jobs[1]?.id as string)).status, 'completed');
  });

  it('creates, replaces, reads, lists, pauses, resumes, triggers and removes', async () => {
    const body = { cron: '0 30 2 * * *', timezone: 'Europe/Berlin', job: { type: 'noop' } };
    const created = await server.request('PUT', '/v1/schedules/nightly.report', body);
    assert.equal(created.status, 201, created.text);
    assert.equal(created.headers.get('location'), '/v1/schedules/nightly.report');
    const { createdAt, updatedAt, nextRunAt, ...rest } = created.body;
    assert.deepEqual(rest, {
      name: 'nightly.report',
      cron: '0 30 2 * * *',
      timezone: 'Europe/Berlin',
      job: { type: 'noop' },
      overlap: 'allow',
      catchUp: 'none',
      paused: false,
      lastRunAt: null,
      lastJobId: null,
    });
    assert.equal(nextRunAt, '2026-11-21T01:30:00.000Z');
    assert.equal(createdAt, updatedAt);

    const replaced = await server.request('PUT', '/v1/schedules/nightly.report', {
      ...body,
      timezone: 'UTC',
      overlap: 'skip',
      catchUp: 'last',
      job: { type: 'noop', priority: 9, metadata: { team: 'reports' }, group: 'tenant-a' },
    });
    assert.equal(replaced.status, 200, replaced.text);
    assert.equal(replaced.body.nextRunAt, '2026-11-21T02:30:00.000Z');
    assert.equal(replaced.body.createdAt, createdAt);
    assert.deepEqual(replaced.body.job, {
      type: 'noop',
      priority: 9,
      metadata: { team: 'reports' },
      group: 'tenant-a',
    });

    const one = await server.request('GET', '/v1/schedules/nightly.report');
    assert.deepEqual(one.body, replaced.body);
    const list = await server.request('GET', '/v1/schedules');
    assert.ok((list.body.schedules as { name: string }[]).some((s) => s.name === 'nightly.report'));

    const paused = await server.request('POST', '/v1/schedules/nightly.report/pause');
    assert.equal(paused.status, 200);
    assert.equal(paused.body.paused, true);
    assert.equal(paused.body.nextRunAt, null);

    const triggered = await server.request('POST', '/v1/schedules/nightly.report/trigger');
    assert.equal(triggered.status, 201, triggered.text);
    assert.equal(triggered.headers.get('location'), `/v1/jobs/${triggered.body.id}`);
    assert.equal(triggered.body.schedule, 'nightly.report');
    assert.equal(triggered.body.priority, 9);
    assert.deepEqual(triggered.body.metadata, { team: 'reports' });
    assert.equal(triggered.body.group, 'tenant-a');
    assert.equal((await server.waitForJob(triggered.body.id)).status, 'completed');
    const jobs = await jobsOf('nightly.report');
    assert.deepEqual(
      jobs.map((job) => job.id),
      [triggered.body.id],
    );
    assert.equal((await server.request('GET', '/v1/schedules/nightly.report')).body.lastJobId, triggered.body.id);

    const resumed = await server.request('POST', '/v1/schedules/nightly.report/resume');
    assert.equal(resumed.body.paused, false);
    assert.equal(resumed.body.nextRunAt, '2026-11-21T02:30:00.000Z');

    const plain = await server.request('POST', '/v1/jobs', { type: 'noop' });
    assert.equal(plain.body.schedule, null);

    assert.equal((await server.request('DELETE', '/v1/schedules/nightly.report')).status, 204);
    for (const [method, path] of [
      ['GET', '/v1/schedules/nightly.report'],
      ['DELETE', '/v1/schedules/nightly.report'],
      ['POST', '/v1/schedules/nightly.report/pause'],
      ['POST', '/v1/schedules/nightly.report/resume'],
      ['POST', '/v1/schedules/nightly.report/trigger'],
    ] as const) {
      const missing = await server.request(method, path);
      assert.equal(missing.status, 404, `${method} ${path}`);
      assert.equal(missing.headers.get('content-type'), 'application/problem+json; charset=utf-8');
      assert.equal(missing.body.code, 'not_found');
      assert.equal(missing.body.detail, 'no schedule is named "nightly.report"');
    }
    // Its jobs keep its name.
    assert.equal((await jobsOf('nightly.report')).length, 1);
  });

  it('refuses what it cannot honour with a 400 that names the field', async () => {
    const job = { type: 'noop' };
    const cases: [string, unknown, string, string][] = [
      ['a bad time zone', { cron: '* * * * *', timezone: 'Mars/Olympus', job }, 'validation_error', 'timezone'],
      ['four fields', { cron: '* * * *', job }, 'validation_error', 'cron'],
      ['seven fields', { cron: '0 0 0 * * * 2030', job }, 'validation_error', 'cron'],
      ['an hour of 25', { cron: '0 25 * * *', job }, 'validation_error', 'cron'],
      ['a date that never comes', { cron: '0 0 30 2 *', job }, 'validation_error', 'cron'],
      ['no cron', { job }, 'validation_error', 'cron'],
      ['no job', { cron: '* * * * *' }, 'validation_error', 'job'],
      ['an unknown field', { cron: '* * * * *', job, every: '5m' }, 'validation_error', 'every'],
      ['an overlap rule', { cron: '* * * * *', job, overlap: 'queue' }, 'validation_error', 'overlap'],
      ['a catch-up rule', { cron: '* * * * *', job, catchUp: 'all' }, 'validation_error', 'catchUp'],
      [
        'runAt in the job',
        { cron: '* * * * *', job: { ...job, runAt: '2030-01-01T00:00:00Z' } },
        'validation_error',
        'job.runAt',
      ],
      ['delayMs in the job', { cron: '* * * * *', job: { ...job, delayMs: 5 } }, 'validation_error', 'job.delayMs'],
      [
        'a key in the job',
        { cron: '* * * * *', job: { ...job, idempotencyKey: 'k' } },
        'validation_error',
        'job.idempotencyKey',
      ],
      ['dependencies', { cron: '* * * * *', job: { ...job, dependsOn: [] } }, 'validation_error', 'job.dependsOn'],
      [
        'a callback on a server without KILN_CALLBACK_SECRET',
        { cron: '* * * * *', job: { ...job, callback: { url: 'https://example.com/hook' } } },
        'callbacks_disabled',
        'job.callback',
      ],
      ['an unknown task', { cron: '* * * * *', job: { type: 'no.such.task' } }, 'unknown_task_type', 'job.type'],
      [
        'a payload its task refuses',
        { cron: '* * * * *', job: { type: 'hash.sha256', payload: { data: 7 } } },
        'validation_error',
        'job.payload.data',
      ],
      [
        'a priority out of range',
        { cron: '* * * * *', job: { ...job, priority: 10 } },
        'validation_error',
        'job.priority',
      ],
    ];
    for (const [what, body, code, path] of cases) {
      const answer = await server.request('PUT', '/v1/schedules/refused', body);
      assert.equal(answer.status, 400, `${what}: ${answer.text}`);
      assert.equal(answer.body.code, code, what);
      assert.ok(
        (answer.body.errors as { path: string }[]).some((error) => error.path === path),
        `${what}: ${answer.text}`,
      );
    }
    for (const name of ['has space', 'x'.repeat(129), 'slash%2Fname']) {
      const answer = await server.request('PUT', `/v1/schedules/${name}`, { cron: '* * * * *', job });
      assert.equal(answer.status, 400, `${name}: ${answer.text}`);
      assert.equal(answer.body.code, 'validation_error');
    }
    assert.equal((await server.request('GET', '/v1/schedules/refused')).status, 404, 'nothing was stored');
  });

  it('publishes the routes in the OpenAPI document', async () => {
    const openapi = await server.request('GET', '/openapi.json');
    const paths = openapi.body.paths as Record<string, Record<string, unknown>>;
    assert.ok(paths['/v1/schedules']?.get);
    for (const method of ['put', 'get', 'delete']) assert.ok(paths['/v1/schedules/{name}']?.[method], method);
    for (const action of ['pause', 'resume', 'trigger']) assert.ok(paths[`/v1/schedules/{name}/${action}`]?.post);
    const listJobs = paths['/v1/jobs']?.get as { parameters: { name: string }[] };
    assert.ok(listJobs.parameters.some((parameter) => parameter.name === 'schedule'));
  });
});
