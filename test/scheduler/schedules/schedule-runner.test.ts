import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, it } from 'node:test';
import type { JobStore } from '../../../src/store/store.js';
import type { NewJob } from '../../../src/contract/job.js';
import type { Schedule } from '../../../src/contract/schedule.js';
import { FakeClock } from '../../support/fake-clock.js';
import { KilnError } from '../../../src/scheduler/errors.js';
import { KilnMetrics } from '../../../src/scheduler/statistics/metrics.js';
import {
  MISFIRE_MS,
  type ScheduleInput,
  ScheduleRunner,
  tickKey,
} from '../../../src/scheduler/schedules/schedule-runner.js';
import { PostgresStore } from '../../../src/store/postgres/store.js';
import { SqliteStore } from '../../../src/store/sqlite/store.js';
import { dropSchema, freshSchemaName, TEST_PG_URL } from '../../support/postgres.js';
import { newJobId } from '../../../src/jobs/ids.js';

/** A whole second, so that every-second ticks fall on round times. */
const START = Date.parse('2026-11-20T10:00:00.000Z');

interface Harness {
  runner: ScheduleRunner;
  store: JobStore;
  metrics: KilnMetrics;
  warnings: { obj: object; msg: string }[];
}

const schemas: string[] = [];
after(async () => {
  for (const schema of schemas) await dropSchema(schema);
});

const stores: [string, (clock: FakeClock, schema?: string) => Promise<JobStore>][] = [
  ['sqlite', (clock) => SqliteStore.open(':memory:', { capacity: 10_000, clock: clock.now, synchronous: 'normal' })],
  [
    'postgres',
    (clock, schema) => {
      const name = schema ?? freshSchemaName();
      if (!schemas.includes(name)) schemas.push(name);
      return PostgresStore.open({ url: TEST_PG_URL, schema: name, poolSize: 4, capacity: 10_000, clock: clock.now });
    },
  ],
];

/** A runner on a real store, the fake clock its time, jobs made from a request as the scheduler would. */
function makeRunner(store: JobStore, clock: FakeClock): Harness {
  const warnings: Harness['warnings'] = [];
  const metrics = new KilnMetrics({
    counts: () => store.counts(),
    capacity: 10_000,
    threads: () => 1,
    busyThreads: () => 0,
  });
  const runner = new ScheduleRunner({
    store,
    clock,
    metrics,
    log: {
      info: (obj, msg) => warnings.push({ obj, msg }),
      warn: (obj, msg) => warnings.push({ obj, msg }),
      error: (obj, msg) => warnings.push({ obj, msg }),
    },
    registered: (type) => type !== 'test.gone',
    prepare: async (request, schedule, idempotencyKey): Promise<NewJob> => ({
      id: newJobId(clock.now()),
      type: String(request.type),
      priority: 5,
      payload: request.payload ?? {},
      maxAttempts: 3,
      timeoutMs: 1000,
      backoff: { initialMs: 100, factor: 2, maxMs: 1000, jitter: 'none' },
      idempotencyKey,
      dependsOn: [],
      metadata: {},
      runAt: null,
      createdAt: clock.now(),
      schedule,
    }),
    admitted: () => undefined,
    refusal: (inserted) => new KilnError('queue_full', `refused: ${inserted.reason}`),
    storeFailed: (error) => {
      throw error;
    },
  });
  return { runner, store, metrics, warnings };
}

function input(overrides: Partial<ScheduleInput> = {}): ScheduleInput {
  return {
    name: 'every-second',
    cron: '* * * * * *',
    timezone: 'UTC',
    job: { type: 'test.echo', payload: { n: 1 } },
    overlap: 'allow',
    catchUp: 'none',
    paused: false,
    ...overrides,
  };
}

async function ticks(metrics: KilnMetrics, schedule: string, outcome: string): Promise<number> {
  const metric = await metrics.registry.getSingleMetric('kiln_schedule_ticks_total')?.get();
  return metric?.values.find((v) => v.labels.schedule === schedule && v.labels.outcome === outcome)?.value ?? 0;
}

/** The idempotency keys of the schedule's jobs, oldest first. */
async function jobKeys(store: JobStore, schedule: string): Promise<string[]> {
  const page = await store.list({ limit: 500, schedule });
  return page.jobs.map((job) => job.idempotencyKey ?? '(none)').reverse();
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

for (const [kind, openStore] of stores) {
  describe(`schedule runner on the ${kind} store (fake clock)`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    });
    const start = async (clock: FakeClock, store?: JobStore): Promise<Harness> => {
      const opened = store ?? (await openStore(clock));
      if (store === undefined) cleanups.push(() => opened.close());
      const harness = makeRunner(opened, clock);
      await harness.runner.start();
      cleanups.push(() => harness.runner.stop());
      return harness;
    };
    /** Moves the clock to `at` (firing the timer on the way) and waits for the ticks it started. */
    const moveTo = async (clock: FakeClock, runners: ScheduleRunner[], at: number) => {
      clock.set(at);
      await Promise.all(runners.map((runner) => runner.whenIdle()));
    };

    it('makes one job per tick of an every-second schedule, keyed by its tick', async () => {
      const clock = new FakeClock(START + 400);
      const { runner, store, metrics } = await start(clock);
      const { created, schedule } = await runner.put(input());
      assert.equal(created, true);
      assert.equal(schedule.nextRunAt, START + 1000);
      const expected: string[] = [];
      for (let second = 1; second <= 10; second++) {
        await moveTo(clock, [runner], START + second * 1000 + 400);
        expected.push(tickKey('every-second', START + second * 1000));
        assert.deepEqual(await jobKeys(store, 'every-second'), expected, `after tick ${second}`);
      }
      // A late timer (a busy process): each tick that passed still makes its one job.
      await moveTo(clock, [runner], START + 15_400);
      for (let second = 11; second <= 15; second++) expected.push(tickKey('every-second', START + second * 1000));
      assert.deepEqual(await jobKeys(store, 'every-second'), expected);
      assert.equal(await ticks(metrics, 'every-second', 'created'), 15);
      const now = (await runner.get('every-second')) as Schedule;
      assert.equal(now.nextRunAt, START + 16_000);
      assert.equal(now.lastRunAt, START + 15_000);
      assert.equal(clock.pendingTimers, 1);
    });

    it('starts the tick counters of every schedule at 0, and drops them with the schedule', async () => {
      const clock = new FakeClock(START + 400);
      const store = await openStore(clock);
      cleanups.push(() => store.close());
      // One schedule stored before this runner starts (another server, or the last run).
      const first = await start(clock, store);
      await first.runner.put(input({ name: 'stored' }));
      await first.runner.stop();
      const { runner, metrics } = await start(clock, store);
      const series = async () => {
        const metric = await metrics.registry.getSingleMetric('kiln_schedule_ticks_total')?.get();
        return (metric?.values ?? []).map((v) => `${v.labels.schedule}/${v.labels.outcome}=${v.value}`).sort();
      };
      assert.deepEqual(await series(), ['stored/created=0', 'stored/overlap=0', 'stored/skipped=0']);
      await runner.put(input({ name: 'added' }));
      assert.deepEqual(await series(), [
        'added/created=0',
        'added/overlap=0',
        'added/skipped=0',
        'stored/created=0',
        'stored/overlap=0',
        'stored/skipped=0',
      ]);
      await runner.remove('stored');
      assert.deepEqual(await series(), ['added/created=0', 'added/overlap=0', 'added/skipped=0']);
    });

    it('keeps one timer for all schedules, at the earliest tick, armed again on changes', async () => {
      const clock = new FakeClock(START + 400);
      const { runner } = await start(clock);
      await runner.put(input({ name: 'hourly', cron: '0 * * * *' }));
      await runner.put(input({ name: 'minutely', cron: '* * * * *' }));
      assert.equal(clock.pendingTimers, 1);
      assert.equal(iso(clock.nextTimerAt), '2026-11-20T10:01:00.000Z');
      await runner.put(input({ name: 'every-5s', cron: '*/5 * * * * *' }));
      assert.equal(clock.pendingTimers, 1);
      assert.equal(iso(clock.nextTimerAt), '2026-11-20T10:00:05.000Z');
      await runner.remove('every-5s');
      assert.equal(iso(clock.nextTimerAt), '2026-11-20T10:01:00.000Z');
      await runner.setPaused('minutely', true);
      await runner.setPaused('hourly', true);
      assert.equal(clock.pendingTimers, 0, 'nothing to wait for');
      const resumed = await runner.setPaused('hourly', false);
      assert.equal(iso(resumed.nextRunAt), '2026-11-20T11:00:00.000Z');
      assert.equal(clock.pendingTimers, 1);
    });

    it('with overlap: skip, makes no job while the last one is unfinished', async () => {
      const clock = new FakeClock(START + 400);
      const { runner, store, metrics } = await start(clock);
      await runner.put(input({ overlap: 'skip' }));
      await moveTo(clock, [runner], START + 1400);
      const [first] = (await store.list({ limit: 10, schedule: 'every-second' })).jobs;
      assert.ok(first);
      // Nothing runs the job here: it stays queued, so the next ticks overlap it.
      await moveTo(clock, [runner], START + 4400);
      assert.equal((await store.list({ limit: 10, schedule: 'every-second' })).jobs.length, 1);
      assert.equal(await ticks(metrics, 'every-second', 'overlap'), 3);
      assert.equal((await runner.get('every-second')).nextRunAt, START + 5000, 'the overlapped ticks are spent');
      await store.cancel(first.id);
      await moveTo(clock, [runner], START + 5400);
      assert.deepEqual(await jobKeys(store, 'every-second'), [
        tickKey('every-second', START + 1000),
        tickKey('every-second', START + 5000),
      ]);
      assert.equal(await ticks(metrics, 'every-second', 'created'), 2);
    });

    it('skips the ticks of a task type no longer registered, with a warning, and keeps the schedule', async () => {
      const clock = new FakeClock(START + 400);
      const { runner, store, metrics, warnings } = await start(clock);
      await runner.put(input({ job: { type: 'test.gone' } }));
      await moveTo(clock, [runner], START + 2400);
      assert.deepEqual(await jobKeys(store, 'every-second'), []);
      assert.equal(await ticks(metrics, 'every-second', 'skipped'), 2);
      assert.equal(warnings.filter((w) => w.msg === 'a schedule tick was skipped').length, 2);
      assert.match(JSON.stringify(warnings[0]?.obj), /no task is registered as \\"test.gone\\"/);
      assert.equal((await runner.get('every-second')).nextRunAt, START + 3000);
    });

    it('triggers one job now, paused or not, recorded as the last job', async () => {
      const clock = new FakeClock(START + 400);
      const { runner, store } = await start(clock);
      await runner.put(input({ paused: true }));
      const job = await runner.trigger('every-second');
      assert.equal(job.schedule, 'every-second');
      assert.equal(job.idempotencyKey, null);
      const schedule = await runner.get('every-second');
      assert.equal(schedule.lastJobId, job.id);
      assert.equal(schedule.lastRunAt, START + 400);
      assert.equal(schedule.nextRunAt, null);
      await moveTo(clock, [runner], START + 5400);
      assert.equal((await store.list({ limit: 10, schedule: 'every-second' })).jobs.length, 1, 'paused: no ticks');
      await assert.rejects(runner.trigger('missing'), { code: 'not_found' });
    });

    for (const catchUp of ['none', 'last'] as const) {
      it(`after a time with no server, catchUp: ${catchUp} ${catchUp === 'none' ? 'drops the missed ticks' : 'makes one job for the most recent'}`, async () => {
        const clock = new FakeClock(START + 400);
        const store = await openStore(clock);
        cleanups.push(() => store.close());
        const first = makeRunner(store, clock);
        await first.runner.start();
        await first.runner.put(input({ name: 'every-minute', cron: '* * * * *', catchUp }));
        await moveTo(clock, [first.runner], START + 60_400);
        await first.runner.stop();
        assert.deepEqual(await jobKeys(store, 'every-minute'), [tickKey('every-minute', START + 60_000)]);
        // No server runs for ten minutes.
        clock.set(START + 11 * 60_000 + 400);
        assert.ok(START + 2 * 60_000 < clock.now() - MISFIRE_MS);
        const second = await start(clock, store);
        await second.runner.whenIdle();
        await moveTo(clock, [second.runner], clock.now());
        const expected = [tickKey('every-minute', START + 60_000)];
        if (catchUp === 'last') expected.push(tickKey('every-minute', START + 11 * 60_000));
        assert.deepEqual(await jobKeys(store, 'every-minute'), expected);
        assert.equal((await second.runner.get('every-minute')).nextRunAt, START + 12 * 60_000);
        await moveTo(clock, [second.runner], START + 12 * 60_000);
        expected.push(tickKey('every-minute', START + 12 * 60_000));
        assert.deepEqual(await jobKeys(store, 'every-minute'), expected);
      });
    }

    describe('daylight-saving changes in Europe/Berlin (computed, not waited for)', () => {
      /** The nextRunAt of each tick in turn, moving the clock to each; and the jobs' tick keys. */
      const sequence = async (cron: string, from: string, count: number): Promise<string[]> => {
        const clock = new FakeClock(Date.parse(from));
        const { runner, store } = await start(clock);
        let schedule = (await runner.put(input({ name: 'berlin', cron, timezone: 'Europe/Berlin' }))).schedule;
        const seen: string[] = [];
        for (let i = 0; i < count; i++) {
          const next = schedule.nextRunAt as number;
          seen.push(iso(next) as string);
          await moveTo(clock, [runner], next);
          schedule = await runner.get('berlin');
        }
        assert.deepEqual(
          await jobKeys(store, 'berlin'),
          seen.map((at) => `schedule:berlin:${at}`),
        );
        return seen;
      };

      it('0 30 2 * * *: on the spring-forward day at the first valid time after the gap (03:00 CEST)', async () => {
        assert.deepEqual(await sequence('0 30 2 * * *', '2026-03-27T12:00:00Z', 4), [
          '2026-03-28T01:30:00.000Z', // 02:30 CET
          '2026-03-29T01:00:00.000Z', // 02:30 does not exist: 03:00 CEST
          '2026-03-30T00:30:00.000Z', // 02:30 CEST
          '2026-03-31T00:30:00.000Z',
        ]);
      });

      it('0 30 2 * * *: on the fall-back day once, at the first 02:30', async () => {
        assert.deepEqual(await sequence('0 30 2 * * *', '2026-10-23T12:00:00Z', 4), [
          '2026-10-24T00:30:00.000Z', // 02:30 CEST
          '2026-10-25T00:30:00.000Z', // the first 02:30 (CEST); not again at 02:30 CET
          '2026-10-26T01:30:00.000Z', // 02:30 CET
          '2026-10-27T01:30:00.000Z',
        ]);
      });

      it('*/30 * * * *: runs on both passes through the repeated hour, and skips the missing one', async () => {
        assert.deepEqual(await sequence('*/30 * * * *', '2026-10-24T23:45:00Z', 6), [
          '2026-10-25T00:00:00.000Z', // 02:00 CEST
          '2026-10-25T00:30:00.000Z', // 02:30 CEST
          '2026-10-25T01:00:00.000Z', // 02:00 CET, the hour again
          '2026-10-25T01:30:00.000Z', // 02:30 CET
          '2026-10-25T02:00:00.000Z', // 03:00 CET
          '2026-10-25T02:30:00.000Z',
        ]);
        assert.deepEqual(await sequence('*/30 * * * *', '2026-03-29T00:15:00Z', 3), [
          '2026-03-29T00:30:00.000Z', // 01:30 CET
          '2026-03-29T01:00:00.000Z', // 03:00 CEST: 02:00 and 02:30 do not exist
          '2026-03-29T01:30:00.000Z', // 03:30 CEST
        ]);
      });
    });

    if (kind === 'sqlite') {
      it('tries a tick again once the store is back, losing none, when the store thread dies', async () => {
        const clock = new FakeClock(START + 400);
        const dir = mkdtempSync(join(tmpdir(), 'kiln-runner-'));
        const store = await SqliteStore.open(join(dir, 'kiln.db'), {
          capacity: 1000,
          clock: clock.now,
          restartDelayMs: 10,
        });
        cleanups.push(async () => {
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        });
        const { runner, warnings } = await start(clock, store);
        await runner.put(input());
        await moveTo(clock, [runner], START + 1400);
        const back = new Promise<void>((resolve) => {
          const unsubscribe = store.subscribe((event) => {
            if (event.kind !== 'ready') return;
            unsubscribe();
            resolve();
          });
        });
        await store.thread?.terminate();
        await moveTo(clock, [runner], START + 2400);
        assert.ok(warnings.some((w) => w.msg === 'firing schedule ticks failed; retrying'));
        // The store's restart timer does not hold the process open; this does, until it is back.
        const keepAlive = setInterval(() => undefined, 1000);
        await back.finally(() => clearInterval(keepAlive));
        // A second after the failure, the tick that failed and the one since are fired.
        assert.equal(clock.nextTimerAt, START + 3400);
        await moveTo(clock, [runner], START + 3400);
        assert.deepEqual(await jobKeys(store, 'every-second'), [
          tickKey('every-second', START + 1000),
          tickKey('every-second', START + 2000),
          tickKey('every-second', START + 3000),
        ]);
        // The outage is two lines: when it began, and when it ended with how long it lasted.
        const fault = warnings.filter((w) => w.msg.startsWith('firing schedule ticks'));
        assert.deepEqual(
          fault.map((w) => w.msg),
          ['firing schedule ticks failed; retrying', 'firing schedule ticks works again'],
        );
        assert.deepEqual(fault[1]?.obj, { fault: 'firing schedule ticks', failures: 1, durationMs: 1000 });
      });
    }

    if (kind === 'postgres') {
      /** Two stores on one schema: two servers sharing a database. */
      const twoServers = async (clock: FakeClock): Promise<[JobStore, JobStore]> => {
        const schema = freshSchemaName();
        const opened: JobStore[] = [];
        for (let i = 0; i < 2; i++) {
          const store = await openStore(clock, schema);
          cleanups.push(() => store.close());
          opened.push(store);
        }
        return opened as [JobStore, JobStore];
      };

      it('two servers on one database make exactly one job per tick over many ticks', async () => {
        const clock = new FakeClock(START + 400);
        const [storeA, storeB] = await twoServers(clock);
        const a = makeRunner(storeA, clock);
        const b = makeRunner(storeB, clock);
        await a.runner.put(input());
        await a.runner.put(input({ name: 'every-2s', cron: '*/2 * * * * *', overlap: 'skip' }));
        await a.runner.start();
        cleanups.push(() => a.runner.stop());
        await b.runner.start();
        cleanups.push(() => b.runner.stop());
        const expected: string[] = [];
        for (let second = 1; second <= 40; second++) {
          await moveTo(clock, [a.runner, b.runner], START + second * 1000 + 400);
          expected.push(tickKey('every-second', START + second * 1000));
        }
        assert.deepEqual(await jobKeys(storeB, 'every-second'), expected);
        const created =
          (await ticks(a.metrics, 'every-second', 'created')) + (await ticks(b.metrics, 'every-second', 'created'));
        assert.equal(created, 40, 'one server counted each tick');
        // overlap: skip across servers: the first job stays queued, so every later tick overlaps it, once.
        assert.equal((await jobKeys(storeA, 'every-2s')).length, 1);
        const overlapped =
          (await ticks(a.metrics, 'every-2s', 'overlap')) + (await ticks(b.metrics, 'every-2s', 'overlap'));
        assert.equal(overlapped, 19);
      });

      it('sees a schedule changed on another server when it reads the schedules again', async () => {
        const clock = new FakeClock(START + 400);
        const [storeA, storeB] = await twoServers(clock);
        const a = makeRunner(storeA, clock);
        await a.runner.start();
        cleanups.push(() => a.runner.stop());
        const b = await start(clock, storeB);
        await a.runner.put(input({ name: 'elsewhere', cron: '*/5 * * * * *' }));
        // A stops, and its timer with it; B's stands at the schedule's first tick once B has
        // read the schedules again (its scheduler does so every second on a shared store).
        const at = Date.parse('2026-11-20T10:00:05.000Z');
        await a.runner.stop();
        assert.equal(clock.pendingTimers, 0, 'B has not heard of the schedule yet');
        await b.runner.reload();
        await clock.whenTimerSetFor(at);
        assert.equal(clock.pendingTimers, 1);
        await moveTo(clock, [b.runner], at + 400);
        assert.deepEqual(await jobKeys(storeB, 'elsewhere'), [tickKey('elsewhere', at)]);
        assert.equal(await ticks(b.metrics, 'elsewhere', 'created'), 1);
      });
    }
  });
}
