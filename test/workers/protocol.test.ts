import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeAnswer, encodeAnswer, type SlotAnswer } from '../../src/workers/protocol.js';

const answer: SlotAnswer = {
  results: [
    { ok: true, resultText: '{"sum":3,"note":"a \\"quoted\\" word"}', ms: 1.25 },
    { ok: false, error: { name: 'TypeError', message: 'bad\ninput "x"', retryable: true }, ms: 0.5 },
    { ok: false, code: 'result_too_large', error: { name: 'ResultTooLargeError', message: 'over', retryable: false } },
    {
      ok: false,
      code: 'snoozed',
      snoozeMs: 250,
      error: { name: 'Snooze', message: 'asked to run again in 250 ms', retryable: true },
      ms: 2,
    },
  ],
  retire: {
    reason: 'crashed',
    threadId: 7,
    cause: 'Error: from a timer',
    culprit: { jobId: '0190b7c2-7a3e-7000-8000-000000000001', attempt: 2 },
    late: true,
  },
};

describe('a message answer written in shared memory', () => {
  it('reads back as the thread wrote it', () => {
    assert.deepEqual(decodeAnswer(encodeAnswer(answer)), answer);
    assert.deepEqual(decodeAnswer(encodeAnswer({ results: [], retire: null })), { results: [], retire: null });
  });

  it('keeps a snooze asked badly as it was asked (NaN, Infinity), for the retry policy to refuse', () => {
    for (const snoozeMs of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -5]) {
      const asked: SlotAnswer = {
        results: [
          { ok: false, code: 'snoozed', snoozeMs, error: { name: 'Snooze', message: 'm', retryable: true }, ms: 1 },
        ],
        retire: null,
      };
      const result = decodeAnswer(encodeAnswer(asked)).results[0];
      assert.ok(result !== undefined && !result.ok && result.code === 'snoozed');
      assert.ok(Object.is(result.snoozeMs, snoozeMs), `${snoozeMs} came back as ${result.snoozeMs}`);
    }
  });

  it('comes through a thread whose handler poisoned JSON.stringify and every object’s toJSON', () => {
    const original = JSON.stringify;
    const prototype = Object.prototype as { toJSON?: () => string };
    prototype.toJSON = () => 'poisoned';
    JSON.stringify = () => '"poisoned"';
    let text: string;
    try {
      text = encodeAnswer(answer);
    } finally {
      JSON.stringify = original;
      delete prototype.toJSON;
    }
    assert.deepEqual(decodeAnswer(text), answer);
  });
});
