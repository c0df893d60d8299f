import assert from 'node:assert/strict';
import type { FakeClock } from '../../support/fake-clock.js';
import type { JobStatus } from '../../../src/contract/job.js';
import type { SeenEvent } from '../../support/store-fixtures.js';
import { type Changes, type InvalidState, isInvalidState, type JobStore } from '../../../src/store/store.js';

/** Opens a fresh store for one test, closed after it; its clock stands at T0 until the test moves it. */
export type OpenStore = (capacity?: number, priorityAgingMs?: number) => Promise<{ store: JobStore; clock: FakeClock }>;

/** The changes a call answered, failing the test on an invalid state. */
export function changes(value: Changes | InvalidState | null): Changes {
  assert.ok(value !== null && !isInvalidState(value), `expected changes, got ${JSON.stringify(value)}`);
  return value;
}

/** The invalid state a call answered, failing the test on anything else. */
export function invalid(value: unknown): InvalidState {
  assert.ok(isInvalidState(value), `expected an invalid state, got ${JSON.stringify(value)}`);
  return value;
}

/** A `changed` event as recordEvents records it, job() agreeing with the event. */
export const changed = (id: string, status: JobStatus): SeenEvent => ({
  kind: 'changed',
  id,
  status,
  jobStatus: status,
});
