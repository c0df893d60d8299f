import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Abort } from '../../src/workers/abort.js';

describe("an attempt's signal, made when first read", () => {
  it('aborted after it was read: the signal fires once, with the first reason', () => {
    const abort = new Abort();
    const { signal } = abort;
    let fired = 0;
    signal.addEventListener('abort', () => fired++);
    assert.equal(signal.aborted, false);
    const first = new Error('timed out');
    abort.abort(first);
    abort.abort(new Error('a second reason'));
    assert.equal(signal.aborted, true);
    assert.equal(signal.reason, first);
    assert.equal(fired, 1);
    assert.equal(abort.signal, signal, 'the same signal on every read');
  });

  it('aborted before it was read: the signal is made already aborted, with the reason', () => {
    const abort = new Abort();
    const reason = new Error('cancelled');
    abort.abort(reason);
    const { signal } = abort;
    assert.equal(signal.aborted, true);
    assert.equal(signal.reason, reason);
    assert.throws(
      () => signal.throwIfAborted(),
      (err) => err === reason,
    );
  });

  it('never aborted: a live signal', () => {
    assert.equal(new Abort().signal.aborted, false);
  });
});
