import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { JobWire } from '../../../../src/store/core/rows.js';
import { type IndexEntry, ReadyIndex } from '../../../../src/store/sqlite/ready-index/ready-index.js';

function wire(id: string, payloadText = '{}'): JobWire {
  return {
    id,
    type: 'test.echo',
    status: 'queued',
    priority: 5,
    error: null,
    attempts: 0,
    maxAttempts: 3,
    snoozes: 0,
    interruptions: 0,
    timeoutMs: 1000,
    backoff: { initialMs: 100, factor: 2, maxMs: 10_000, jitter: 'none' },
    progress: null,
    idempotencyKey: null,
    dependsOn: [],
    metadata: {},
    group: null,
    callback: null,
    runAt: null,
    createdAt: 0,
    startedAt: null,
    finishedAt: null,
    readyAt: 0,
    schedule: null,
    batch: null,
    trace: null,
    payloadText,
    resultText: null,
  };
}

/** An entry without its place in line (a counter of the index's own). */
function withoutSeq(entry: IndexEntry): Omit<IndexEntry, 'seq' | 'round'> {
  const { seq: _seq, round: _round, ...rest } = entry;
  return rest;
}

/** Takes every queued job, best first. */
function drain(index: ReadyIndex): string[] {
  const ids: string[] = [];
  for (let taken = index.take(); taken !== undefined; taken = index.take()) ids.push(taken.entry.id);
  return ids;
}

describe('ReadyIndex', () => {
  describe('order', () => {
    it('hands out the highest priority first, then in the order jobs became ready', () => {
      const index = new ReadyIndex();
      index.addQueued('a', 't', 5, null, 1, null);
      index.addQueued('b', 't', 9, null, 2, null);
      index.addQueued('c', 't', 5, null, 3, null);
      index.addQueued('d', 't', 0, null, 4, null);
      index.addQueued('e', 't', 9, null, 5, null);
      assert.equal(index.queued, 5);
      assert.equal(index.peek()?.id, 'b');
      assert.equal(index.peek()?.id, 'b', 'peek takes nothing');
      assert.deepEqual(drain(index), ['b', 'e', 'a', 'c', 'd']);
      assert.equal(index.queued, 0);
      assert.equal(index.peek(), undefined);
      assert.equal(index.take(), undefined);
    });

    it('answers the entry with its type, priority and ready time', () => {
      const index = new ReadyIndex();
      index.addQueued('a', 'test.type', 7, null, 42, null);
      const taken = index.take();
      assert.deepEqual(taken === undefined ? undefined : { ...taken, entry: withoutSeq(taken.entry) }, {
        entry: { id: 'a', type: 'test.type', priority: 7, group: null, readyAt: 42 },
        record: null,
      });
    });

    it('knows when the oldest queued job became ready, across priorities', () => {
      const index = new ReadyIndex();
      assert.equal(index.oldestQueuedReadyAt(), null);
      index.addQueued('a', 't', 9, null, 30, null);
      index.addQueued('b', 't', 1, null, 10, null);
      index.addQueued('c', 't', 5, null, 20, null);
      assert.equal(index.oldestQueuedReadyAt(), 10);
      index.remove('b');
      assert.equal(index.oldestQueuedReadyAt(), 20);
      drain(index);
      assert.equal(index.oldestQueuedReadyAt(), null);
    });
  });

  describe('lazy deletion', () => {
    it('skips jobs removed after they were queued', () => {
      const index = new ReadyIndex();
      for (const id of ['a', 'b', 'c', 'd']) index.addQueued(id, 't', 5, null, 1, null);
      index.remove('a');
      index.remove('c');
      index.remove('missing');
      assert.equal(index.queued, 2);
      assert.equal(index.peek()?.id, 'b');
      assert.deepEqual(drain(index), ['b', 'd']);
    });

    it('puts a job queued again at its new place, and hands it out once', () => {
      const index = new ReadyIndex();
      index.addQueued('a', 't', 5, null, 1, null);
      index.addQueued('b', 't', 5, null, 2, null);
      // Cancelled and retried: ready again later, behind b.
      index.remove('a');
      index.addQueued('a', 't', 5, null, 3, null);
      assert.equal(index.queued, 2);
      assert.deepEqual(drain(index), ['b', 'a']);
    });

    it('moves a job queued again at another priority', () => {
      const index = new ReadyIndex();
      index.addQueued('a', 't', 2, null, 1, null);
      index.addQueued('b', 't', 5, null, 2, null);
      index.addQueued('a', 't', 9, null, 3, null);
      assert.deepEqual(drain(index), ['a', 'b']);
    });

    it('stays right after removing far more entries than it holds (compaction)', () => {
      const index = new ReadyIndex();
      for (let i = 0; i < 5000; i++) index.addQueued(`q${String(i).padStart(5, '0')}`, 't', i % 3, null, i, null);
      const kept = new Set<string>();
      for (let i = 0; i < 5000; i++) {
        const id = `q${String(i).padStart(5, '0')}`;
        if (i % 500 === 7) kept.add(id);
        else index.remove(id);
      }
      assert.equal(index.queued, kept.size);
      const expected = [...kept].sort((a, b) => {
        const pa = Number(a.slice(1)) % 3;
        const pb = Number(b.slice(1)) % 3;
        return pb - pa || Number(a.slice(1)) - Number(b.slice(1));
      });
      assert.deepEqual(drain(index), expected);
    });

    it('stays right after removing far more due jobs than it holds', () => {
      const index = new ReadyIndex();
      for (let i = 0; i < 5000; i++) index.addDue(`d${String(i).padStart(5, '0')}`, 't', 5, null, 1000 + i, null);
      for (let i = 0; i < 5000; i++) if (i !== 4321) index.remove(`d${String(i).padStart(5, '0')}`);
      assert.equal(index.nextDueAt(), 1000 + 4321);
      assert.deepEqual(index.promoteDue(10_000), [{ id: 'd04321', runAt: 1000 + 4321, priority: 5 }]);
      assert.equal(index.nextDueAt(), null);
    });
  });

  describe('due jobs', () => {
    it('promotes due jobs in runAt order (then id), behind jobs already queued, ready from the promotion', () => {
      const index = new ReadyIndex();
      index.addQueued('queued', 't', 5, null, 50, null);
      index.addDue('late', 't', 5, null, 200, null);
      index.addDue('early', 't', 5, null, 100, null);
      index.addDue('tie-b', 't', 5, null, 150, null);
      index.addDue('tie-a', 't', 5, null, 150, null);
      index.addDue('future', 't', 5, null, 1000, null);
      assert.equal(index.nextDueAt(), 100);
      assert.deepEqual(index.promoteDue(99), []);
      assert.deepEqual(index.promoteDue(300), [
        { id: 'early', runAt: 100, priority: 5 },
        { id: 'tie-a', runAt: 150, priority: 5 },
        { id: 'tie-b', runAt: 150, priority: 5 },
        { id: 'late', runAt: 200, priority: 5 },
      ]);
      assert.equal(index.nextDueAt(), 1000);
      assert.equal(index.queued, 5);
      assert.equal(index.oldestQueuedReadyAt(), 50);
      const taken = [];
      for (let t = index.take(); t !== undefined; t = index.take()) taken.push([t.entry.id, t.entry.readyAt]);
      assert.deepEqual(taken, [
        ['queued', 50],
        ['early', 300],
        ['tie-a', 300],
        ['tie-b', 300],
        ['late', 300],
      ]);
    });

    it('promotes a due job of higher priority ahead of a lower backlog', () => {
      const index = new ReadyIndex();
      index.addQueued('backlog', 't', 1, null, 0, null);
      index.addDue('urgent', 't', 9, null, 10, null);
      index.promoteDue(10);
      assert.deepEqual(drain(index), ['urgent', 'backlog']);
    });

    it('forgets a due job removed or moved before it was due', () => {
      const index = new ReadyIndex();
      index.addDue('cancelled', 't', 5, null, 100, null);
      index.addDue('moved', 't', 5, null, 150, null);
      index.addDue('queued-early', 't', 5, null, 120, null);
      index.remove('cancelled');
      index.addDue('moved', 't', 5, null, 500, null);
      index.addQueued('queued-early', 't', 5, null, 110, null);
      assert.equal(index.nextDueAt(), 500);
      assert.deepEqual(index.promoteDue(400), []);
      assert.deepEqual(index.promoteDue(500), [{ id: 'moved', runAt: 500, priority: 5 }]);
      assert.deepEqual(drain(index), ['queued-early', 'moved']);
    });

    it('takes a queued job out of line when it becomes due again (a retry)', () => {
      const index = new ReadyIndex();
      index.addQueued('a', 't', 5, null, 1, null);
      index.addQueued('b', 't', 5, null, 2, null);
      index.addDue('a', 't', 5, null, 100, null);
      assert.equal(index.queued, 1);
      assert.deepEqual(drain(index), ['b']);
      index.promoteDue(100);
      assert.deepEqual(drain(index), ['a']);
    });
  });

  describe('rebuild', () => {
    it('replaces everything with the snapshot, leaving out the jobs this process runs', () => {
      const index = new ReadyIndex();
      index.addQueued('stale', 't', 9, null, 0, wire('stale'));
      index.addDue('stale-due', 't', 5, null, 5, null);
      index.rebuild(
        {
          queued: [
            { id: 'a', type: 't', priority: 5, group: null, readyAt: 1 },
            { id: 'mine', type: 't', priority: 9, group: null, readyAt: 2 },
            { id: 'b', type: 't', priority: 5, group: null, readyAt: 3 },
            { id: 'c', type: 't', priority: 7, group: null, readyAt: 4 },
          ],
          due: [
            { id: 'd', type: 't', priority: 5, group: null, runAt: 50 },
            { id: 'mine-due', type: 't', priority: 5, group: null, runAt: 10 },
          ],
        },
        (id) => id.startsWith('mine'),
      );
      assert.equal(index.queued, 3);
      assert.equal(index.nextDueAt(), 50);
      assert.equal(index.oldestQueuedReadyAt(), 1);
      const first = index.take();
      assert.deepEqual(first === undefined ? undefined : { ...first, entry: withoutSeq(first.entry) }, {
        entry: { id: 'c', type: 't', priority: 7, group: null, readyAt: 4 },
        record: null,
      });
      index.promoteDue(60);
      assert.deepEqual(drain(index), ['a', 'b', 'd']);
    });
  });

  describe('copies of jobs', () => {
    it('hands over the copy it kept with the job, once', () => {
      const index = new ReadyIndex();
      const record = wire('a', '{"n":1}');
      index.addQueued('a', 't', 5, null, 1, record);
      const taken = index.take();
      assert.equal(taken?.record, record);
      index.addQueued('a', 't', 5, null, 2, null);
      assert.equal(index.take()?.record, null);
    });

    it('keeps copies of due jobs through their promotion', () => {
      const index = new ReadyIndex();
      const record = wire('a');
      index.addDue('a', 't', 5, null, 10, record);
      index.promoteDue(10);
      assert.equal(index.take()?.record, record);
    });

    it('keeps copies only within its byte budget, and frees room when a copy leaves', () => {
      // Each copy below costs its payload text plus a fixed overhead of a few hundred bytes.
      const small = '{}';
      const big = `"${'x'.repeat(3000)}"`;
      const index = new ReadyIndex(2000);
      index.addQueued('s1', 't', 5, null, 1, wire('s1', small));
      index.addQueued('big', 't', 5, null, 2, wire('big', big));
      index.addQueued('s2', 't', 5, null, 3, wire('s2', small));
      const taken = new Map<string, JobWire | null>();
      for (let t = index.take(); t !== undefined; t = index.take()) taken.set(t.entry.id, t.record);
      assert.equal(taken.get('s1')?.id, 's1');
      assert.equal(taken.get('big'), null, 'a copy beyond the budget is not kept');
      assert.equal(taken.get('s2')?.id, 's2');

      const full = new ReadyIndex(1500);
      full.addQueued('a', 't', 5, null, 1, wire('a', small));
      full.addQueued('b', 't', 5, null, 2, wire('b', small));
      full.addQueued('c', 't', 5, null, 3, wire('c', small));
      assert.equal(full.remove('a')?.id, 'a', 'remove answers the copy');
      full.addQueued('d', 't', 5, null, 4, wire('d', small));
      const records = new Map<string, JobWire | null>();
      for (let t = full.take(); t !== undefined; t = full.take()) records.set(t.entry.id, t.record);
      assert.deepEqual(
        [...records].map(([id, record]) => [id, record?.id ?? null]),
        [
          ['b', 'b'],
          ['c', null],
          ['d', 'd'],
        ],
      );
    });

    it('keeps the copy of a claim given back past a full budget', () => {
      const index = new ReadyIndex(1000);
      index.addQueued('a', 't', 0, null, 1, wire('a'));
      index.addQueued('b', 't', 0, null, 2, wire('b'));
      const claimed = index.take();
      assert.equal(claimed?.record?.id, 'a');
      index.addQueued('c', 't', 0, null, 3, wire('c'));
      index.addQueued('a', 't', 0, null, 1, wire('a'), 'front');
      const records = new Map<string, JobWire | null>();
      for (let t = index.take(); t !== undefined; t = index.take()) records.set(t.entry.id, t.record);
      assert.deepEqual(
        [...records].map(([id, record]) => [id, record?.id ?? null]),
        [
          ['a', 'a'],
          ['b', null],
          ['c', 'c'],
        ],
      );
    });

    it('keeps the copy of a job that outranks every queued one past a full budget', () => {
      const index = new ReadyIndex(1000);
      index.addQueued('low-1', 't', 0, null, 1, wire('low-1'));
      index.addQueued('low-2', 't', 0, null, 2, wire('low-2'));
      index.addQueued('high', 't', 9, null, 3, wire('high'));
      index.addQueued('high-2', 't', 9, null, 4, wire('high-2'));
      const records = new Map<string, JobWire | null>();
      for (let t = index.take(); t !== undefined; t = index.take()) records.set(t.entry.id, t.record);
      assert.deepEqual(
        [...records].map(([id, record]) => [id, record?.id ?? null]),
        [
          ['high', 'high'],
          ['high-2', null],
          ['low-1', 'low-1'],
          ['low-2', null],
        ],
        'past the budget only the job that outranked every queued one keeps its copy',
      );
    });

    it('keeps no copy at all with a budget of 0, and drops copies at a rebuild', () => {
      const none = new ReadyIndex(0);
      none.addQueued('a', 't', 5, null, 1, wire('a'));
      assert.equal(none.take()?.record, null);

      const index = new ReadyIndex();
      index.addQueued('a', 't', 5, null, 1, wire('a'));
      index.rebuild({ queued: [{ id: 'a', type: 't', priority: 5, group: null, readyAt: 1 }], due: [] }, () => false);
      assert.equal(index.take()?.record, null);
    });
  });

  describe('types held back by their limits', () => {
    it('passes over a held type and keeps its jobs first of their type', () => {
      const index = new ReadyIndex();
      for (let i = 0; i < 5; i++) index.addQueued(`held-${i}`, 'held', 5, null, i, null);
      index.addQueued('other-1', 'other', 5, null, 10, null);
      index.addQueued('low', 'held', 1, null, 11, null);
      index.addQueued('other-2', 'other', 3, null, 12, null);
      const passed: string[] = [];
      const notHeld = (type: string) => type !== 'held';
      assert.equal(index.take(notHeld, (type) => passed.push(type))?.entry.id, 'other-1');
      assert.deepEqual(passed, ['held'], 'the held type had a better job');
      assert.equal(index.take(notHeld)?.entry.id, 'other-2', 'a lower priority of another type before the held ones');
      assert.equal(index.take(notHeld), undefined, 'only held jobs are left');
      assert.deepEqual(drain(index), ['held-0', 'held-1', 'held-2', 'held-3', 'held-4', 'low']);
    });

    it('says nothing of a held type whose jobs come after the one taken', () => {
      const index = new ReadyIndex();
      index.addQueued('first', 'other', 5, null, 0, null);
      index.addQueued('held', 'held', 5, null, 1, null);
      const passed: string[] = [];
      assert.equal(
        index.take(
          (type) => type !== 'held',
          (type) => passed.push(type),
        )?.entry.id,
        'first',
      );
      assert.deepEqual(passed, []);
    });

    it('keeps FIFO across types within a priority, a given-back job first', () => {
      const index = new ReadyIndex();
      index.addQueued('a1', 'a', 5, null, 0, null);
      index.addQueued('b1', 'b', 5, null, 1, null);
      index.addQueued('a2', 'a', 5, null, 2, null);
      index.addQueued('b2', 'b', 5, null, 3, null);
      index.addQueued('back', 'b', 5, null, 9, null, 'front');
      assert.deepEqual(drain(index), ['back', 'a1', 'b1', 'a2', 'b2']);
    });

    it('passes over a held backlog of 100,000 jobs without walking it', () => {
      const index = new ReadyIndex();
      for (let i = 0; i < 100_000; i++) index.addQueued(`held-${i}`, 'held', 9, null, i, null);
      for (let i = 0; i < 1000; i++) index.addQueued(`other-${i}`, 'other', 5, null, 100_000 + i, null);
      // Counts the filter's calls: one per type's head and claim, never one per held job.
      let calls = 0;
      const notHeld = (type: string) => {
        calls++;
        return type !== 'held';
      };
      for (let i = 0; i < 1000; i++) assert.equal(index.take(notHeld)?.entry.id, `other-${i}`);
      assert.ok(calls <= 2 * 1000 + 2, `the filter ran ${calls} times for 1000 claims`);
      assert.equal(index.queued, 100_000);
    });
  });

  describe('fair share between groups', () => {
    it('lets 10 jobs of a late group run among the first 20, after 1,000 of another', () => {
      const index = new ReadyIndex();
      for (let i = 0; i < 1000; i++) index.addQueued(`a${i}`, 't', 5, 'a', i, null);
      for (let i = 0; i < 10; i++) index.addQueued(`b${i}`, 't', 5, 'b', 1000 + i, null);
      const order = drain(index);
      assert.deepEqual(order.slice(0, 20), Array.from({ length: 10 }, (_, i) => [`a${i}`, `b${i}`]).flat());
      assert.deepEqual(
        order.slice(20),
        Array.from({ length: 990 }, (_, i) => `a${i + 10}`),
      );
    });

    it('takes turns across task types too: a group is one line whatever the type of its jobs', () => {
      const index = new ReadyIndex();
      index.addQueued('a-x1', 'x', 5, 'a', 0, null);
      index.addQueued('a-y1', 'y', 5, 'a', 1, null);
      index.addQueued('a-x2', 'x', 5, 'a', 2, null);
      index.addQueued('b-y1', 'y', 5, 'b', 3, null);
      index.addQueued('b-x1', 'x', 5, 'b', 4, null);
      assert.deepEqual(drain(index), ['a-x1', 'b-y1', 'a-y1', 'b-x1', 'a-x2']);
    });

    it('starts a group that ran dry at the current turn, and keeps turns per priority', () => {
      const index = new ReadyIndex();
      for (let i = 0; i < 4; i++) index.addQueued(`big${i}`, 't', 5, 'big', i, null);
      index.addQueued('small0', 't', 5, 'small', 4, null);
      index.addQueued('urgent', 't', 9, 'small', 5, null);
      assert.deepEqual(
        [index.take()?.entry.id, index.take()?.entry.id, index.take()?.entry.id, index.take()?.entry.id],
        ['urgent', 'big0', 'small0', 'big1'],
      );
      // 'small' has nothing queued at 5 now: it comes back level with big's next turn (2).
      index.addQueued('small1', 't', 5, 'small', 6, null);
      index.addQueued('small2', 't', 5, 'small', 7, null);
      assert.deepEqual(drain(index), ['big2', 'small1', 'big3', 'small2']);
    });

    it('rebuilds turns from the file in ready order', () => {
      const index = new ReadyIndex();
      index.rebuild(
        {
          queued: [
            { id: 'a1', type: 't', priority: 5, group: 'a', readyAt: 1 },
            { id: 'a2', type: 't', priority: 5, group: 'a', readyAt: 2 },
            { id: 'a3', type: 't', priority: 5, group: 'a', readyAt: 3 },
            { id: 'b1', type: 't', priority: 5, group: 'b', readyAt: 4 },
            { id: 'n1', type: 't', priority: 5, group: null, readyAt: 5 },
          ],
          due: [],
        },
        () => false,
      );
      assert.deepEqual(drain(index), ['a1', 'b1', 'n1', 'a2', 'a3']);
    });
  });
});
