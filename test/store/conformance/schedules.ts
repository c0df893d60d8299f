import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { FireResult, JobStore } from '../../../src/store/store.js';
import type { Job, NewJob } from '../../../src/contract/job.js';
import type { ScheduleDefinition } from '../../../src/contract/schedule.js';
import { changes, type OpenStore } from './context.js';
import { insertOne, mustGet, newJob, T0 } from '../../support/store-fixtures.js';

/** Schedules: defining them and firing their ticks. */
export function schedulesFacet(openStore: OpenStore): void {
  describe('schedules', () => {
    const definition = (overrides: Partial<ScheduleDefinition> = {}): ScheduleDefinition => ({
      name: 'nightly',
      cron: '0 0 * * *',
      timezone: 'UTC',
      job: { type: 'test.echo', payload: { n: 1 } },
      overlap: 'allow',
      catchUp: 'none',
      paused: false,
      nextRunAt: T0 + 1000,
      updatedAt: T0,
      ...overrides,
    });
    const tickJob = (name: string, at: number, overrides: Partial<NewJob> = {}) =>
      newJob({ schedule: name, idempotencyKey: `schedule:${name}:${new Date(at).toISOString()}`, ...overrides });
    /** The tick at T0 + 1000 of `definition()`, as a server that read it at T0 fires it. */
    const fireFirstTick = (store: JobStore) =>
      store.fireSchedule({
        name: 'nightly',
        expected: { nextRunAt: T0 + 1000, updatedAt: T0 },
        nextRunAt: T0 + 2000,
        runAt: T0 + 1000,
        job: tickJob('nightly', T0 + 1000),
        skipOverlap: false,
      });
    const fired = (result: FireResult) => {
      assert.equal(result.fired, true, 'the tick should fire');
      return result as Extract<FireResult, { fired: true }>;
    };
    const created = (result: FireResult): Job => {
      const insert = fired(result).insert;
      assert.ok(insert !== null && insert.ok, `the tick should insert: ${JSON.stringify(insert)}`);
      const [outcome] = insert.outcomes;
      assert.ok(outcome);
      return outcome.job;
    };

    it('creates, reads, replaces (keeping what ticks wrote) and removes schedules', async () => {
      const { store } = await openStore();
      assert.deepEqual(await store.schedules(), []);
      assert.equal(await store.getSchedule('nightly'), null);
      const first = await store.putSchedule(definition());
      assert.equal(first.created, true);
      assert.deepEqual(first.schedule, { ...definition(), lastRunAt: null, lastJobId: null, createdAt: T0 });
      const job = created(await fireFirstTick(store));
      const replaced = await store.putSchedule(
        definition({
          cron: '*/5 * * * * *',
          timezone: 'Europe/Berlin',
          paused: true,
          nextRunAt: null,
          updatedAt: T0 + 7,
        }),
      );
      assert.equal(replaced.created, false);
      assert.deepEqual(replaced.schedule, {
        ...definition({ cron: '*/5 * * * * *', timezone: 'Europe/Berlin', paused: true, nextRunAt: null }),
        updatedAt: T0 + 7,
        lastRunAt: T0 + 1000,
        lastJobId: job.id,
        createdAt: T0,
      });
      await store.putSchedule(definition({ name: 'a-first', overlap: 'skip', catchUp: 'last' }));
      assert.deepEqual(
        (await store.schedules()).map((schedule) => [schedule.name, schedule.overlap, schedule.catchUp]),
        [
          ['a-first', 'skip', 'last'],
          ['nightly', 'allow', 'none'],
        ],
      );
      assert.deepEqual(await store.getSchedule('nightly'), replaced.schedule);
      assert.equal(await store.removeSchedule('nightly'), true);
      assert.equal(await store.removeSchedule('nightly'), false);
      assert.equal(await store.getSchedule('nightly'), null);
      assert.equal((await mustGet(store, job.id)).schedule, 'nightly', 'its jobs keep its name');
    });

    it('fires a tick once: the compare-and-set of nextRunAt lets one caller through', async () => {
      const { store } = await openStore();
      await store.putSchedule(definition());
      const fire = {
        name: 'nightly',
        expected: { nextRunAt: T0 + 1000, updatedAt: T0 },
        nextRunAt: T0 + 2000,
        runAt: T0 + 1000,
        skipOverlap: false,
      };
      const [one, two] = await Promise.all([
        store.fireSchedule({ ...fire, job: tickJob('nightly', T0 + 1000) }),
        store.fireSchedule({ ...fire, job: tickJob('nightly', T0 + 1000) }),
      ]);
      assert.equal([one, two].filter((result) => result?.fired === true).length, 1);
      const winner = (one?.fired === true ? one : two) as FireResult;
      const job = created(winner);
      assert.equal(job.schedule, 'nightly');
      assert.equal(job.idempotencyKey, `schedule:nightly:${new Date(T0 + 1000).toISOString()}`);
      assert.equal(job.status, 'queued');
      const after = fired(winner).schedule;
      assert.equal(after.nextRunAt, T0 + 2000);
      assert.equal(after.lastRunAt, T0 + 1000);
      assert.equal(after.lastJobId, job.id);
      const listed = await store.list({ limit: 10, schedule: 'nightly' });
      assert.deepEqual(
        listed.jobs.map((j) => j.id),
        [job.id],
      );
      // A schedule changed since it was read (replaced, paused) is not fired from the old reading.
      await store.putSchedule(definition({ nextRunAt: T0 + 2000, updatedAt: T0 + 1 }));
      const stale = await store.fireSchedule({
        ...fire,
        expected: { nextRunAt: T0 + 2000, updatedAt: T0 },
        nextRunAt: T0 + 3000,
        runAt: T0 + 2000,
        job: tickJob('nightly', T0 + 2000),
      });
      assert.deepEqual(stale, { fired: false });
      assert.deepEqual(await store.fireSchedule({ ...fire, name: 'missing', job: null }), { fired: false });
      assert.equal((await store.list({ limit: 10, schedule: 'nightly' })).jobs.length, 1);
    });

    it('holds a tick back while the last job is unfinished (overlap: skip), and fires a trigger without a check', async () => {
      const { store } = await openStore();
      await store.putSchedule(definition({ overlap: 'skip' }));
      const tick = (at: number, job: NewJob | null, updatedAt = T0) =>
        store.fireSchedule({
          name: 'nightly',
          expected: { nextRunAt: at, updatedAt },
          nextRunAt: at + 1000,
          runAt: at,
          job,
          skipOverlap: true,
        });
      const first = created(await tick(T0 + 1000, tickJob('nightly', T0 + 1000)));
      const held = fired(await tick(T0 + 2000, tickJob('nightly', T0 + 2000)));
      assert.equal(held.overlap, true);
      assert.equal(held.insert, null);
      assert.equal(held.schedule.nextRunAt, T0 + 3000, 'the tick is spent');
      assert.equal(held.schedule.lastJobId, first.id);
      // A tick without a job (its task type is not registered) only moves nextRunAt.
      const none = fired(await tick(T0 + 3000, null));
      assert.equal(none.overlap, true);
      changes(await store.cancel(first.id));
      const second = created(await tick(T0 + 4000, tickJob('nightly', T0 + 4000)));
      assert.notEqual(second.id, first.id);
      // A trigger: one job now, nextRunAt untouched, lastJobId and lastRunAt recorded.
      const triggered = await store.fireSchedule({
        name: 'nightly',
        expected: null,
        nextRunAt: null,
        runAt: T0 + 4500,
        job: newJob({ schedule: 'nightly' }),
        skipOverlap: false,
      });
      const third = created(triggered);
      assert.equal(fired(triggered).schedule.nextRunAt, T0 + 5000);
      assert.equal(fired(triggered).schedule.lastJobId, third.id);
      assert.equal(fired(triggered).schedule.lastRunAt, T0 + 4500);
      const listed = await store.list({ limit: 10, schedule: 'nightly', statuses: ['queued'] });
      assert.deepEqual(
        listed.jobs.map((j) => j.id),
        [third.id, second.id],
      );
      assert.deepEqual((await store.list({ limit: 10, schedule: 'other' })).jobs, []);
    });

    it('spends a tick whose job does not fit (queue full) without recording a job', async () => {
      const { store } = await openStore(1);
      await insertOne(store);
      await store.putSchedule(definition());
      const result = fired(await fireFirstTick(store));
      assert.equal(result.insert?.ok, false);
      assert.equal(result.schedule.nextRunAt, T0 + 2000);
      assert.equal(result.schedule.lastJobId, null);
      assert.deepEqual((await store.list({ limit: 10, schedule: 'nightly' })).jobs, []);
    });
  });
}
