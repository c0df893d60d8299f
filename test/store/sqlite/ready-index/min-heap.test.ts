import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MinHeap } from '../../../../src/store/sqlite/ready-index/min-heap.js';

interface Entry {
  runAt: number;
  id: string;
}

const byRunAtThenId = (a: Entry, b: Entry) => a.runAt < b.runAt || (a.runAt === b.runAt && a.id < b.id);

/** A deterministic pseudo-random sequence (no flaky tests). */
function lcg(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    return state / 2_147_483_648;
  };
}

describe('MinHeap', () => {
  it('pops the smallest first, ties broken by the comparator', () => {
    const heap = new MinHeap<Entry>(byRunAtThenId);
    assert.equal(heap.pop(), undefined);
    for (const [runAt, id] of [
      [30, 'c'],
      [10, 'b'],
      [20, 'a'],
      [10, 'a'],
    ] as const) {
      heap.push({ runAt, id });
    }
    assert.equal(heap.size, 4);
    assert.deepEqual(heap.peek(), { runAt: 10, id: 'a' });
    const out: string[] = [];
    for (let e = heap.pop(); e !== undefined; e = heap.pop()) out.push(`${e.runAt}${e.id}`);
    assert.deepEqual(out, ['10a', '10b', '20a', '30c']);
  });

  it('sorts many random entries, interleaving pushes and pops', () => {
    const random = lcg(42);
    const heap = new MinHeap<number>((a, b) => a < b);
    // Kept sorted, largest first, so the smallest is at the end.
    const model: number[] = [];
    for (let i = 0; i < 50_000; i++) {
      if (random() < 0.6 || model.length === 0) {
        const value = Math.floor(random() * 1_000_000);
        heap.push(value);
        let lo = 0;
        let hi = model.length;
        while (lo < hi) {
          const mid = (lo + hi) >>> 1;
          if ((model[mid] as number) > value) lo = mid + 1;
          else hi = mid;
        }
        model.splice(lo, 0, value);
      } else {
        assert.equal(heap.pop(), model.pop());
      }
    }
    model.reverse();
    const rest: number[] = [];
    for (let v = heap.pop(); v !== undefined; v = heap.pop()) rest.push(v);
    assert.deepEqual(rest, model);
  });

  it('retains the entries a predicate keeps and stays a heap', () => {
    const heap = new MinHeap<number>((a, b) => a < b);
    for (let i = 100; i > 0; i--) heap.push(i);
    heap.retain((x) => x % 2 === 0);
    assert.equal(heap.size, 50);
    const out: number[] = [];
    for (let v = heap.pop(); v !== undefined; v = heap.pop()) out.push(v);
    assert.deepEqual(
      out,
      Array.from({ length: 50 }, (_, i) => (i + 1) * 2),
    );
    heap.push(3);
    heap.clear();
    assert.equal(heap.size, 0);
  });
});
