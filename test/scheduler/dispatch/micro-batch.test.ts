import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MicroBatching, TINY_JOB_MS } from '../../../src/scheduler/dispatch/micro-batch.js';

describe('micro-batch sizing', () => {
  it('batches a type only after three samples under the threshold', () => {
    const micro = new MicroBatching({});
    assert.equal(micro.request(), null);
    micro.learn('tiny', 0.1);
    micro.learn('tiny', 0.1);
    assert.equal(micro.request(), null);
    micro.learn('tiny', 0.1);
    const request = micro.request();
    assert.ok(request);
    assert.ok(Math.abs((request.costs.get('tiny') ?? 0) - 0.1) < 1e-9);
    assert.equal(request.budgetMs, 2);
    assert.equal(request.maxJobs, 100);
  });

  it('stops batching a type whose mean grows past the threshold', () => {
    const micro = new MicroBatching({});
    for (let i = 0; i < 3; i++) micro.learn('t', 0.1);
    assert.ok(micro.request()?.costs.has('t'));
    for (let i = 0; i < 20; i++) micro.learn('t', TINY_JOB_MS * 10);
    assert.equal(micro.request(), null);
  });

  it('keeps jobs of a broken batch apart until they ran alone', () => {
    const micro = new MicroBatching({ tinyMs: 5 });
    for (let i = 0; i < 3; i++) micro.learn('t', 1);
    micro.setSolo('job-1', true);
    assert.ok(micro.request()?.solo.has('job-1'));
    micro.setSolo('job-1', false);
    assert.equal(micro.request()?.solo.has('job-1'), false);
  });

  it('never batches when a batch may hold one job', () => {
    const micro = new MicroBatching({ maxJobs: 1 });
    for (let i = 0; i < 3; i++) micro.learn('t', 0.01);
    assert.equal(micro.request(), null);
  });
});
