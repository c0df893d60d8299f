import type Database from 'better-sqlite3';
import { StoreError } from '../errors.js';
import jobs from './migrations/001-jobs.js';
import settings from './migrations/002-settings.js';
import runningLease from './migrations/003-running-lease.js';
import dedupe from './migrations/004-dedupe.js';
import groups from './migrations/005-groups.js';
import schedules from './migrations/006-schedules.js';
import callbacks from './migrations/007-callbacks.js';
import attemptStarted from './migrations/008-attempt-started.js';
import snoozes from './migrations/009-snoozes.js';
import batches from './migrations/010-batches.js';
import trace from './migrations/011-trace.js';
import batchCallbacks from './migrations/012-batch-callbacks.js';
import interruptions from './migrations/013-interruptions.js';

/**
 * Numbered schema steps, one file each: a file at user_version n gets steps n+1.. applied
 * at open, in one exclusive transaction. Append a step to change the schema; never edit
 * one that shipped.
 */
export const MIGRATIONS: readonly string[] = [
  jobs,
  settings,
  runningLease,
  dedupe,
  groups,
  schedules,
  callbacks,
  attemptStarted,
  snoozes,
  batches,
  trace,
  batchCallbacks,
  interruptions,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

export function migrate(db: Database.Database, path: string): void {
  const version = db.pragma('user_version', { simple: true }) as number;
  if (version === SCHEMA_VERSION) return;
  if (version > SCHEMA_VERSION) {
    throw new StoreError(
      'unsupported_schema',
      `the database ${path} has schema version ${version}; this Kiln knows versions up to ${SCHEMA_VERSION}`,
    );
  }
  db.transaction(() => {
    for (let step = version + 1; step <= SCHEMA_VERSION; step++) db.exec(MIGRATIONS[step - 1] as string);
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).exclusive();
}
