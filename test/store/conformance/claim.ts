import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type ClaimRequest } from '../../../src/store/store.js';
import {
  T0,
  newJob,
  insertOk,
  insertOne,
  mustGet,
  claimRequest,
  claimJobs,
  claimOne,
  completed,
  finishOne,
  assertCountsExact,
} from '../../support/store-fixtures.js';
import type { OpenStore } from './context.js';

/** Claim: the order jobs are handed out in, task limits and priority aging. */
export function claimFacet(openStore: OpenStore): void {
  describe('claim', () => {
    it('takes the highest priority first, then the earliest ready, one job per batch', async () => {
      const { store, clock } = await openStore();
      clock.set(T0 + 1);
      const a = await insertOne(store, { priority: 5 });
      clock.set(T0 + 2);
      const b = await insertOne(store, { priority: 5 });
      clock.set(T0 + 3);
      const c = await insertOne(store, { priority: 9 });
      clock.set(T0 + 4);
      const d = await insertOne(store, { priority: 0 });
      clock.set(T0 + 5);
      const e = await insertOne(store, { priority: 9 });
      clock.set(T0 + 10);
      const claimed = await store.claim(claimRequest(10));
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [[c.id], [e.id], [a.id], [b.id], [d.id]],
      );
    });

    it('claims at most `batches` batches', async () => {
      const { store } = await openStore();
      await insertOk(store, [newJob(), newJob(), newJob()]);
      assert.deepEqual(await store.claim(claimRequest(0)), []);
      assert.equal((await claimJobs(store, 2)).length, 2);
      assert.equal((await claimJobs(store, 2)).length, 1);
      assert.deepEqual(await store.claim(claimRequest(2)), []);
      await assertCountsExact(store);
    });

    it('makes a claimed job running under the lease, with its payload as JSON text', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { payload: { text: 'héllo', list: [1, null] } });
      clock.set(T0 + 7);
      const claimed = await claimOne(store, 'w', 500);
      assert.equal(claimed.id, job.id);
      assert.equal(claimed.status, 'running');
      assert.equal(claimed.attempts, 1);
      assert.equal(claimed.startedAt, T0 + 7);
      assert.equal(claimed.runAt, null);
      assert.equal(claimed.progress, null);
      assert.equal(claimed.readyAt, T0);
      assert.deepEqual(JSON.parse(claimed.payloadText), { text: 'héllo', list: [1, null] });
      assert.deepEqual(claimed.parents, []);
      assert.equal('payload' in claimed, false);
      const stored = await mustGet(store, job.id);
      assert.equal(stored.status, 'running');
      assert.equal(stored.attempts, 1);
      assert.equal(stored.startedAt, T0 + 7);
      // The lease is the owner's until T0 + 507 by the store clock.
      clock.set(T0 + 507);
      assert.deepEqual(await store.expiredLeases(10), []);
      clock.set(T0 + 508);
      assert.deepEqual(
        (await store.expiredLeases(10)).map((e) => [e.id, e.owner, e.attempt]),
        [[job.id, 'w', 1]],
      );
      await assertCountsExact(store);
    });

    it('claims a delayed job only once it is due by the store clock', async () => {
      const { store, clock } = await openStore();
      const job = await insertOne(store, { runAt: T0 + 1000 });
      assert.equal(await store.nextDueAt(), T0 + 1000);
      clock.set(T0 + 999);
      assert.deepEqual(await store.claim(claimRequest(5)), []);
      clock.set(T0 + 1000);
      const [claimed] = await claimJobs(store, 5);
      assert.equal(claimed?.id, job.id);
      assert.equal(await store.nextDueAt(), null);
      await assertCountsExact(store);
    });

    it('promotes due jobs in runAt order, behind jobs already queued', async () => {
      const { store, clock } = await openStore();
      const queued = await insertOne(store);
      const late = await insertOne(store, { runAt: T0 + 200 });
      const early = await insertOne(store, { runAt: T0 + 100 });
      clock.set(T0 + 300);
      const claimed = await claimJobs(store, 3);
      assert.deepEqual(
        claimed.map((j) => j.id),
        [queued.id, early.id, late.id],
      );
    });

    it('keeps a due job that a claim promoted but did not take ready, the same in every read', async () => {
      const { store, clock } = await openStore();
      const first = await insertOne(store);
      const delayed = await insertOne(store, { runAt: T0 + 100 });
      clock.set(T0 + 300);
      assert.equal((await claimOne(store)).id, first.id);
      const promoted = await mustGet(store, delayed.id);
      assert.equal(promoted.status, 'queued');
      assert.equal(promoted.runAt, null);
      assert.equal((await store.counts()).oldestQueuedReadyAt, promoted.readyAt);
      await assertCountsExact(store);
      const claimed = await claimOne(store);
      assert.equal(claimed.id, delayed.id);
      assert.equal(claimed.readyAt, promoted.readyAt);
    });

    it('puts a new job of higher priority before an older backlog', async () => {
      const { store, clock } = await openStore();
      await insertOk(store, [newJob({ priority: 1 }), newJob({ priority: 1 })]);
      clock.advance(100);
      const urgent = await insertOne(store, { priority: 8 });
      assert.equal((await claimOne(store)).id, urgent.id);
    });

    it('hands the completed dependencies to the dependent in dependsOn order', async () => {
      const { store } = await openStore();
      const p1 = await insertOne(store, { type: 'test.one' });
      const p2 = await insertOne(store, { type: 'test.two' });
      const child = await insertOne(store, { dependsOn: [p2.id, p1.id] });
      const [c1, c2] = await claimJobs(store, 2);
      assert.ok(c1 && c2);
      assert.ok(await finishOne(store, c1, completed({ v: 1 })));
      assert.ok(await finishOne(store, c2, completed([2])));
      const claimed = await claimOne(store);
      assert.equal(claimed.id, child.id);
      assert.deepEqual(claimed.parents, [
        { id: p2.id, type: 'test.two', result: [2] },
        { id: p1.id, type: 'test.one', result: { v: 1 } },
      ]);
    });

    it('hands a job nothing while none is ready, and every ready job exactly once', async () => {
      const { store } = await openStore();
      assert.deepEqual(await store.claim(claimRequest(4)), []);
      const jobs = await insertOk(
        store,
        Array.from({ length: 25 }, () => newJob()),
      );
      const seen = new Set<string>();
      for (;;) {
        const claimed = await claimJobs(store, 3);
        if (claimed.length === 0) break;
        for (const job of claimed) {
          assert.equal(seen.has(job.id), false, `${job.id} handed out twice`);
          seen.add(job.id);
        }
      }
      assert.deepEqual([...seen].sort(), jobs.map((j) => j.id).sort());
    });
  });

  describe('claim: task limits', () => {
    const held = { concurrency: 1, rateLimit: null };
    const limited = (allowance: number, extra: Partial<ClaimRequest> = {}): Partial<ClaimRequest> => ({
      allowance: new Map([['test.held', allowance]]),
      limits: new Map([['test.held', held]]),
      types: ['test.held', 'test.echo', 'test.other'],
      ...extra,
    });

    it('passes over a held type to the next-best job of another, which stays first of its type', async () => {
      const { store, clock } = await openStore();
      const heldJobs: string[] = [];
      for (let i = 0; i < 5; i++) {
        clock.set(T0 + i);
        heldJobs.push((await insertOne(store, { type: 'test.held', priority: 9 })).id);
      }
      clock.set(T0 + 10);
      const echo = await insertOne(store, { type: 'test.echo', priority: 5 });
      clock.set(T0 + 11);
      const other = await insertOne(store, { type: 'test.other', priority: 1 });
      clock.set(T0 + 20);
      const passed: string[] = [];
      const first = await store.claim(claimRequest(5, limited(0, { passedOver: (type) => passed.push(type) })));
      assert.deepEqual(
        first.map((batch) => batch.map((j) => j.id)),
        [[echo.id], [other.id]],
      );
      assert.ok(passed.includes('test.held'), 'the held type was passed over');
      const next = await store.claim(claimRequest(5, limited(1)));
      assert.deepEqual(
        next.map((batch) => batch.map((j) => j.id)),
        [[heldJobs[0]]],
        'one place frees one job: the first of its type',
      );
      assert.deepEqual(
        (await store.claim(claimRequest(5))).map((batch) => batch.map((j) => j.id)),
        heldJobs.slice(1).map((id) => [id]),
        'without limits the rest follow in order',
      );
    });

    it('never puts a limited type in a micro-batch', async () => {
      const { store } = await openStore();
      await insertOk(store, [
        newJob({ type: 'test.held' }),
        newJob({ type: 'test.held' }),
        newJob({ type: 'test.echo' }),
      ]);
      const micro = {
        costs: new Map([
          ['test.held', 0.01],
          ['test.echo', 0.01],
        ]),
        budgetMs: 2,
        maxJobs: 10,
        solo: new Set<string>(),
      };
      const claimed = await store.claim(
        claimRequest(3, {
          micro,
          ...limited(2, { limits: new Map([['test.held', { concurrency: 5, rateLimit: null }]]) }),
        }),
      );
      const heldBatches = claimed.filter((batch) => batch.some((j) => j.type === 'test.held'));
      assert.equal(heldBatches.length, 2);
      for (const batch of heldBatches) assert.equal(batch.length, 1);
    });
  });

  describe('claim: group limits', () => {
    const held = { concurrency: 1, rateLimit: null };
    const groupLimited = (allowance: number, extra: Partial<ClaimRequest> = {}): Partial<ClaimRequest> => ({
      groupAllowance: new Map([['tenant-held', allowance]]),
      groupLimits: new Map([['tenant-held', held]]),
      types: ['test.held', 'test.echo', 'test.other'],
      ...extra,
    });

    it('passes over a held group to the next job of another, and its jobs stay first of the group', async () => {
      const { store, clock } = await openStore();
      const heldJobs: string[] = [];
      for (let i = 0; i < 5; i++) {
        clock.set(T0 + i);
        heldJobs.push((await insertOne(store, { group: 'tenant-held' })).id);
      }
      clock.set(T0 + 10);
      const free = await insertOne(store, { group: 'tenant-free' });
      clock.set(T0 + 11);
      const ungrouped = await insertOne(store, { type: 'test.other' });
      clock.set(T0 + 20);
      const passed: string[] = [];
      const first = await store.claim(
        claimRequest(5, groupLimited(0, { groupPassedOver: (group) => passed.push(group) })),
      );
      assert.deepEqual(first.map((batch) => batch.map((j) => j.id)).sort(), [[free.id], [ungrouped.id]].sort());
      assert.deepEqual([...new Set(passed)], ['tenant-held'], 'the held group was passed over');
      const next = await store.claim(claimRequest(5, groupLimited(1)));
      assert.deepEqual(
        next.map((batch) => batch.map((j) => j.id)),
        [[heldJobs[0]]],
        'one place frees one job: the first of its group',
      );
      assert.deepEqual(
        (await store.claim(claimRequest(5))).map((batch) => batch.map((j) => j.id)),
        heldJobs.slice(1).map((id) => [id]),
        'without limits the rest follow in order',
      );
    });

    it('passes over a held backlog longer than the first jobs in line, ahead of and among the others', async () => {
      const { store, clock } = await openStore();
      // Each backlog turns with the held one's (fair share): the further one runs ahead, the
      // more held jobs stand before its next, ever more than a claim reads in line.
      clock.set(T0);
      await insertOk(
        store,
        Array.from({ length: 150 }, () => newJob({ group: 'tenant-held', priority: 9 })),
      );
      await insertOk(
        store,
        Array.from({ length: 150 }, () => newJob({ group: 'tenant-held', priority: 5 })),
      );
      clock.set(T0 + 1);
      const ungrouped = await insertOk(
        store,
        Array.from({ length: 120 }, () => newJob({ priority: 9 })),
      );
      const free = await insertOk(
        store,
        Array.from({ length: 120 }, () => newJob({ group: 'tenant-free', priority: 5 })),
      );
      clock.set(T0 + 2);
      const taken: string[] = [];
      for (let round = 0; round < 200 && taken.length < 240; round++) {
        const claimed = (await store.claim(claimRequest(2, groupLimited(0)))).flat();
        assert.ok(claimed.length > 0, `claim ${round} found the jobs not held (${taken.length} taken)`);
        for (const job of claimed) assert.notEqual(job.group, 'tenant-held', 'a held job was claimed');
        taken.push(...claimed.map((job) => job.id));
      }
      assert.deepEqual(
        taken,
        [...ungrouped, ...free].map((job) => job.id),
        'the others in their order: priority 9 first',
      );
      assert.deepEqual(await store.claim(claimRequest(2, groupLimited(0))), [], 'only held jobs are left');
      await assertCountsExact(store);
    });

    it("takes a job only when both its type's and its group's limits allow it", async () => {
      const { store, clock } = await openStore();
      const jobs: string[] = [];
      for (let i = 0; i < 3; i++) {
        clock.set(T0 + i);
        jobs.push((await insertOne(store, { type: 'test.held', group: 'tenant-held' })).id);
      }
      clock.set(T0 + 5);
      const other = await insertOne(store, { type: 'test.held', group: 'tenant-free' });
      clock.set(T0 + 10);
      // The group allows two, the type one: one job of the type, the group's first.
      const byType = await store.claim(
        claimRequest(5, {
          ...groupLimited(2),
          allowance: new Map([['test.held', 1]]),
          limits: new Map([['test.held', held]]),
        }),
      );
      assert.deepEqual(
        byType.map((batch) => batch.map((j) => j.id)),
        [[jobs[0]]],
      );
      // The type allows five, the group one: the group's next, then the other group's job.
      const byGroup = await store.claim(
        claimRequest(5, {
          ...groupLimited(1, { groupLimits: new Map([['tenant-held', { concurrency: 2, rateLimit: null }]]) }),
          allowance: new Map([['test.held', 5]]),
          limits: new Map([['test.held', { concurrency: 5, rateLimit: null }]]),
        }),
      );
      assert.deepEqual(byGroup.map((batch) => batch.map((j) => j.id)).sort(), [[jobs[1]], [other.id]].sort());
      await assertCountsExact(store);
    });

    it("never puts a limited group's job in a micro-batch", async () => {
      const { store } = await openStore();
      await insertOk(store, [
        newJob({ group: 'tenant-held' }),
        newJob({ group: 'tenant-held' }),
        newJob({ group: 'tenant-free' }),
        newJob({ group: 'tenant-free' }),
      ]);
      const micro = { costs: new Map([['test.echo', 0.01]]), budgetMs: 2, maxJobs: 10, solo: new Set<string>() };
      const claimed = await store.claim(
        claimRequest(4, {
          micro,
          ...groupLimited(2, { groupLimits: new Map([['tenant-held', { concurrency: 5, rateLimit: null }]]) }),
        }),
      );
      const heldBatches = claimed.filter((batch) => batch.some((j) => j.group === 'tenant-held'));
      assert.equal(heldBatches.length, 2);
      for (const batch of heldBatches) assert.equal(batch.length, 1);
      assert.equal(claimed.flat().length, 4);
    });

    it('ages under group limits too, passing over a held group', async () => {
      const { store, clock } = await openStore(10_000, 1000);
      clock.set(T0);
      const old = await insertOne(store, { priority: 0, group: 'tenant-free' });
      clock.set(T0 + 1);
      await insertOne(store, { priority: 9, group: 'tenant-held' });
      clock.set(T0 + 9500);
      const fresh = await insertOne(store, { priority: 9 });
      clock.set(T0 + 10_000);
      const claimed = await store.claim(claimRequest(3, groupLimited(0)));
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [[old.id], [fresh.id]],
      );
    });
  });

  describe('claim: priority aging', () => {
    it('raises a waiting job one level per period, so an old low-priority job goes before newer high ones', async () => {
      const { store, clock } = await openStore(10_000, 1000);
      clock.set(T0);
      const old = await insertOne(store, { priority: 0 });
      clock.set(T0 + 5000);
      const mid = await insertOne(store, { priority: 4 });
      clock.set(T0 + 8500);
      const high = await insertOne(store, { priority: 9 });
      // At T0 + 9000: old is 0 + 9 = 9 (ready first), high 9, mid 4 + 4 = 8.
      clock.set(T0 + 9000);
      assert.deepEqual(
        (await store.claim(claimRequest(3))).map((batch) => batch.map((j) => j.id)),
        [[old.id], [high.id], [mid.id]],
      );
      assert.equal((await mustGet(store, old.id)).priority, 0, 'priority as submitted is unchanged');
    });

    it('keeps plain priority order before a job has waited a full period', async () => {
      const { store, clock } = await openStore(10_000, 60_000);
      clock.set(T0);
      const low = await insertOne(store, { priority: 1 });
      clock.set(T0 + 1);
      const high = await insertOne(store, { priority: 2 });
      clock.set(T0 + 59_000);
      assert.deepEqual(
        (await store.claim(claimRequest(2))).map((batch) => batch.map((j) => j.id)),
        [[high.id], [low.id]],
      );
    });

    it('ages under task limits too, passing over a held type', async () => {
      const { store, clock } = await openStore(10_000, 1000);
      clock.set(T0);
      const old = await insertOne(store, { type: 'test.echo', priority: 0 });
      clock.set(T0 + 1);
      await insertOne(store, { type: 'test.held', priority: 9 });
      clock.set(T0 + 9500);
      const fresh = await insertOne(store, { type: 'test.echo', priority: 9 });
      clock.set(T0 + 10_000);
      const claimed = await store.claim(
        claimRequest(3, {
          allowance: new Map([['test.held', 0]]),
          limits: new Map([['test.held', { concurrency: 1, rateLimit: null }]]),
          types: ['test.held', 'test.echo'],
        }),
      );
      assert.deepEqual(
        claimed.map((batch) => batch.map((j) => j.id)),
        [[old.id], [fresh.id]],
      );
    });
  });
}
