import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isoTime } from '../../src/server/render.js';

describe('times as the API renders them', () => {
  it('writes every time as Date.toISOString does', () => {
    const edges = [
      0,
      1,
      999,
      86_399_999,
      86_400_000,
      951_782_400_000, // 2000-02-29
      1_700_000_000_000,
      Date.UTC(2026, 11, 31, 23, 59, 59, 999),
      Date.UTC(2027, 0, 1),
      253_402_300_799_999, // the last millisecond of year 9999
      253_402_300_800_000,
      -1,
      -86_400_001,
    ];
    const spread = Array.from({ length: 20_000 }, (_, i) => 1_600_000_000_000 + i * 7_919_993);
    for (const ms of [...edges, ...spread]) assert.equal(isoTime(ms), new Date(ms).toISOString(), String(ms));
  });
});
