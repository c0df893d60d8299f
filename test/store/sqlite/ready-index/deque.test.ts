import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Deque } from '../../../../src/store/sqlite/ready-index/deque.js';

describe('Deque', () => {
  it('hands items out in the order they came in', () => {
    const q = new Deque<number>();
    assert.equal(q.shift(), undefined);
    assert.equal(q.peek(), undefined);
    q.push(1);
    q.push(2);
    q.push(3);
    assert.equal(q.size, 3);
    assert.equal(q.peek(), 1);
    assert.deepEqual([q.shift(), q.shift(), q.shift(), q.shift()], [1, 2, 3, undefined]);
    assert.equal(q.size, 0);
  });

  it('keeps order when the ring wraps around and grows', () => {
    const q = new Deque<number>(4);
    let next = 0;
    let expected = 0;
    for (let round = 0; round < 50; round++) {
      for (let i = 0; i < 3 + (round % 5); i++) q.push(next++);
      for (let i = 0; i < 2 + (round % 3); i++) {
        if (q.size === 0) break;
        assert.equal(q.shift(), expected++);
      }
      assert.deepEqual(
        [...q],
        Array.from({ length: next - expected }, (_, i) => expected + i),
      );
    }
    while (q.size > 0) assert.equal(q.shift(), expected++);
    assert.equal(expected, next);
  });

  it('holds many items and shrinks again when drained', () => {
    const q = new Deque<number>();
    const n = 200_000;
    for (let i = 0; i < n; i++) q.push(i);
    assert.equal(q.size, n);
    for (let i = 0; i < n; i++) assert.equal(q.shift(), i);
    assert.equal(q.size, 0);
    q.push(7);
    assert.equal(q.shift(), 7);
  });

  it('retains the items a predicate keeps, in order', () => {
    const q = new Deque<number>(4);
    for (let i = 0; i < 10; i++) q.push(i);
    q.shift();
    q.shift();
    q.retain((x) => x % 3 !== 0);
    assert.deepEqual([...q], [2, 4, 5, 7, 8]);
    q.push(10);
    assert.deepEqual([...q], [2, 4, 5, 7, 8, 10]);
    q.clear();
    assert.equal(q.size, 0);
    assert.deepEqual([...q], []);
  });
});
