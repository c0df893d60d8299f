import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { canonicalJson } from '../../../src/store/core/canonical-json.js';

describe('canonicalJson', () => {
  it('sorts object keys at every depth and keeps array order', () => {
    assert.equal(
      canonicalJson({ b: 1, a: { d: [2, { z: 1, y: 2 }], c: null } }),
      '{"a":{"c":null,"d":[2,{"y":2,"z":1}]},"b":1}',
    );
    assert.equal(canonicalJson({ x: 1, y: 2 }), canonicalJson({ y: 2, x: 1 }));
    assert.notEqual(canonicalJson([1, 2]), canonicalJson([2, 1]));
  });

  it('puts integer-like keys first, ascending by value, as stored keys of earlier versions have them', () => {
    assert.equal(canonicalJson({ b: 1, 10: 2, a: 3, 2: 4 }), '{"2":4,"10":2,"a":3,"b":1}');
    assert.equal(canonicalJson({ é: 1, e: 2, Z: 3 }), '{"Z":3,"e":2,"é":1}');
  });

  it('follows JSON.stringify for scalars and undefined', () => {
    assert.equal(canonicalJson('s'), '"s"');
    assert.equal(canonicalJson(3), '3');
    assert.equal(canonicalJson(null), 'null');
    assert.equal(canonicalJson(undefined), 'null');
    assert.equal(canonicalJson({ a: undefined, b: 1 }), '{"b":1}');
  });
});
