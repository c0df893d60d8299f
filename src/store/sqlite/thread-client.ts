/**
 * The main thread's side of the store thread: one message per event-loop turn holding
 * every operation of that turn, the answers matched back to their callers, and a new
 * store thread when one dies.
 *
 * A write's promise resolves when the store thread answers, which is after the COMMIT
 * that holds it (with synchronous=FULL, after the fsync). Claims, promotions and
 * heartbeats ride along with the next message and their callers do not wait for them;
 * outcomes wait at most LAZY_FLUSH_MS for one.
 *
 * States: starting → available → (the thread dies) down → restarting → available …;
 * any → closed. While available, a rolled-back transaction makes it `rebuilding` until
 * a fresh snapshot is in: claims wait for it. Claims a message carries are reported
 * lost when that message is not stored (rolled back, or the thread died with it).
 */
import { Worker } from 'node:worker_threads';
import { FaultLog, silentLog } from '../../fault-log.js';
import { StoreError } from '../errors.js';
import {
  type Answers,
  type Op,
  type OpResult,
  READ_OPS,
  type Reply,
  type Request,
  type Snapshot,
  type StoreThreadData,
  type WireError,
} from './protocol.js';
import type { SqliteStoreOptions } from './store.js';

/** How long claims and heartbeats may wait for a message that carries them. */
const LAZY_FLUSH_MS = 10;
const DEFAULT_RESTART_DELAY_MS = 1000;
const MAX_RESTART_DELAY_MS = 30_000;

/** An attempt claimed by this process. */
export interface Claim {
  id: string;
  attempt: number;
}

/** What the store does when the thread's picture of the file changes. */
export interface ThreadClientHooks {
  /** The ready index is rebuilt from this picture of the file. */
  rebuild(snapshot: Snapshot): void;
  /** A new store thread is up, or the index was rebuilt after a rollback: claims may go on. */
  ready(): void;
  /** Claims the file did not store: their attempts are abandoned. */
  lost(claims: readonly Claim[]): void;
  /** A transaction stored new callback deliveries. */
  deliveries(): void;
}

interface Pending {
  op: Op;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

interface InFlight {
  entries: Pending[];
  /** Claims this message carries: if it is not stored, they are lost. */
  claims: Claim[];
}

export class StoreThreadClient {
  readonly #path: string;
  readonly #options: SqliteStoreOptions;
  readonly #hooks: ThreadClientHooks;
  #worker: Worker | null = null;
  #seq = 0;
  #queue: Pending[] = [];
  #queueClaims: Claim[] = [];
  readonly #inFlight = new Map<number, InFlight>();
  #flushImmediate: NodeJS.Immediate | null = null;
  #flushTimer: NodeJS.Timeout | null = null;
  #available = false;
  /** The latest write failed as unavailable (disk full, read-only, I/O error): /ready says so until one succeeds. */
  #writeFailing = false;
  #closed = false;
  #closing: Promise<void> | null = null;
  #restartTimer: NodeJS.Timeout | null = null;
  /** A rolled-back transaction: claims wait until the index is rebuilt. */
  #rebuilding = false;
  /** The store thread is down: from its death until a new one is up. */
  readonly #threadFault: FaultLog;
  #observeCommit: ((seconds: number) => void) | null = null;

  constructor(path: string, options: SqliteStoreOptions, hooks: ThreadClientHooks) {
    this.#path = path;
    this.#options = options;
    this.#hooks = hooks;
    const restartMs = options.restartDelayMs ?? DEFAULT_RESTART_DELAY_MS;
    this.#threadFault = new FaultLog(options.log ?? silentLog, {
      what: 'store thread',
      backoff: { initialMs: restartMs, factor: 2, maxMs: Math.max(restartMs, MAX_RESTART_DELAY_MS), jitter: 'none' },
    });
  }

  /** Starts the first store thread; rejects as the thread's open failed. */
  start(): Promise<void> {
    return this.#start(true);
  }

  get available(): boolean {
    return this.#available && !this.#writeFailing && !this.#closed;
  }

  /** Claims may be handed out: the thread is up and the index is not being rebuilt. */
  get claimable(): boolean {
    return this.#available && !this.#rebuilding;
  }

  /** The store thread, for tests that kill it. */
  get thread(): Worker | null {
    return this.#worker;
  }

  observeCommits(observer: ((seconds: number) => void) | null): void {
    this.#observeCommit = observer;
  }

  assertOpen(): void {
    if (this.#closed || this.#closing !== null) throw closedError();
  }

  /** An op whose answer the caller waits for; `lazy` lets it wait up to LAZY_FLUSH_MS for company. */
  call<K extends Op['op']>(op: Extract<Op, { op: K }>, urgency: 'now' | 'lazy' = 'now'): Promise<Answers[K]> {
    if (this.#closed || this.#closing !== null) return Promise.reject(closedError());
    if (!this.#available) {
      return Promise.reject(new StoreError('store_unavailable', 'the store thread is restarting; try again shortly'));
    }
    return new Promise<Answers[K]>((resolve, reject) => {
      this.#queue.push({ op, resolve: resolve as (value: unknown) => void, reject });
      this.#schedule(urgency);
    });
  }

  /** An op whose answer nobody waits for; a failure shows as lost claims or a rebuilt index. */
  send(op: Op, urgency: 'now' | 'lazy'): void {
    if (!this.#available) return;
    this.#queue.push({ op, resolve: () => {}, reject: () => {} });
    this.#schedule(urgency);
  }

  /** A claim the next message carries: reported lost if that message is not stored. */
  carryClaim(id: string, attempt: number): void {
    this.#queueClaims.push({ id, attempt });
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#restartTimer !== null) clearTimeout(this.#restartTimer);
      this.#restartTimer = null;
      const worker = this.#worker;
      if (worker !== null && this.#available) {
        this.#flush();
        const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
        worker.postMessage('close');
        await exited;
      } else if (worker !== null) {
        await worker.terminate();
      }
      this.#closed = true;
      this.#available = false;
      this.#worker = null;
      this.#failAll(new StoreError('store_closed', 'the job store is closed'));
    })();
    return this.#closing;
  }

  async #start(first: boolean): Promise<void> {
    const workerData: StoreThreadData = {
      path: this.#path,
      synchronous: this.#options.synchronous ?? 'full',
      cacheKib: (this.#options.cacheMb ?? 8) * 1024,
      maxPageCount: this.#options.maxPageCount ?? null,
      expireLeases: first,
    };
    const worker = new Worker(new URL('./thread.js', import.meta.url), { workerData });
    this.#worker = worker;
    const snapshot = await new Promise<Snapshot>((resolve, reject) => {
      const onExit = (code: number) => reject(new Error(`the store thread exited with code ${code} while opening`));
      const onError = (error: Error) => reject(error);
      worker.once('error', onError);
      worker.once('exit', onExit);
      worker.once('message', (reply: Reply) => {
        worker.off('error', onError);
        worker.off('exit', onExit);
        if (reply.kind === 'ready') resolve(reply.snapshot);
        else if (reply.kind === 'open_failed') {
          void worker.terminate();
          reject(toError(reply.error));
        } else reject(new Error(`unexpected first message from the store thread: ${reply.kind}`));
      });
    });
    worker.on('message', (reply: Reply) => this.#onReply(reply));
    let died: unknown = null;
    worker.on('error', (error) => {
      died = error;
    });
    worker.once('exit', (code) => this.#onExit(worker, died ?? new Error(`the store thread exited with code ${code}`)));
    this.#hooks.rebuild(snapshot);
    this.#available = true;
    this.#threadFault.succeeded();
    if (!first) this.#hooks.ready();
  }

  #onReply(reply: Reply): void {
    if (reply.kind !== 'done') return;
    if (reply.commitMs !== null) this.#observeCommit?.(reply.commitMs / 1000);
    if (reply.deliveries) this.#hooks.deliveries();
    if (reply.rolledBack) {
      for (const { seq } of reply.replies) this.#hooks.lost(this.#inFlight.get(seq)?.claims ?? []);
      this.#rebuildIndex();
    }
    for (const { seq, results } of reply.replies) {
      const flight = this.#inFlight.get(seq);
      if (flight === undefined) continue;
      this.#inFlight.delete(seq);
      for (const [i, entry] of flight.entries.entries()) {
        const result = results[i];
        if (result !== undefined && !READ_OPS.has(entry.op.op))
          this.#writeFailing = !result.ok && result.error.unavailable;
        settle(entry, result);
      }
    }
  }

  /**
   * After a rolled-back transaction: claims stop until the index is rebuilt from a
   * snapshot taken after every operation sent so far, so that nothing this thread
   * changed since (a claim given back, a promotion) is lost to an older picture.
   */
  #rebuildIndex(): void {
    if (this.#rebuilding) return;
    this.#rebuilding = true;
    this.call({ op: 'snapshot' }).then(
      (snapshot) => {
        this.#rebuilding = false;
        this.#hooks.rebuild(snapshot);
        this.#hooks.ready();
      },
      () => {
        // The store thread died meanwhile: its replacement rebuilds the index when it is up.
        this.#rebuilding = false;
      },
    );
  }

  #onExit(worker: Worker, cause: unknown): void {
    if (this.#worker !== worker) return;
    this.#worker = null;
    this.#available = false;
    if (this.#closed || this.#closing !== null) return;
    const memory = this.#path === ':memory:' || this.#path === '';
    const error = new StoreError(
      'store_unavailable',
      memory
        ? 'the store thread of the in-memory store stopped, and its jobs with it'
        : 'the store thread stopped; the store is restarting it',
    );
    for (const flight of this.#inFlight.values()) this.#hooks.lost(flight.claims);
    this.#hooks.lost(this.#queueClaims);
    this.#failAll(error);
    // A new thread on ':memory:' would open an empty database and pretend nothing was lost.
    if (memory) {
      this.#threadFault.failed(cause);
      return;
    }
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = null;
      this.#start(false).catch((error: unknown) => {
        // The new thread failed to open (the disk is still failing): try again later.
        const failed = this.#worker;
        if (failed !== null) this.#onExit(failed, error);
      });
    }, this.#threadFault.failed(cause));
    this.#restartTimer.unref();
  }

  #failAll(error: Error): void {
    const flights = [...this.#inFlight.values()];
    this.#inFlight.clear();
    const queued = this.#queue;
    this.#queue = [];
    this.#queueClaims = [];
    for (const flight of flights) for (const entry of flight.entries) entry.reject(error);
    for (const entry of queued) entry.reject(error);
  }

  #schedule(urgency: 'now' | 'lazy'): void {
    if (urgency === 'now') {
      this.#flushImmediate ??= setImmediate(() => this.#flush());
    } else if (this.#flushTimer === null && this.#flushImmediate === null) {
      this.#flushTimer = setTimeout(() => this.#flush(), LAZY_FLUSH_MS);
      this.#flushTimer.unref();
    }
  }

  #flush(): void {
    if (this.#flushImmediate !== null) clearImmediate(this.#flushImmediate);
    if (this.#flushTimer !== null) clearTimeout(this.#flushTimer);
    this.#flushImmediate = null;
    this.#flushTimer = null;
    if (this.#queue.length === 0 || this.#worker === null) return;
    const seq = ++this.#seq;
    const entries = this.#queue;
    this.#queue = [];
    this.#inFlight.set(seq, { entries, claims: this.#queueClaims });
    this.#queueClaims = [];
    const request: Request = { seq, ops: entries.map((entry) => entry.op) };
    this.#worker.postMessage(request);
  }
}

function settle(entry: Pending, result: OpResult | undefined): void {
  if (result === undefined) entry.reject(new Error('the store thread sent no answer for an operation'));
  else if (result.ok) entry.resolve(result.value);
  else entry.reject(toError(result.error));
}

function toError(error: WireError): Error {
  if (error.code === 'invalid_cursor' || error.code === 'store_in_use' || error.code === 'unsupported_schema') {
    return new StoreError(error.code, error.message);
  }
  if (error.unavailable) {
    return new StoreError('store_unavailable', `the store cannot write: ${error.message}`);
  }
  const plain = new Error(error.message);
  plain.name = error.name;
  return plain;
}

function closedError(): StoreError {
  return new StoreError('store_closed', 'the job store is closed');
}
