import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  T0,
  OWNER,
  newJob,
  insertOk,
  insertOne,
  claimUnstarted,
  claimOne,
  startAttempts,
  completed,
  handlerError,
  finishOne,
  rescueOnce,
  recordEvents,
} from '../../support/store-fixtures.js';
import { type OpenStore, changes, changed } from './context.js';

/** The events a store publishes to its subscribers. */
export function eventsFacet(openStore: OpenStore): void {
  describe('events', () => {
    it('publishes every change with the job as it now is', async () => {
      const { store, clock } = await openStore();
      const events = recordEvents(store);
      const parent = newJob();
      const child = newJob({ dependsOn: [parent.id] });
      const other = newJob({ maxAttempts: 1 });
      await insertOk(store, [parent, child, other]);
      assert.deepEqual(events.seen.splice(0), [
        changed(parent.id, 'queued'),
        changed(child.id, 'waiting'),
        changed(other.id, 'queued'),
      ]);

      const [p, o] = await claimUnstarted(store, 2, OWNER, 100);
      assert.ok(p && o);
      // A claim is no change a reader sees: the jobs show queued until their handlers start.
      assert.deepEqual(events.seen.splice(0), []);
      await startAttempts(store, [p, o]);
      assert.deepEqual(events.seen.splice(0), [changed(parent.id, 'running'), changed(other.id, 'running')]);

      await finishOne(store, p, completed(1));
      assert.deepEqual(events.seen.splice(0), [changed(parent.id, 'completed'), changed(child.id, 'queued')]);

      changes(await store.cancel(child.id));
      assert.deepEqual(events.seen.splice(0), [changed(child.id, 'cancelled')]);
      changes(await store.retry(child.id));
      assert.deepEqual(events.seen.splice(0), [changed(child.id, 'queued')]);

      clock.set(T0 + 101);
      assert.equal(await rescueOnce(store), 1);
      assert.deepEqual(events.seen.splice(0), [changed(other.id, 'failed')]);

      events.stop();
      changes(await store.cancel(child.id));
      assert.deepEqual(events.seen, []);
    });

    it('publishes the dependents a failure or a cancel fails', async () => {
      const { store } = await openStore();
      const a = await insertOne(store);
      const b = await insertOne(store, { dependsOn: [a.id] });
      const c = await insertOne(store);
      const d = await insertOne(store, { dependsOn: [c.id] });
      const attempt = await claimOne(store);
      const events = recordEvents(store);
      await finishOne(store, attempt, { kind: 'failed', error: handlerError(1), retryAt: null });
      changes(await store.cancel(c.id));
      assert.deepEqual(events.seen, [
        changed(a.id, 'failed'),
        changed(b.id, 'failed'),
        changed(c.id, 'cancelled'),
        changed(d.id, 'failed'),
      ]);
      events.stop();
    });
  });
}
