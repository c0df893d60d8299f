import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { STATS_BUCKET_MS } from '../../../src/contract/stats.js';
import { JobStats } from '../../../src/scheduler/statistics/job-stats.js';
import { HISTOGRAM_BINS, LatencyHistogram } from '../../../src/scheduler/statistics/latency-histogram.js';
import { FakeClock } from '../../support/fake-clock.js';

/** Within the histogram's promise of ±4.5 % of the true value. */
function near(actual: number | null, expected: number): void {
  assert.ok(actual !== null, `expected about ${expected}, got null`);
  assert.ok(Math.abs(actual - expected) <= expected * 0.045, `expected about ${expected}, got ${actual}`);
}

describe('LatencyHistogram', () => {
  it('answers null while empty', () => {
    const histogram = new LatencyHistogram();
    assert.equal(histogram.quantile(0.5), null);
    assert.equal(histogram.count, 0);
  });

  it('reads percentiles by nearest rank within ±4.5 %', () => {
    const histogram = new LatencyHistogram();
    for (let ms = 1; ms <= 1000; ms++) histogram.record(ms);
    near(histogram.quantile(0.5), 500);
    near(histogram.quantile(0.99), 990);
    near(histogram.quantile(0.9), 900);
    assert.equal(histogram.count, 1000);
  });

  it('is exact at the ends: one sample is its own p50 and p99', () => {
    const histogram = new LatencyHistogram();
    histogram.record(123.456);
    assert.equal(histogram.quantile(0.5), 123.456);
    assert.equal(histogram.quantile(0.99), 123.456);
  });

  it('keeps zero, negative, tiny and huge samples in its end bins', () => {
    const histogram = new LatencyHistogram();
    histogram.record(0);
    histogram.record(-5);
    histogram.record(Number.NaN);
    histogram.record(1e-9);
    assert.equal(histogram.quantile(0.99), 1e-9);
    histogram.record(10 * 86_400_000);
    assert.equal(histogram.quantile(1), 10 * 86_400_000);
    assert.equal(histogram.count, 5);
  });

  it('merges by adding bins, and clears', () => {
    const fast = new LatencyHistogram();
    const slow = new LatencyHistogram();
    for (let i = 0; i < 90; i++) fast.record(2);
    for (let i = 0; i < 10; i++) slow.record(2000);
    const both = new LatencyHistogram();
    both.add(fast);
    both.add(slow);
    assert.equal(both.count, 100);
    near(both.quantile(0.5), 2);
    near(both.quantile(0.99), 2000);
    both.clear();
    assert.equal(both.count, 0);
    assert.equal(both.quantile(0.5), null);
  });

  it('has a fixed, small number of bins', () => {
    assert.equal(HISTOGRAM_BINS, 274);
  });
});

describe('JobStats', () => {
  // A bucket boundary, so the test knows which bucket each sample lands in.
  const start = 1_800_000_000_000 - (1_800_000_000_000 % STATS_BUCKET_MS);

  it('counts per 10-second bucket, oldest first, the current bucket last, empty ones included', () => {
    const clock = new FakeClock(start);
    const stats = new JobStats({ now: clock.now });
    stats.submitted(3);
    stats.finished('completed');
    stats.waited(5);
    stats.ran(40);
    clock.advance(STATS_BUCKET_MS * 2 + 1);
    stats.submitted();
    stats.finished('failed');
    stats.finished('cancelled');
    stats.ran(400);

    const { buckets, totals } = stats.window(60);
    assert.equal(buckets.length, 6);
    assert.equal(buckets.at(-1)?.at, start + STATS_BUCKET_MS * 2);
    assert.equal(buckets.at(-3)?.at, start);
    assert.deepEqual(
      buckets.map((b) => [b.submitted, b.completed, b.failed]),
      [
        [0, 0, 0],
        [0, 0, 0],
        [0, 0, 0],
        [3, 1, 0],
        [0, 0, 0],
        [1, 0, 1],
      ],
    );
    assert.equal(buckets.at(-3)?.waitMsP50, 5);
    assert.equal(buckets.at(-3)?.runMsP99, 40);
    assert.equal(buckets.at(-2)?.runMsP50, null);
    assert.equal(buckets.at(-1)?.waitMsP50, null);
    assert.equal(buckets.at(-1)?.runMsP50, 400);
    assert.deepEqual(
      { submitted: totals.submitted, completed: totals.completed, failed: totals.failed },
      { submitted: 4, completed: 1, failed: 1 },
    );
    assert.equal(totals.runMsP50, 40);
    assert.equal(totals.runMsP99, 400);
    assert.equal(totals.waitMsP99, 5);
  });

  it('rounds a window up to whole buckets and never reaches past an hour', () => {
    const stats = new JobStats({ now: new FakeClock(start).now });
    assert.equal(stats.window(65).buckets.length, 7);
    assert.equal(stats.window(3600).buckets.length, 360);
    assert.equal(stats.window(7200).buckets.length, 360);
  });

  it('forgets a bucket once the ring comes round to its slot an hour later', () => {
    const clock = new FakeClock(start);
    const stats = new JobStats({ now: clock.now });
    stats.submitted(7);
    stats.ran(10);
    clock.advance(3590 * 1000);
    // The first bucket is still the oldest of the hour.
    assert.equal(stats.window(3600).buckets[0]?.submitted, 7);
    clock.advance(10 * 1000);
    // Now it fell out of the window, though its slot was not written again yet.
    assert.equal(stats.window(3600).totals.submitted, 0);
    stats.submitted(2);
    const { buckets, totals } = stats.window(3600);
    assert.equal(buckets.at(-1)?.submitted, 2);
    assert.equal(buckets.at(-1)?.runMsP50, null);
    assert.equal(totals.submitted, 2);
  });

  it('leaves samples older than the window out of the totals', () => {
    const clock = new FakeClock(start);
    const stats = new JobStats({ now: clock.now });
    stats.waited(1000);
    clock.advance(120_000);
    stats.waited(1);
    const { totals } = stats.window(60);
    assert.equal(totals.waitMsP99, 1);
    assert.equal(stats.window(300).totals.waitMsP99, 1000);
  });
});
