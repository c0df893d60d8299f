import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FaultLog } from '../../src/fault-log.js';
import { StoreError } from '../../src/store/errors.js';
import { FakeClock } from '../support/fake-clock.js';
import { captureLog, LEVELS } from '../support/log-lines.js';

const full = () => new StoreError('store_unavailable', 'the store cannot write: database or disk is full');

describe('a fault log', () => {
  it('writes one line when a fault starts, one when its cause changes and one when it ends, none per retry', () => {
    const { logger, lines } = captureLog();
    const clock = new FakeClock(1000);
    const fault = new FaultLog(logger, { what: 'dispatch', now: clock.now });
    fault.succeeded();
    assert.equal(lines.length, 0, 'nothing to say while healthy');

    for (let i = 0; i < 500; i++) {
      fault.failed(full());
      clock.advance(10);
    }
    fault.failed(new StoreError('store_unavailable', 'the store thread is restarting; try again shortly'));
    clock.advance(10);
    for (let i = 0; i < 99; i++) fault.failed(full());
    assert.equal(fault.failures, 600);
    fault.succeeded();
    fault.succeeded();

    assert.deepEqual(
      lines.map((line) => [line.level, line.msg]),
      [
        [LEVELS.error, 'dispatch failed; retrying'],
        [LEVELS.error, 'dispatch still failing, with another cause'],
        [LEVELS.error, 'dispatch still failing, with another cause'],
        [LEVELS.info, 'dispatch works again'],
      ],
    );
    const [start, changed, , end] = lines;
    assert.equal(start?.fault, 'dispatch');
    assert.match(String((start?.err as { message?: unknown } | undefined)?.message), /disk is full/);
    assert.equal(changed?.failures, 501);
    assert.match(String((changed?.err as { message?: unknown } | undefined)?.message), /restarting/);
    assert.equal(end?.failures, 600);
    assert.equal(end?.durationMs, 5010);
    assert.equal(fault.failures, 0);
  });

  it('waits longer after each failure in a row, up to its cap, and starts over after a success', () => {
    const { logger } = captureLog();
    const fault = new FaultLog(logger, {
      what: 'heartbeat',
      level: 'warn',
      backoff: { initialMs: 10, factor: 2, maxMs: 100, jitter: 'none' },
    });
    const waits = Array.from({ length: 7 }, () => fault.failed(new Error('down')));
    assert.deepEqual(waits, [10, 20, 40, 80, 100, 100, 100]);
    fault.succeeded();
    assert.equal(fault.failed(new Error('down')), 10);
  });
});
