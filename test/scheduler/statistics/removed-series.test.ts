import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KilnMetrics } from '../../../src/scheduler/statistics/metrics.js';
import { JOB_STATUSES, type JobStatus } from '../../../src/contract/job.js';

function newMetrics(): KilnMetrics {
  return new KilnMetrics({
    counts: async () => ({
      byStatus: Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>,
      queuedByPriority: Array.from({ length: 10 }, () => 0),
      pending: 0,
      oldestQueuedReadyAt: null,
      exact: true,
    }),
    capacity: 10,
    threads: () => 1,
    busyThreads: () => 0,
  });
}

describe('the series of a removed group or schedule', () => {
  it('stay gone when a claim or a tick decided before the removal is counted after it', async () => {
    const metrics = newMetrics();
    metrics.groupKnown('tenant-a');
    metrics.scheduleKnown('nightly');
    metrics.groupLimited('tenant-a', 'concurrency');
    metrics.scheduleTick('nightly', 'created');
    let text = await metrics.registry.metrics();
    assert.match(text, /^kiln_group_limited_total\{group="tenant-a",limit="concurrency"\} 1$/m);
    assert.match(text, /^kiln_schedule_ticks_total\{schedule="nightly",outcome="created"\} 1$/m);

    metrics.groupGone('tenant-a');
    metrics.scheduleGone('nightly');
    metrics.groupLimited('tenant-a', 'concurrency');
    metrics.scheduleTick('nightly', 'created');
    text = await metrics.registry.metrics();
    assert.doesNotMatch(text, /group="tenant-a"/);
    assert.doesNotMatch(text, /schedule="nightly"/);

    // Given limits again, the group counts from 0 again.
    metrics.groupKnown('tenant-a');
    metrics.groupLimited('tenant-a', 'rate');
    text = await metrics.registry.metrics();
    assert.match(text, /^kiln_group_limited_total\{group="tenant-a",limit="rate"\} 1$/m);
    assert.match(text, /^kiln_group_limited_total\{group="tenant-a",limit="concurrency"\} 0$/m);
  });
});
