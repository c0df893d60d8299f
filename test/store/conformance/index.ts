import { afterEach, describe } from 'node:test';
import type { JobStore } from '../../../src/store/store.js';
import { FakeClock } from '../../support/fake-clock.js';
import { type MakeStore, T0 } from '../../support/store-fixtures.js';
import { insertFacet } from './insert.js';
import { claimFacet } from './claim.js';
import { groupsFacet } from './groups.js';
import { microBatchesFacet } from './micro-batches.js';
import { finishFacet } from './finish.js';
import { snoozeFacet } from './snooze.js';
import { changesFacet } from './changes.js';
import { leasesFacet } from './leases.js';
import { interruptionsFacet } from './interruptions.js';
import { eventsFacet } from './events.js';
import { readsFacet } from './reads.js';
import { deliveriesFacet } from './deliveries.js';
import { settingsFacet } from './settings.js';
import { schedulesFacet } from './schedules.js';
import { lifeCycleFacet } from './life-cycle.js';
import { batchesFacet } from './batches.js';
import type { OpenStore } from './context.js';

/** Defines the behaviour every JobStore must have, as node:test cases. */
export function runStoreConformance(name: string, makeStore: MakeStore): void {
  describe(`${name}: JobStore conformance`, () => {
    const open: JobStore[] = [];
    const openStore: OpenStore = async (capacity = 10_000, priorityAgingMs) => {
      const clock = new FakeClock(T0);
      const store = await makeStore({
        capacity,
        clock: clock.now,
        ...(priorityAgingMs === undefined ? {} : { priorityAgingMs }),
      });
      open.push(store);
      return { store, clock };
    };
    afterEach(async () => {
      for (const store of open.splice(0)) await store.close();
    });

    insertFacet(openStore);
    claimFacet(openStore);
    groupsFacet(openStore);
    microBatchesFacet(openStore);
    finishFacet(openStore);
    snoozeFacet(openStore);
    changesFacet(openStore);
    leasesFacet(openStore);
    interruptionsFacet(openStore);
    eventsFacet(openStore);
    readsFacet(openStore);
    deliveriesFacet(openStore);
    settingsFacet(openStore);
    schedulesFacet(openStore);
    lifeCycleFacet(openStore);
    batchesFacet(openStore);
  });
}
