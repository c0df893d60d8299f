import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { batchHasRoom, costInBatch, formBatches } from '../../../src/store/core/micro-batches.js';

const micro = (fields: { budgetMs?: number; maxJobs?: number; solo?: string[] } = {}) => ({
  costs: new Map([
    ['small', 10],
    ['large', 40],
  ]),
  budgetMs: fields.budgetMs ?? 50,
  maxJobs: fields.maxJobs ?? 10,
  solo: new Set(fields.solo ?? []),
});

const jobs = (...types: string[]) => types.map((type, i) => ({ id: `j${i}`, type }));

describe('formBatches', () => {
  it('grows a batch while the expected time is under budget (the last job may pass it)', () => {
    assert.deepEqual(formBatches(jobs('small', 'small', 'large', 'small', 'small'), 3, micro()), [
      ['j0', 'j1', 'j2'],
      ['j3', 'j4'],
    ]);
  });

  it('keeps a job without a cost, or a solo one, alone', () => {
    assert.deepEqual(formBatches(jobs('small', 'other', 'small', 'small'), 5, micro({ solo: ['j3'] })), [
      ['j0'],
      ['j1'],
      ['j2'],
      ['j3'],
    ]);
  });

  it('caps a batch at maxJobs and answers at most `batches` batches', () => {
    assert.deepEqual(formBatches(jobs('small', 'small', 'small', 'small', 'small'), 2, micro({ maxJobs: 2 })), [
      ['j0', 'j1'],
      ['j2', 'j3'],
    ]);
    assert.deepEqual(formBatches([], 2, micro()), []);
  });
});

describe('the two rules both stores batch by', () => {
  it('a job costs what its type costs in a batch, nothing when its type has no cost or it must run alone', () => {
    assert.equal(costInBatch(micro(), 'j0', 'small'), 10);
    assert.equal(costInBatch(micro(), 'j0', 'other'), undefined);
    assert.equal(costInBatch(micro({ solo: ['j0'] }), 'j0', 'small'), undefined);
  });

  it('a batch has room while under maxJobs and under the budget', () => {
    assert.equal(batchHasRoom(micro(), 1, 49), true);
    assert.equal(batchHasRoom(micro(), 1, 50), false);
    assert.equal(batchHasRoom(micro({ maxJobs: 2 }), 2, 0), false);
  });
});
