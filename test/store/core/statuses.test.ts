import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { JOB_STATUSES, type JobStatus } from '../../../src/contract/job.js';
import { isPending, PENDING_STATUSES, pendingOf } from '../../../src/store/core/statuses.js';

describe('pending statuses', () => {
  it('are the statuses of a job that is to run and does not run yet', () => {
    assert.deepEqual(
      JOB_STATUSES.filter((status) => isPending(status)),
      ['waiting', 'scheduled', 'queued', 'retrying'],
    );
    assert.deepEqual([...PENDING_STATUSES].sort(), JOB_STATUSES.filter(isPending).sort());
  });

  it('are summed from counts by status', () => {
    const byStatus = Object.fromEntries(JOB_STATUSES.map((status, i) => [status, 10 ** i])) as Record<
      JobStatus,
      number
    >;
    // waiting 1, scheduled 10, queued 100, running 1000, retrying 10000
    assert.equal(pendingOf(byStatus), 10111);
  });
});
