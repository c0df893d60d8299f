import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { madeAtOf, newJobId } from '../../src/jobs/ids.js';

describe('newJobId', () => {
  it('makes UUIDv7 strings, also from a clock that is not in whole milliseconds', () => {
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
    assert.match(newJobId(), uuid);
    assert.match(newJobId(Date.now() + 0.5), uuid);
  });

  it('sorts by creation, also within one millisecond and when the clock steps back', () => {
    const now = Date.now();
    const ids = [...Array.from({ length: 5000 }, () => newJobId(now)), newJobId(now - 10_000), newJobId(now + 1)];
    const sorted = [...ids].sort();
    assert.deepEqual(sorted, ids);
    assert.equal(new Set(ids).size, ids.length);
  });

  it('carries its time in the first 48 bits', () => {
    const at = Date.UTC(2026, 10, 22, 10, 0, 0);
    const id = newJobId(at + 3_600_000);
    const ms = Number.parseInt(id.replaceAll('-', '').slice(0, 12), 16);
    assert.ok(ms >= at + 3_600_000);
    // A time past every id made so far is carried as it is (the last test: later ids follow it).
    const later = Date.now() + 10 * 365 * 86_400_000;
    assert.equal(Number.parseInt(newJobId(later).replaceAll('-', '').slice(0, 12), 16), later);
    assert.equal(madeAtOf(newJobId(later + 1)), later + 1);
  });
});
