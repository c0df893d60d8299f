import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Counter, Histogram, Registry } from 'prom-client';
import { FastCounter, FastHistogram } from '../../../src/scheduler/statistics/fast-metrics.js';

/** A random generator with a seed, so that a failure can be run again. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

const BUCKETS = [0.0001, 0.001, 0.01, 0.1, 1, 10];

describe('the per-job counter and histogram', () => {
  it('expose what prom-client exposes for the same series and values, as text and as JSON', async () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const random = seeded(seed);
      const theirs = new Registry();
      const ours = new Registry();
      const counters = [
        new Counter({ name: 'x_total', help: 'A counter.', labelNames: ['type', 'status'], registers: [theirs] }),
        new FastCounter({ name: 'x_total', help: 'A counter.', labelNames: ['type', 'status'], registers: [ours] }),
      ] as const;
      const plain = [
        new Counter({ name: 'p_total', help: 'No labels.', registers: [theirs] }),
        new FastCounter({ name: 'p_total', help: 'No labels.', registers: [ours] }),
      ] as const;
      const histograms = [
        new Histogram({
          name: 'h_seconds',
          help: 'A histogram.',
          labelNames: ['type'],
          buckets: BUCKETS,
          registers: [theirs],
        }),
        new FastHistogram({
          name: 'h_seconds',
          help: 'A histogram.',
          labelNames: ['type'],
          buckets: BUCKETS,
          registers: [ours],
        }),
      ] as const;
      const unlabelled = [
        new Histogram({ name: 'c_seconds', help: 'No labels.', buckets: BUCKETS, registers: [theirs] }),
        new FastHistogram({ name: 'c_seconds', help: 'No labels.', buckets: BUCKETS, registers: [ours] }),
      ] as const;
      // Series made ahead at zero, as the metrics of a type are when it is loaded.
      counters[0].inc({ type: 'a', status: 'completed' }, 0);
      counters[1].inc({ type: 'a', status: 'completed' }, 0);
      histograms[0].zero({ type: 'a' });
      histograms[1].zero({ type: 'a' });
      for (let i = 0; i < 400; i++) {
        const type = ['a', 'b', 'c'][Math.floor(random() * 3)] as string;
        const status = random() < 0.8 ? 'completed' : 'failed';
        // Values on the bounds too, which fall in the bucket they bound.
        const value = random() < 0.2 ? (BUCKETS[Math.floor(random() * BUCKETS.length)] as number) : random() ** 4 * 20;
        const n = Math.floor(random() * 3);
        counters[0].labels(type, status).inc(n);
        counters[1].labels(type, status).inc(n);
        histograms[0].labels(type).observe(value);
        histograms[1].labels(type).observe(value);
        if (i % 3 === 0) {
          plain[0].inc();
          plain[1].labels().inc();
          unlabelled[0].observe(value);
          unlabelled[1].observe(value);
        }
      }
      assert.equal(await ours.metrics(), await theirs.metrics(), `seed ${seed}`);
      assert.deepEqual(await ours.getMetricsAsJSON(), await theirs.getMetricsAsJSON(), `seed ${seed}`);
    }
  });

  it('expose a metric without labels from the start, at zero', async () => {
    const theirs = new Registry();
    const ours = new Registry();
    new Histogram({ name: 'c_seconds', help: 'h', buckets: BUCKETS, registers: [theirs] });
    new FastHistogram({ name: 'c_seconds', help: 'h', buckets: BUCKETS, registers: [ours] });
    assert.equal(await ours.metrics(), await theirs.metrics());
  });

  it('refuse what prom-client refuses: a counter moved back, a value that is not a number', () => {
    const counter = new FastCounter({ name: 'x_total', help: 'h', labelNames: ['type'], registers: [] });
    assert.throws(() => counter.labels('a').inc(-1), /finite amount ≥ 0/);
    assert.throws(() => counter.labels('a').inc(Number.NaN), /finite amount ≥ 0/);
    assert.throws(() => counter.labels('a', 'b').inc(), /has labels type; given 2/);
    const histogram = new FastHistogram({ name: 'h', help: 'h', buckets: BUCKETS, registers: [] });
    assert.throws(() => histogram.observe(Number.POSITIVE_INFINITY), /not a valid number/);
  });
});
