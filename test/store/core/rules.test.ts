import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { JobStatus } from '../../../src/contract/job.js';
import {
  cancelledError,
  cancelRefusal,
  dedupeRival,
  dependencyError,
  removeRefusal,
  retryTarget,
  tickApplies,
  tickOverlaps,
} from '../../../src/store/core/rules.js';

describe('cancel and remove', () => {
  it('cancels only a job that is not finished', () => {
    assert.equal(cancelRefusal('queued'), null);
    assert.equal(cancelRefusal('running'), null);
    assert.deepEqual(cancelRefusal('completed'), {
      invalidState: true,
      status: 'completed',
      message: 'job is completed; only a job that is not finished can be cancelled',
    });
  });

  it('gives a cancelled job the error it carries', () => {
    assert.deepEqual(cancelledError(2), { code: 'cancelled', message: 'cancelled by request', attempt: 2 });
  });

  it('removes only a finished job', () => {
    for (const status of ['completed', 'failed', 'cancelled'] as const) assert.equal(removeRefusal(status), null);
    assert.deepEqual(removeRefusal('running'), {
      invalidState: true,
      status: 'running',
      message: 'job is running; only a finished job (completed, failed or cancelled) can be removed',
    });
  });
});

describe('dependencyError', () => {
  it('says whether the dependency failed or was cancelled', () => {
    assert.deepEqual(dependencyError('p', 'failed'), {
      code: 'dependency_failed',
      message: 'dependency p failed',
      attempt: 0,
    });
    assert.equal(dependencyError('p', 'cancelled').message, 'dependency p was cancelled');
  });
});

describe('retryTarget', () => {
  const statuses: Record<string, JobStatus> = { c: 'completed', q: 'queued', f: 'failed' };
  const of = (id: string) => statuses[id];

  it('queues a failed or cancelled job whose dependencies completed, else makes it wait', () => {
    assert.equal(retryTarget('failed', ['c'], of), 'queued');
    assert.equal(retryTarget('cancelled', ['c', 'q'], of), 'waiting');
  });

  it('refuses a job that is not failed or cancelled, and one whose dependency failed or is gone', () => {
    assert.equal(
      (retryTarget('running', [], of) as { message: string }).message,
      'job is running; only a failed or cancelled job can be retried',
    );
    assert.match((retryTarget('failed', ['f'], of) as { message: string }).message, /^dependency f is failed; retry/);
    assert.equal(
      (retryTarget('failed', ['gone'], of) as { message: string }).message,
      'dependency gone no longer exists, so the job cannot be retried',
    );
  });

  it('names the rival that holds the dedupe key', () => {
    assert.match(dedupeRival('failed', 'r').message, /^job r does the same work \(same dedupe key\)/);
  });
});

describe('schedule ticks', () => {
  it('applies a trigger always, a tick only to the row it read', () => {
    const current = { next_run_at: 100, updated_at: 5 };
    assert.equal(tickApplies(null, current), true);
    assert.equal(tickApplies({ nextRunAt: 100, updatedAt: 5 }, current), true);
    assert.equal(tickApplies({ nextRunAt: 100, updatedAt: 6 }, current), false);
    assert.equal(tickApplies({ nextRunAt: 90, updatedAt: 5 }, current), false);
  });

  it('skips for overlap only when asked to and the last job is unfinished', () => {
    assert.equal(tickOverlaps(true, 'running'), true);
    assert.equal(tickOverlaps(true, 'completed'), false);
    assert.equal(tickOverlaps(true, undefined), false);
    assert.equal(tickOverlaps(false, 'running'), false);
  });
});
