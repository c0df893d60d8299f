import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { refusalReason } from '../../../src/scheduler/dispatch/refused-outcome.js';

describe('refusalReason', () => {
  it('reads why an outcome of attempt 2 was refused from the job as it is now', () => {
    assert.equal(refusalReason(2, null), 'gone');
    assert.equal(refusalReason(2, { status: 'cancelled', attempts: 2 }), 'cancelled');
    assert.equal(refusalReason(2, { status: 'running', attempts: 3 }), 'rerun');
    assert.equal(refusalReason(2, { status: 'completed', attempts: 3 }), 'rerun');
    assert.equal(refusalReason(2, { status: 'running', attempts: 2 }), 'lease_lost');
    assert.equal(refusalReason(2, { status: 'completed', attempts: 2 }), 'finished');
    assert.equal(refusalReason(2, { status: 'retrying', attempts: 2 }), 'rescued');
    assert.equal(refusalReason(2, { status: 'failed', attempts: 2 }), 'rescued');
    assert.equal(refusalReason(2, { status: 'queued', attempts: 1 }), 'rescued');
  });
});
