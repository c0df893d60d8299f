import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { effectiveLimits, TaskLimiter } from '../../../src/scheduler/dispatch/task-limits.js';
import { FakeClock } from '../../support/fake-clock.js';

describe('TaskLimiter', () => {
  it('allows nothing beyond the concurrency, and one more when an attempt ends', () => {
    const limiter = new TaskLimiter(new FakeClock(1_000_000).now);
    limiter.configure(new Map([['a', { concurrency: 2, rateLimit: null }]]));
    assert.equal(limiter.allowance().left.get('a'), 2);
    limiter.claimed('a', 'j1', () => null);
    limiter.claimed('a', 'j2', () => null);
    const full = limiter.allowance();
    assert.equal(full.left.get('a'), 0);
    assert.equal(full.held.get('a'), 'concurrency');
    assert.equal(full.wakeAt, null, 'an ending attempt frees the place, no timer');
    limiter.ended('a', 'j1', 5);
    assert.equal(limiter.allowance().left.get('a'), 1);
    assert.deepEqual(limiter.usage('a'), { running: 1, tokens: null });
  });

  it('counts a rate window on start times: a token comes back perMs after the start it paid for', () => {
    const clock = new FakeClock(10_000);
    const limiter = new TaskLimiter(clock.now);
    limiter.configure(new Map([['r', { concurrency: null, rateLimit: { max: 2, perMs: 1000 } }]]));
    assert.equal(limiter.allowance().left.get('r'), 2, 'the bucket starts full');
    let startOfJ1: number | null = null;
    limiter.claimed('r', 'j1', () => startOfJ1);
    limiter.claimed('r', 'j2', () => 10_000);
    const unknown = limiter.allowance();
    assert.equal(unknown.left.get('r'), 0, 'a claim whose start is not known yet counts as inside the window');
    assert.equal(unknown.held.get('r'), 'rate');
    assert.ok(unknown.wakeAt !== null && unknown.wakeAt <= 10_000 + 5, 'looks again soon');
    startOfJ1 = 10_200;
    limiter.ended('r', 'j1', 10_200);
    limiter.ended('r', 'j2', 10_000);
    clock.set(10_500);
    const known = limiter.allowance();
    assert.equal(known.left.get('r'), 0);
    assert.equal(known.wakeAt, 11_000, 'the earliest start in the window plus perMs');
    assert.equal(limiter.usage('r').tokens, 0);
    clock.set(11_000);
    assert.equal(limiter.allowance().left.get('r'), 1, 'the start at 10,000 left the window');
    clock.set(11_200);
    assert.equal(limiter.allowance().left.get('r'), 2);
  });

  it('refunds an attempt given back unstarted', () => {
    const limiter = new TaskLimiter(new FakeClock(1_000_000).now);
    limiter.configure(new Map([['r', { concurrency: 1, rateLimit: { max: 1, perMs: 60_000 } }]]));
    limiter.claimed('r', 'j1', () => null);
    assert.equal(limiter.allowance().left.get('r'), 0);
    limiter.ended('r', 'j1', null);
    assert.equal(limiter.allowance().left.get('r'), 1);
  });

  it('drops a type whose limits are removed once its attempts end', () => {
    const limiter = new TaskLimiter(new FakeClock(1_000_000).now);
    limiter.configure(new Map([['a', { concurrency: 1, rateLimit: null }]]));
    limiter.claimed('a', 'j1', () => 1);
    limiter.configure(new Map([['a', { concurrency: null, rateLimit: null }]]));
    assert.equal(limiter.allowance().left.has('a'), false, 'no longer limited');
    limiter.ended('a', 'j1', 1);
    assert.equal(limiter.active, false);
  });

  it('lays an override over the module limits field by field', () => {
    const declared = { concurrency: 4, rateLimit: { max: 10, perMs: 1000 } };
    assert.deepEqual(effectiveLimits(declared, undefined), declared);
    assert.deepEqual(effectiveLimits(declared, { concurrency: 1 }), { concurrency: 1, rateLimit: declared.rateLimit });
    assert.deepEqual(effectiveLimits(declared, { rateLimit: null }), { concurrency: 4, rateLimit: null });
  });
});
