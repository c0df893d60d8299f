import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeCursor, encodeCursor, pageOf, pageSize } from '../../../src/store/core/page.js';
import type { SummaryRow } from '../../../src/store/core/rows.js';
import { jobRow } from '../../support/job-rows.js';
import { StoreError } from '../../../src/store/errors.js';

/** A summary row: only its id matters to paging. */
const summary = (id: string): SummaryRow => jobRow(id);

describe('cursors', () => {
  it('round-trips an id', () => {
    assert.equal(decodeCursor(encodeCursor('0190-abc')), '0190-abc');
  });

  it('refuses a cursor no page gave out', () => {
    for (const cursor of ['', 'a=b', '!!']) {
      assert.throws(
        () => decodeCursor(cursor),
        (error: unknown) =>
          error instanceof StoreError &&
          error.code === 'invalid_cursor' &&
          error.message === `cursor must be a value from a previous page's nextCursor, got "${cursor}"`,
      );
    }
  });
});

describe('pageSize', () => {
  it('takes whole jobs, and none for a limit below one', () => {
    assert.equal(pageSize(20), 20);
    assert.equal(pageSize(2.9), 2);
    assert.equal(pageSize(0.5), null);
    assert.equal(pageSize(0), null);
    assert.equal(pageSize(-3), null);
    assert.equal(pageSize(Number.NaN), null);
  });
});

describe('pageOf', () => {
  it('answers a cursor to the last job shown when the extra row came', () => {
    const page = pageOf(['c', 'b', 'a'].map(summary), 2);
    assert.deepEqual(
      page.jobs.map((job) => job.id),
      ['c', 'b'],
    );
    assert.equal(page.nextCursor, encodeCursor('b'));
  });

  it('answers no cursor on the last page', () => {
    const page = pageOf(['b', 'a'].map(summary), 2);
    assert.equal(page.jobs.length, 2);
    assert.equal(page.nextCursor, null);
    assert.deepEqual(pageOf([], 2), { jobs: [], nextCursor: null });
  });
});
