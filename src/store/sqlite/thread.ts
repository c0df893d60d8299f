/**
 * The store thread: owns the SQLite connection, runs every statement and every
 * COMMIT (and its fsync), so the main thread never blocks on the disk.
 *
 * Group commit: every request that is waiting when the thread turns to its queue runs
 * in one transaction, each operation in a savepoint of its own (one that throws undoes
 * only itself), and one COMMIT makes them all durable; then one message answers them
 * all. While that COMMIT runs, new requests queue up for the next one. A request of
 * reads only runs without a transaction.
 *
 * If SQLite rolls the transaction back (disk full, I/O error) or the COMMIT fails,
 * every write of the group fails as `unavailable`, the counters are rebuilt from the
 * file, and the answer says so, so the main thread rebuilds its index and abandons
 * claims that were never stored. The reads of the group run again, alone, after the
 * rollback: what they read inside it may have included writes that are now undone, and
 * a read needs no free space, so a full disk never fails one.
 */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { StoreError } from '../errors.js';
import { deliveriesAdded } from './deliveries.js';
import { fileHolders } from './file-holders.js';
import { FileState } from './file-state.js';
import { migrate } from './migrate.js';
import { runOperation } from './operations.js';
import {
  type Op,
  type OpResult,
  READ_OPS,
  type Reply,
  type Request,
  type StoreThreadData,
  type WireError,
} from './protocol.js';
import { snapshot } from './reads.js';
import { prepareStatements, type Statements } from './statements.js';

const data = workerData as StoreThreadData;
const port = parentPort;

function open(): { db: Database.Database; s: Statements; file: FileState } {
  const inMemory = data.path === ':memory:' || data.path === '';
  if (!inMemory) mkdirSync(dirname(resolve(data.path)), { recursive: true });
  // No busy wait: the only other holder of the file can be another Kiln process, and it
  // keeps its exclusive lock until it exits.
  const db = new Database(data.path, { timeout: 0 });
  try {
    if (!inMemory) {
      db.pragma('locking_mode = EXCLUSIVE');
      db.pragma('journal_mode = WAL');
    }
    db.pragma(`synchronous = ${data.synchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
    db.pragma(`cache_size = -${data.cacheKib}`);
    db.pragma('temp_store = MEMORY');
    if (data.maxPageCount !== null) db.pragma(`max_page_count = ${data.maxPageCount}`);
    migrate(db, data.path);
    const s = prepareStatements(db);
    // An exclusive transaction takes the file lock now, not at the first write. Holding
    // the lock proves that no other process runs any job of this file, so every lease
    // in it is dead: the rescuer retries those attempts at once.
    let file: FileState | null = null;
    db.transaction(() => {
      if (data.expireLeases) {
        s.expireAll.run();
        s.freeDeliveries.run();
      }
      file = new FileState(s);
    }).exclusive();
    return { db, s, file: file as unknown as FileState };
  } catch (error) {
    db.close();
    if (isBusy(error)) {
      const holders = fileHolders(data.path)
        .map((holder) => `pid ${holder.pid}${holder.command === '' ? '' : ` (${holder.command})`}`)
        .join(', ');
      throw new StoreError(
        'store_in_use',
        `the database ${data.path} is in use by another Kiln process${holders === '' ? '' : `: ${holders}`}`,
        { cause: error },
      );
    }
    throw error;
  }
}

/** A read outside any transaction: what the file holds now. */
function runAlone(file: FileState, op: Op): OpResult {
  try {
    return { ok: true, value: runOperation(file, op) };
  } catch (error) {
    return { ok: false, error: wireError(error, false) };
  }
}

function wireError(error: unknown, unavailable: boolean): WireError {
  const code = (error as { code?: unknown } | null)?.code;
  const sqliteCode = typeof code === 'string' && code.startsWith('SQLITE_') ? code : null;
  return {
    name: error instanceof Error ? error.name : 'Error',
    message: error instanceof Error ? error.message : String(error),
    code: typeof code === 'string' ? code : null,
    // A failing disk or file (full, read-only, I/O error, locked) means the store cannot write now.
    unavailable: unavailable || (sqliteCode !== null && !sqliteCode.startsWith('SQLITE_CONSTRAINT')),
  };
}

function serve(db: Database.Database, s: Statements, file: FileState): void {
  const savepoint = db.transaction((op: Op) => runOperation(file, op));
  let closing = false;
  const handle = (first: Request): void => {
    const requests: Request[] = [first];
    for (;;) {
      const next = receiveMessageOnPort(port as never) as { message: Request | 'close' } | undefined;
      if (next === undefined) break;
      if (next.message === 'close') {
        closing = true;
        break;
      }
      requests.push(next.message);
    }
    const writes = requests.some((request) => request.ops.some((op) => !READ_OPS.has(op.op)));
    const replies = requests.map((request) => ({ seq: request.seq, results: [] as OpResult[] }));
    let lost: unknown = null;
    if (writes) {
      try {
        s.begin.run();
      } catch (error) {
        lost = error;
      }
    }
    for (const [index, request] of requests.entries()) {
      const results = (replies[index] as { results: OpResult[] }).results;
      for (const op of request.ops) {
        if (lost !== null) {
          results.push({ ok: false, error: wireError(lost, true) });
          continue;
        }
        try {
          results.push({ ok: true, value: writes ? savepoint(op) : runOperation(file, op) });
        } catch (error) {
          results.push({ ok: false, error: wireError(error, false) });
          // A write that fails fails its whole group: the main thread cannot tell which of
          // its claims and promotions a partial transaction kept, so none is kept.
          if (writes && !READ_OPS.has(op.op)) lost = error;
        }
      }
    }
    let commitMs: number | null = null;
    if (writes && lost === null) {
      try {
        const started = performance.now();
        s.commit.run();
        commitMs = performance.now() - started;
      } catch (error) {
        lost = error;
      }
    }
    let rolledBack = false;
    let deliveries = false;
    if (lost !== null && writes) {
      if (db.inTransaction) {
        try {
          s.rollback.run();
        } catch {
          // The connection already rolled back; the rebuild reads what the file holds.
        }
      }
      file.rebuild();
      const error = wireError(lost, true);
      for (const [index, request] of requests.entries()) {
        const reply = replies[index] as { results: OpResult[] };
        reply.results = reply.results.map((result, i) => {
          const op = request.ops[i] as Op;
          if (READ_OPS.has(op.op)) return runAlone(file, op);
          return result.ok || result.error.unavailable ? { ok: false, error } : result;
        });
      }
      rolledBack = true;
    }
    if (writes && !rolledBack) deliveries = deliveriesAdded(file);
    const reply: Reply = { kind: 'done', replies, rolledBack, commitMs, deliveries };
    port?.postMessage(reply);
  };
  const close = () => {
    db.close();
    port?.close();
  };
  port?.on('message', (message: Request | 'close') => {
    if (message === 'close' || closing) {
      close();
      return;
    }
    handle(message);
    if (closing) close();
  });
}

function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}

try {
  const { db, s, file } = open();
  serve(db, s, file);
  const ready: Reply = { kind: 'ready', snapshot: snapshot(file) };
  port?.postMessage(ready);
} catch (error) {
  const failed: Reply = {
    kind: 'open_failed',
    error: { ...wireError(error, false), code: error instanceof StoreError ? error.code : null },
  };
  port?.postMessage(failed);
}
