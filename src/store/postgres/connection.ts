/**
 * The connections of the PostgreSQL store: the pool, statements on it, transactions, and
 * whether the database is there. A query that fails for want of the database marks the
 * store unavailable (writes answer 503, /ready 503); a probe every second brings it back.
 */
import pg from 'pg';
import { StoreError } from '../errors.js';
import { isInvalidState } from '../store.js';
import { madeAtOf } from '../../jobs/ids.js';
import { HASH_JOINS, type Prepared } from './sql.js';

export interface ConnectionOptions {
  url: string;
  schema: string;
  /** Connections of the pool (the listener has one more of its own). */
  poolSize: number;
  /** The store's clock (tests pass a fake one); null: the database's. */
  clock: (() => number) | null;
}

/**
 * A job id this store can hold: a UUID as it writes them, in lower case. An id is
 * case-sensitive on every store, though the uuid type would take either case.
 */
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const PROBE_EVERY_MS = 1000;
/** How long a statement may go unanswered before it fails as store_unavailable (upkeep excepted). */
const QUERY_TIMEOUT_MS = 15_000;
/** Errors that mean the database cannot be reached or cannot write, not a bad statement. */
const UNAVAILABLE_SQLSTATES = /^(08|53|57P|58)/;
/**
 * Errors that mean a connection's named statements are out of step with the server:
 * 26000, the statement is gone (DEALLOCATE, DISCARD ALL, a pooler that gave the session
 * to another client) while the driver still sends only its name; 0A000, "cached plan
 * must not change result type" (a table changed what a prepared statement returns). Both
 * come again on every later run on that connection, so it is dropped, not pooled again;
 * both come before the statement runs. 0A000 also names other features PostgreSQL lacks,
 * which no statement of the store uses: one would only cost a few connections.
 */
const STALE_STATEMENT_SQLSTATES = new Set(['26000', '0A000']);
/** Connections for reads of jobs by id (PgConnection.readByIds). */
const READ_CONNECTIONS = 2;
/** `since` for a read of finished jobs in every partition. */
const ANYWHERE = Number.MIN_SAFE_INTEGER;
/** How long before the moment in its id a job may have finished: none did, but servers' clocks differ. */
const CLOCKS_DIFFER_MS = 3_600_000;

export class PgConnection {
  readonly schema: string;
  readonly #options: ConnectionOptions;
  readonly #pool: pg.Pool;
  /** Connections whose statements keep one plan for every value (read). */
  readonly #reads: pg.Pool;
  readonly #onAvailable: () => void;
  #available = true;
  /** Why the database is away, as its last failure said: down for everyone, or out of this server's reach. */
  #down = false;
  #probe: NodeJS.Timeout | null = null;
  #closed = false;
  /** Local clock + skew = the database's clock. */
  #skewMs = 0;
  #observeCommit: ((seconds: number) => void) | null = null;

  /** `onAvailable`: the database answers again after it did not. */
  constructor(options: ConnectionOptions, onAvailable: () => void) {
    this.schema = options.schema;
    this.#options = options;
    this.#onAvailable = onAvailable;
    this.#pool = new pg.Pool({
      connectionString: options.url,
      max: options.poolSize,
      types: { getTypeParser },
      connectionTimeoutMillis: 5000,
      // A database that stops answering without closing the connection: the statement
      // fails (503) rather than waiting with it; the connection is dropped.
      query_timeout: QUERY_TIMEOUT_MS,
      keepAlive: true,
      application_name: 'kiln',
    });
    this.#reads = new pg.Pool({
      connectionString: options.url,
      max: READ_CONNECTIONS,
      types: { getTypeParser },
      connectionTimeoutMillis: 5000,
      query_timeout: QUERY_TIMEOUT_MS,
      keepAlive: true,
      application_name: 'kiln',
      options: '-c plan_cache_mode=force_generic_plan',
    });
    // An idle connection that breaks must not take the process down; the next query reconnects.
    this.#pool.on('error', () => this.#probeSoon());
    this.#reads.on('error', () => this.#probeSoon());
  }

  get available(): boolean {
    return this.#available && !this.#closed;
  }

  /**
   * Whether the database is away for every server, not only for this one: its last
   * failure said it refuses connections or is shutting down or starting up (a restart, a
   * crash). A silence, a timeout or a host out of reach may be this server's alone.
   */
  get databaseDown(): boolean {
    return !this.#available && this.#down && !this.#closed;
  }

  /** Whether the store is closed: no statement runs any more. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Whether the store runs on a clock of its own (tests) rather than the database's. */
  get fakeClock(): boolean {
    return this.#options.clock !== null;
  }

  /** The database's clock as this process estimates it (or the store's own clock). */
  now(): number {
    return this.#options.clock === null ? Date.now() + this.#skewMs : this.#options.clock();
  }

  /** The database's clock read at local time `localMs`: the skew every later `now()` applies. */
  setDatabaseNow(databaseMs: number, localMs: number): void {
    this.#skewMs = Math.round(databaseMs - localMs);
  }

  observeCommits(observer: ((seconds: number) => void) | null): void {
    this.#observeCommit = observer;
  }

  assertOpen(): void {
    if (this.#closed) throw new StoreError('store_closed', 'the job store is closed');
  }

  /** A connection of its own, outside the pool (the listener's). */
  newClient(): pg.Client {
    return new pg.Client({
      connectionString: this.#options.url,
      types: { getTypeParser },
      connectionTimeoutMillis: 5000,
      keepAlive: true,
    });
  }

  async connect(): Promise<pg.PoolClient> {
    try {
      const client = await this.#pool.connect();
      // A checked-out connection that breaks between two statements emits 'error' with no
      // listener of the pool's: the statement in flight fails instead, and release drops it.
      if (!guarded.has(client)) {
        guarded.add(client);
        client.on('error', (error) => this.#markUnavailable(error));
      }
      if (this.#options.clock !== null) {
        await client.query(`SELECT set_config('kiln.now_ms', $1, false)`, [String(this.#options.clock())]);
      }
      return client;
    } catch (error) {
      throw this.#translate(error);
    }
  }

  async query<R extends pg.QueryResultRow>(
    statement: string | Prepared,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    this.assertOpen();
    return this.#rerunIfStale(() =>
      this.#options.clock !== null
        ? this.#onClient((client) => run<R>(client, statement, values))
        : this.#onPool<R>(this.#pool, statement, values),
    );
  }

  async #onPool<R extends pg.QueryResultRow>(
    pool: pg.Pool,
    statement: string | Prepared,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    try {
      const result = await run<R>(pool, statement, values);
      this.#markAvailable();
      return result;
    } catch (error) {
      throw this.#translate(error);
    }
  }

  /**
   * The rows of the jobs `key` names (an id, or ids) by `statement`, a read of both tables
   * whose $1 is `key` and $2 `since` (sql.ts, inBothTables). A job finishes after it was
   * made, and its id (a UUIDv7) holds when that was by its server's clock: so the
   * partitions of `jobs_done` that finished before the oldest of them (less an hour) are
   * left out, and a read by id looks in a few partitions, not in all. Should a job be
   * missing (an id made by a clock far ahead, or no such job), it is looked for everywhere.
   *
   * It runs on connections of its own, where a named statement is planned once for every
   * value. Finished jobs are in the partitions of `jobs_done` (migration 021): a plan made
   * for the values at hand, as PostgreSQL makes for the first runs of a statement and for
   * every run when it costs the partitions it may read, plans each partition the read could
   * look in, about 0.3 ms a read; the one plan leaves out the partitions the values rule
   * out as it runs.
   */
  async readByIds<R extends pg.QueryResultRow>(statement: Prepared, key: string | readonly string[]): Promise<R[]> {
    this.assertOpen();
    const ids = typeof key === 'string' ? [key] : key;
    const read = async (since: number) =>
      (await this.#rerunIfStale(() => this.#onPool<R>(this.#reads, statement, [key, since]))).rows;
    let made = Number.POSITIVE_INFINITY;
    for (const id of ids) made = Math.min(made, madeAtOf(id));
    const since = Number.isFinite(made) ? made - CLOCKS_DIFFER_MS : ANYWHERE;
    const rows = await read(since);
    if (since === ANYWHERE || rows.length >= new Set(ids).size) return rows;
    return read(ANYWHERE);
  }

  /**
   * A statement straight on the pool, its failure not taken as the database's absence
   * (notifications, counters folding, the last words of a closing store).
   */
  poolQuery(statement: string | Prepared, values?: unknown[]): Promise<pg.QueryResult> {
    return this.#rerunIfStale(() => run(this.#pool, statement, values));
  }

  /**
   * `work` on a connection of the pool. `rerun`: the work leaves nothing behind when it
   * fails (it is one statement), so it may run again on another connection after a stale
   * statement failed it; work that commits statement by statement may not.
   */
  async withClient<T>(work: (client: pg.PoolClient) => Promise<T>, rerun = false): Promise<T> {
    this.assertOpen();
    return rerun ? this.#rerunIfStale(() => this.#onClient(work)) : this.#onClient(work);
  }

  async #onClient<T>(work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.connect();
    let broken: unknown;
    try {
      const result = await work(client);
      this.#markAvailable();
      return result;
    } catch (error) {
      broken = error;
      throw this.#translate(error);
    } finally {
      const drop = broken !== undefined && (isUnavailable(broken) || isStaleStatement(broken));
      client.release(drop ? (broken as Error) : undefined);
    }
  }

  /** `work` in a transaction; rolled back when it fails, so it may run again after a stale statement. */
  async transaction<T>(work: (client: pg.PoolClient) => Promise<T>, begin = 'BEGIN'): Promise<T> {
    return this.withClient(async (client) => {
      const started = performance.now();
      const after: (() => void)[] = [];
      afterCommitHooks.set(client, after);
      try {
        // Inside the try: a begin of several statements that fails after its BEGIN leaves
        // the connection in an aborted transaction, which the ROLLBACK ends.
        await client.query(begin);
        const result = await work(client);
        // Answers that change nothing (invalid state, queue full, again) roll back.
        if (result === 'again' || isInvalidState(result) || isRefusal(result)) await client.query('ROLLBACK');
        else {
          await client.query('COMMIT');
          this.#observeCommit?.((performance.now() - started) / 1000);
        }
        if (!(result === 'again' || isInvalidState(result) || isRefusal(result))) for (const hook of after) hook();
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        afterCommitHooks.delete(client);
      }
    }, true);
  }

  /**
   * A statement that joins rows it was given to `jobs` by id, with the settings that keep
   * such a join linear whatever the statistics say (sql.ts, HASH_JOINS), in a transaction
   * of its own; timed for kiln_store_commit_seconds.
   */
  joinById<R extends pg.QueryResultRow>(statement: string | Prepared, values: unknown[]): Promise<pg.QueryResult<R>> {
    return this.transaction((client) => run<R>(client, statement, values), `BEGIN; ${HASH_JOINS}`);
  }

  /** Whether the client runs a transaction of `transaction()`. */
  inTransaction(client: pg.PoolClient): boolean {
    return afterCommitHooks.has(client);
  }

  /** Runs `hook` once the client's transaction committed (at once outside a transaction). */
  afterCommit(client: pg.PoolClient, hook: () => void): void {
    const hooks = afterCommitHooks.get(client);
    if (hooks === undefined) hook();
    else hooks.push(hook);
  }

  /** A write outside an explicit transaction (it commits by itself), timed for kiln_store_commit_seconds. */
  async timedWrite<T>(write: () => Promise<T>): Promise<T> {
    const started = performance.now();
    const result = await write();
    this.#observeCommit?.((performance.now() - started) / 1000);
    return result;
  }

  /** No statement runs any more; the probe stops. */
  markClosed(): void {
    this.#closed = true;
    if (this.#probe !== null) clearTimeout(this.#probe);
  }

  async end(): Promise<void> {
    await Promise.all([this.#pool.end().catch(() => undefined), this.#reads.end().catch(() => undefined)]);
  }

  /**
   * Runs `attempt` again while a stale statement fails it. Nothing it did stays: a lone
   * statement that fails leaves nothing (and these errors come before it runs), a
   * transaction is rolled back. Each failure drops its connection, so once every pooled
   * connection has been tried the pool holds only new ones, which parse the statement
   * anew: at most pool size + 1 runs.
   */
  async #rerunIfStale<T>(attempt: () => Promise<T>): Promise<T> {
    for (let runs = 1; ; runs++) {
      try {
        return await attempt();
      } catch (error) {
        if (!isStaleStatement(error) || runs > this.#options.poolSize) throw error;
      }
    }
  }

  #translate(error: unknown): unknown {
    if (error instanceof StoreError) return error;
    if (isUnavailable(error)) {
      this.#markUnavailable(error);
      return new StoreError('store_unavailable', `the database cannot be reached: ${(error as Error).message}`, {
        cause: error,
      });
    }
    return error;
  }

  #markUnavailable(error: unknown): void {
    if (this.#closed) return;
    // Once a failure of this outage said the database is down, a vaguer one (a connection
    // that broke) does not take it back; only the database answering again does.
    this.#down = (!this.#available && this.#down) || isDatabaseDown(error);
    this.#available = false;
    if (this.#probe !== null) return;
    const probe = (delayMs: number) => {
      this.#probe = setTimeout(() => {
        this.#probeOnce().then(
          () => {
            this.#probe = null;
            this.#markAvailable();
          },
          (failure: unknown) => {
            this.#down ||= isDatabaseDown(failure);
            probe(PROBE_EVERY_MS);
          },
        );
      }, delayMs);
      this.#probe.unref();
    };
    // The first probe at once: a connection that broke says little, a new one says whether
    // the database is down (refused, shutting down, starting up) before anything waits on it.
    probe(0);
  }

  /** `SELECT 1` on a connection of its own: the pool's idle ones may all be broken, and say only that. */
  async #probeOnce(): Promise<void> {
    const client = this.newClient();
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('SELECT 1');
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /** An idle connection broke: see at once whether the database still answers. */
  #probeSoon(): void {
    if (this.#closed) return;
    this.#pool.query('SELECT 1').then(
      () => this.#markAvailable(),
      (error: unknown) => this.#markUnavailable(error),
    );
  }

  #markAvailable(): void {
    if (this.#available || this.#closed) return;
    this.#available = true;
    this.#onAvailable();
  }
}

/** A statement on a pool or a connection: a prepared one by its name (parsed once per connection). */
export function run<R extends pg.QueryResultRow>(
  on: pg.Pool | pg.PoolClient,
  statement: string | Prepared,
  values?: unknown[],
): Promise<pg.QueryResult<R>> {
  if (typeof statement === 'string') return on.query<R>(statement, values);
  return on.query<R>({ name: statement.name, text: statement.text, ...(values === undefined ? {} : { values }) });
}

/** Rows in id order, as every statement that locks several jobs takes them: no deadlocks. */
export function inIdOrder<T extends { id: string }>(items: readonly T[]): T[] {
  return items.filter((item) => UUID.test(item.id)).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

const guarded = new WeakSet<pg.PoolClient>();

const afterCommitHooks = new WeakMap<pg.PoolClient, (() => void)[]>();

function getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown {
  // bigint columns hold ms since the epoch and counts: well inside a double's exact range.
  if (oid === 20) return (value: string) => Number(value);
  return pg.types.getTypeParser(oid, format ?? 'text') as (value: string) => unknown;
}

function isUnavailable(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (UNAVAILABLE_SQLSTATES.test(code)) return true;
    if (/^E[A-Z]+$/.test(code)) return true; // ECONNREFUSED, ECONNRESET, ETIMEDOUT, EPIPE…
  }
  const message = (error as { message?: unknown }).message;
  return (
    typeof message === 'string' &&
    /Connection terminated|connection timeout|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error|not queryable/i.test(
      message,
    )
  );
}

/**
 * A failure that says the database itself is down: connections refused (no server
 * listens), or SQLSTATE 57P01-57P03 (shutting down by an operator or after a crash, or
 * starting up).
 */
function isDatabaseDown(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const code = (error as { code?: unknown }).code;
  if (code === 'ECONNREFUSED' || code === '57P01' || code === '57P02' || code === '57P03') return true;
  // A connection's own error, wrapped by the pool (pg's "Connection terminated due to connection timeout" is not one).
  const cause = (error as { cause?: unknown }).cause;
  return cause !== undefined && cause !== error && isDatabaseDown(cause);
}

function isStaleStatement(error: unknown): boolean {
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && STALE_STATEMENT_SQLSTATES.has(code);
}

function isRefusal(value: unknown): boolean {
  return typeof value === 'object' && value !== null && (value as { ok?: unknown }).ok === false;
}
