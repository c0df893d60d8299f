import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type FairEntry, FairQueue } from '../../../../src/store/sqlite/ready-index/fair-queue.js';

interface Entry extends FairEntry {
  id: string;
}

/** A queue over entries that stay live until `dead` names them. */
function queueOf(): { queue: FairQueue<Entry>; dead: Set<string>; discarded: () => number } {
  const dead = new Set<string>();
  let discarded = 0;
  const queue = new FairQueue<Entry>(
    (entry) => !dead.has(entry.id),
    () => {
      discarded++;
    },
  );
  return { queue, dead, discarded: () => discarded };
}

let seq = 0;
const entry = (id: string, group: string | null, round: number): Entry => ({ id, group, round, seq: ++seq });

function drain(queue: FairQueue<Entry>): string[] {
  const ids: string[] = [];
  for (let e = queue.shift(); e !== undefined; e = queue.shift()) ids.push(e.id);
  return ids;
}

describe('FairQueue', () => {
  it('passes over a held group without reading its line, which stays as it was', () => {
    let looked = 0;
    const queue = new FairQueue<Entry>(() => {
      looked++;
      return true;
    });
    for (let i = 0; i < 10_000; i++) queue.push(entry(`h${i}`, 'held', i));
    queue.push(entry('f0', 'free', 5_000));
    queue.push(entry('n0', null, 6_000));
    const allowed = (group: string) => group !== 'held';
    const heard: string[] = [];
    looked = 0;
    assert.equal(queue.peek(allowed, (e) => heard.push(e.id))?.id, 'f0');
    assert.deepEqual(heard, ['h0'], "the held group's first job, once");
    assert.equal(queue.shift(allowed)?.id, 'f0');
    assert.equal(queue.shift(allowed)?.id, 'n0', 'jobs without a group are never held');
    assert.equal(queue.shift(allowed), undefined);
    assert.ok(looked < 20, `the held line was read (${looked} entries looked at)`);
    assert.equal(queue.peek()?.id, 'h0', 'the held group is first again once allowed');
    assert.deepEqual(drain(queue).slice(0, 3), ['h0', 'h1', 'h2']);
  });

  it('takes groups in turn by round, FIFO inside a group, ties by place in line', () => {
    const { queue } = queueOf();
    for (let i = 0; i < 4; i++) queue.push(entry(`a${i}`, 'a', i));
    for (let i = 0; i < 2; i++) queue.push(entry(`b${i}`, 'b', i));
    queue.push(entry('n0', null, 1));
    assert.equal(queue.groups, 3);
    assert.deepEqual(drain(queue), ['a0', 'b0', 'a1', 'b1', 'n0', 'a2', 'a3']);
    assert.equal(queue.groups, 0);
    assert.equal(queue.peek(), undefined);
  });

  it('peeks the entry the next shift takes', () => {
    const { queue } = queueOf();
    queue.push(entry('x', 'g', 3));
    queue.push(entry('y', 'h', 1));
    assert.equal(queue.peek()?.id, 'y');
    assert.equal(queue.shift()?.id, 'y');
    assert.equal(queue.peek()?.id, 'x');
  });

  it('puts an entry given back first in its group, and first overall when its turn is earliest', () => {
    const { queue } = queueOf();
    queue.push(entry('a1', 'a', 1));
    queue.push(entry('b1', 'b', 1));
    queue.unshift({ id: 'a0', group: 'a', round: 1, seq: -1 });
    assert.deepEqual(drain(queue), ['a0', 'a1', 'b1']);
  });

  it('skips stale entries wherever they stand, telling the owner of each it drops', () => {
    const { queue, dead, discarded } = queueOf();
    for (let i = 0; i < 3; i++) queue.push(entry(`a${i}`, 'a', i));
    for (let i = 0; i < 3; i++) queue.push(entry(`b${i}`, 'b', i));
    dead.add('a0');
    dead.add('b1');
    dead.add('b2');
    assert.deepEqual(drain(queue), ['b0', 'a1', 'a2']);
    assert.equal(discarded(), 3);
  });

  it('compacts to the live entries and keeps the order', () => {
    const { queue, dead } = queueOf();
    for (let i = 0; i < 100; i++) queue.push(entry(`g${i % 10}-${i}`, `g${i % 10}`, Math.floor(i / 10)));
    for (let i = 0; i < 100; i++) if (i % 3 !== 0) dead.add(`g${i % 10}-${i}`);
    assert.equal(queue.compact(), 34);
    const order = drain(queue);
    assert.equal(order.length, 34);
    const expected = Array.from({ length: 100 }, (_, i) => i)
      .filter((i) => i % 3 === 0)
      .map((i) => `g${i % 10}-${i}`);
    assert.deepEqual(order, expected);
  });

  it('visits the first live entry of each group', () => {
    const { queue, dead } = queueOf();
    queue.push(entry('a0', 'a', 0));
    queue.push(entry('a1', 'a', 1));
    queue.push(entry('b0', 'b', 0));
    dead.add('a0');
    dead.add('b0');
    const heads: string[] = [];
    queue.forEachHead((head) => heads.push(head.id));
    assert.deepEqual(heads, ['a1']);
    assert.equal(queue.groups, 1);
  });

  it('costs O(log groups) comparisons per take with 100,000 groups', () => {
    const { queue } = queueOf();
    let reads = 0;
    const groups = 100_000;
    for (let g = 0; g < groups; g++) {
      for (let r = 0; r < 2; r++) {
        const counted = { id: `${g}-${r}`, group: `g${g}`, seq: ++seq, _round: r } as Entry & { _round: number };
        Object.defineProperty(counted, 'round', {
          get() {
            reads++;
            return counted._round;
          },
        });
        queue.push(counted);
      }
    }
    reads = 0;
    const takes = 1000;
    for (let i = 0; i < takes; i++) assert.ok(queue.shift());
    // A binary heap compares about twice per level; a scan of the groups would read 100,000.
    const perTake = reads / takes;
    assert.ok(perTake < 8 * Math.log2(groups), `${perTake} reads of round per take`);
  });
});
