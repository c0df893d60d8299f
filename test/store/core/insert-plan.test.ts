import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { JobRow } from '../../../src/store/core/rows.js';
import { jobRow as row } from '../../support/job-rows.js';
import type { JobStatus, NewJob } from '../../../src/contract/job.js';
import { canonicalJson } from '../../../src/store/core/canonical-json.js';
import {
  createdJob,
  dependencyState,
  exceedsCapacity,
  initialStatus,
  type InsertPlan,
  planInsert,
  type PlanItem,
  type PlanLookups,
} from '../../../src/store/core/insert-plan.js';

function item(id: string, fields: Partial<PlanItem> = {}): PlanItem {
  return { id, type: 'resize', idempotencyKey: null, dependsOn: [], ...fields };
}

interface Store {
  byKey?: Record<string, JobRow>;
  live?: Record<string, JobRow>;
  done?: Record<string, JobRow>;
  status?: Record<string, JobStatus>;
  payloads?: unknown[];
}

/** Plans synchronously, as the SQLite store does; answers the plan and the done-by-dedupe questions asked. */
function plan(items: PlanItem[], store: Store = {}): { plan: InsertPlan; asked: string[] } {
  const lookups: PlanLookups = {
    byKey: (key) => store.byKey?.[key],
    liveByDedupe: (key) => store.live?.[key],
    statusOf: (id) => store.status?.[id],
    canonicalPayload: (index) => canonicalJson(store.payloads?.[index] ?? { w: 1 }),
  };
  const asked: string[] = [];
  const planning = planInsert(items, lookups);
  let step = planning.next();
  while (step.done !== true) {
    asked.push(`${step.value.dedupeKey}/${step.value.reuseMs}`);
    step = planning.next(store.done?.[step.value.dedupeKey]);
  }
  return { plan: step.value, asked };
}

function ok(answer: InsertPlan): Extract<InsertPlan, { ok: true }> {
  assert.equal(answer.ok, true);
  return answer as Extract<InsertPlan, { ok: true }>;
}

describe('planInsert', () => {
  it('creates jobs without dependencies as ready, and counts them as pending', () => {
    const answer = ok(plan([item('a'), item('b')]).plan);
    assert.deepEqual(answer.created, [
      { index: 0, decided: 'ready', error: null, dependsOn: [] },
      { index: 1, decided: 'ready', error: null, dependsOn: [] },
    ]);
    assert.equal(answer.newPending, 2);
  });

  it('replays a stored job of the same idempotency key, type and payload', () => {
    const stored = row('old', { idempotency_key: 'k', payload: '{ "w": 1 }' });
    const answer = ok(plan([item('a', { idempotencyKey: 'k' })], { byKey: { k: stored } }).plan);
    assert.deepEqual(answer.outcomes, [{ replay: stored }]);
    assert.deepEqual(answer.created, []);
    assert.equal(answer.newPending, 0);
  });

  it('refuses a key held by a job of another type or payload as a conflict', () => {
    const stored = row('old', { idempotency_key: 'k', payload: '{"w":2}' });
    assert.deepEqual(plan([item('x'), item('a', { idempotencyKey: 'k' })], { byKey: { k: stored } }).plan, {
      ok: false,
      reason: 'idempotency_conflict',
      index: 1,
      existingId: 'old',
    });
    const otherType = row('old', { idempotency_key: 'k', type: 'crop' });
    assert.equal(plan([item('a', { idempotencyKey: 'k' })], { byKey: { k: otherType } }).plan.ok, false);
  });

  it('answers a key repeated in one batch with the first item, or refuses it when the payloads differ', () => {
    const same = ok(plan([item('a', { idempotencyKey: 'k' }), item('b', { idempotencyKey: 'k' })]).plan);
    assert.deepEqual(same.outcomes[1], { alias: 'a' });
    assert.equal(same.created.length, 1);
    const differ = plan([item('a', { idempotencyKey: 'k' }), item('b', { idempotencyKey: 'k' })], {
      payloads: [{ w: 1 }, { w: 2 }],
    }).plan;
    assert.deepEqual(differ, { ok: false, reason: 'idempotency_conflict', index: 1, existingId: 'a' });
  });

  it('answers a dedupe key with the unfinished job, else a recent result, else creates', () => {
    const live = row('live');
    const inflight = plan([item('a', { dedupeKey: 'd', reuseMs: 60_000 })], { live: { d: live } });
    assert.deepEqual(ok(inflight.plan).outcomes, [{ replay: live, dedupe: 'inflight' }]);
    assert.deepEqual(inflight.asked, [], 'an unfinished job answers without asking for results');

    const done = row('done', { status: 'completed' });
    const reused = plan([item('a', { dedupeKey: 'd', reuseMs: 60_000 })], { done: { d: done } });
    assert.deepEqual(ok(reused.plan).outcomes, [{ replay: done, dedupe: 'result' }]);
    assert.deepEqual(reused.asked, ['d/60000']);

    const noReuse = plan([item('a', { dedupeKey: 'd', reuseMs: null })], { done: { d: done } });
    assert.equal(ok(noReuse.plan).created.length, 1);
    assert.deepEqual(noReuse.asked, [], 'without a reuse window no result is looked for');
  });

  it('answers a dedupe key repeated in one batch with the first item, in flight', () => {
    const answer = ok(plan([item('a', { dedupeKey: 'd' }), item('b', { dedupeKey: 'd' })]).plan);
    assert.deepEqual(answer.outcomes[1], { alias: 'a', dedupe: 'inflight' });
    assert.equal(answer.newPending, 1);
  });

  it('decides a dependent from its parents: in the batch, stored, or replayed', () => {
    const answer = ok(
      plan(
        [
          item('a'),
          item('b', { dependsOn: ['a'] }),
          item('c', { dependsOn: ['done'] }),
          item('r', { idempotencyKey: 'k' }),
          item('d', { dependsOn: ['r'] }),
        ],
        { status: { done: 'completed' }, byKey: { k: row('old', { status: 'failed' }) } },
      ).plan,
    );
    const decided = answer.created.map((created) => [created.index, created.decided, created.dependsOn]);
    assert.deepEqual(decided, [
      [0, 'ready', []],
      [1, 'waiting', ['a']],
      [2, 'ready', ['done']],
      [4, 'failed', ['old']],
    ]);
    assert.deepEqual(answer.created[3]?.error, {
      code: 'dependency_failed',
      message: 'dependency old failed',
      attempt: 0,
    });
    assert.equal(answer.newPending, 3, 'a job failed at its insert is not pending');
  });

  it('refuses a dependency that does not exist', () => {
    assert.deepEqual(plan([item('a'), item('b', { dependsOn: ['nowhere'] })]).plan, {
      ok: false,
      reason: 'unknown_dependency',
      index: 1,
      dependency: 'nowhere',
    });
  });
});

describe('dependencyState', () => {
  const statuses: Record<string, JobStatus> = { c: 'completed', q: 'queued', f: 'failed', x: 'cancelled' };
  const of = (id: string) => statuses[id];

  it('is ready when every dependency completed, waiting while one has not', () => {
    assert.deepEqual(dependencyState([], of), { decided: 'ready', error: null });
    assert.deepEqual(dependencyState(['c'], of), { decided: 'ready', error: null });
    assert.deepEqual(dependencyState(['c', 'q'], of), { decided: 'waiting', error: null });
  });

  it('fails on the first dependency that failed or was cancelled', () => {
    assert.deepEqual(dependencyState(['q', 'x', 'f'], of), {
      decided: 'failed',
      error: { code: 'dependency_failed', message: 'dependency x was cancelled', attempt: 0 },
    });
  });

  it('names a dependency that does not exist', () => {
    assert.deepEqual(dependencyState(['c', 'gone', 'f'], of), { unknown: 'gone' });
  });
});

describe('initialStatus', () => {
  it('makes a ready job with a future runAt scheduled, and keeps waiting and failed', () => {
    assert.equal(initialStatus('ready', null, 1000), 'queued');
    assert.equal(initialStatus('ready', 1000, 1000), 'queued');
    assert.equal(initialStatus('ready', 1001, 1000), 'scheduled');
    assert.equal(initialStatus('waiting', 1001, 1000), 'waiting');
    assert.equal(initialStatus('failed', null, 1000), 'failed');
  });
});

describe('exceedsCapacity', () => {
  it('refuses only new pending jobs that do not fit', () => {
    assert.equal(exceedsCapacity(10, 0, 10), false);
    assert.equal(exceedsCapacity(9, 1, 10), false);
    assert.equal(exceedsCapacity(9, 2, 10), true);
    assert.equal(exceedsCapacity(12, 0, 10), false);
  });
});

describe('createdJob', () => {
  it('builds the job from its NewJob and what the store decided', () => {
    const source: NewJob = {
      id: 'a',
      type: 'resize',
      priority: 7,
      payload: { w: 1 },
      maxAttempts: 3,
      timeoutMs: 1000,
      backoff: { initialMs: 100, factor: 2, maxMs: 1000, jitter: 'full' },
      idempotencyKey: 'k',
      dependsOn: ['r'],
      metadata: { team: 'x' },
      runAt: 5000,
      createdAt: 1000,
    };
    const job = createdJob(source, {
      status: 'waiting',
      error: null,
      dependsOn: ['old'],
      runAt: 5000,
      readyAt: null,
      finishedAt: null,
    });
    assert.deepEqual(job, {
      id: 'a',
      type: 'resize',
      status: 'waiting',
      priority: 7,
      payload: { w: 1 },
      result: null,
      error: null,
      attempts: 0,
      maxAttempts: 3,
      snoozes: 0,
      interruptions: 0,
      timeoutMs: 1000,
      backoff: { initialMs: 100, factor: 2, maxMs: 1000, jitter: 'full' },
      progress: null,
      idempotencyKey: 'k',
      dependsOn: ['old'],
      metadata: { team: 'x' },
      group: null,
      callback: null,
      batch: null,
      trace: null,
      runAt: 5000,
      createdAt: 1000,
      startedAt: null,
      finishedAt: null,
      readyAt: null,
      schedule: null,
    });
  });
});
