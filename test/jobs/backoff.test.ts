import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { retryDelayMs } from '../../src/jobs/backoff.js';
import type { Backoff } from '../../src/contract/job.js';

const base: Backoff = { initialMs: 1000, factor: 2, maxMs: 300_000, jitter: 'none' };

describe('retryDelayMs', () => {
  it('grows as initialMs × factor^(n−1) without jitter', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5].map((n) => retryDelayMs(base, n)),
      [1000, 2000, 4000, 8000, 16000],
    );
  });

  it('is capped at maxMs, even when the power overflows', () => {
    assert.equal(retryDelayMs(base, 20), 300_000);
    assert.equal(retryDelayMs({ ...base, factor: 100 }, 400), 300_000);
  });

  it('with factor 1 stays at initialMs', () => {
    assert.equal(retryDelayMs({ ...base, factor: 1 }, 7), 1000);
  });

  it('draws full jitter from [0, d]', () => {
    const backoff: Backoff = { ...base, jitter: 'full' };
    assert.equal(
      retryDelayMs(backoff, 3, () => 0),
      0,
    );
    assert.equal(
      retryDelayMs(backoff, 3, () => 0.5),
      2000,
    );
    assert.equal(
      retryDelayMs(backoff, 3, () => 0.999999),
      4000,
    );
  });

  it('draws equal jitter from [d/2, d]', () => {
    const backoff: Backoff = { ...base, jitter: 'equal' };
    assert.equal(
      retryDelayMs(backoff, 3, () => 0),
      2000,
    );
    assert.equal(
      retryDelayMs(backoff, 3, () => 0.5),
      3000,
    );
    assert.equal(
      retryDelayMs(backoff, 3, () => 0.999999),
      4000,
    );
  });

  it('keeps every draw within its bounds over many seeds', () => {
    let seed = 7;
    const random = () => {
      seed = (seed * 48271) % 2147483647;
      return seed / 2147483647;
    };
    for (let n = 1; n <= 12; n++) {
      const d = Math.min(300_000, 1000 * 2 ** (n - 1));
      for (let i = 0; i < 200; i++) {
        const full = retryDelayMs({ ...base, jitter: 'full' }, n, random);
        const equal = retryDelayMs({ ...base, jitter: 'equal' }, n, random);
        assert.ok(full >= 0 && full <= d, `full ${full} in [0, ${d}]`);
        assert.ok(equal >= d / 2 && equal <= d, `equal ${equal} in [${d / 2}, ${d}]`);
      }
    }
  });
});
