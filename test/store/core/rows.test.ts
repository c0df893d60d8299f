import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parentResults } from '../../../src/store/core/rows.js';

describe('parentResults', () => {
  it('answers each dependency in order, with an empty result for one removed since', () => {
    const rows = new Map([['a', { type: 'resize', result: '{"w":1}' }]]);
    assert.deepEqual(
      parentResults(['gone', 'a'], (id) => rows.get(id)),
      [
        { id: 'gone', type: '', result: null },
        { id: 'a', type: 'resize', result: { w: 1 } },
      ],
    );
  });
});
