/**
 * Leases on PostgreSQL: heartbeats renew the leases of the attempts this server runs
 * (and measure the database's clock), handlers' starts are recorded in groups
 * (start-group.ts), and attempts whose lease ran out are found for the rescuer.
 */
import { jobFromWire } from '../core/rows.js';
import { hostname } from 'node:os';
import { type ExpiredRow, toExpiredAttempt } from '../core/rows.js';
import type { ExpiredAttempt, StartedAttempt } from '../store.js';
import { inIdOrder, UUID } from './connection.js';
import type { StoreContext } from './context.js';
import { StartGroup } from './start-group.js';
import { idIn, statusIs } from './sql.js';

/**
 * How often handlers' starts are written: an attempt whose start is not written yet when
 * its server dies is given back by the rescue, as one that never started.
 */
const STARTS_EVERY_MS = 50;

/** The job lease a lease that ran out while the database was down gets from its return, when none is configured. */
const DEFAULT_LEASE_MS = 30_000;

/** What the rescuer reads of a running job whose lease ran out (core/rows.ts, ExpiredRow). */
const EXPIRED_COLUMNS = [
  'id',
  'type',
  'lease_owner',
  'attempts',
  'attempt_started',
  'max_attempts',
  'backoff_initial_ms',
  'backoff_factor',
  'backoff_max_ms',
  'backoff_jitter',
  'interruptions',
  'interrupted_by',
];

export function leaseStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  return {
    /**
     * Renews the owner's leases on the ids it names (a lease that ran out but was not yet
     * rescued is renewed: the rescue's fence then fails) and records the node; $10: the
     * beats before this one failed (the node rejoins: `rejoined_at`).
     */
    heartbeat: `
WITH held AS MATERIALIZED (
  SELECT r.id FROM (SELECT id FROM unnest($2::uuid[]) AS u(id) ORDER BY id) AS i CROSS JOIN LATERAL (
    SELECT j.id, j.status, j.lease_owner FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
  WHERE r.status = 'running' AND r.lease_owner = $1),
renewed AS (
  UPDATE ${s}.jobs j SET lease_expires_at = ${now} + $3
  WHERE ${idIn('j', 'held')} AND ${statusIs('j', 'running')} AND j.lease_owner = $1
  RETURNING j.id::text AS id),
node AS (
  INSERT INTO ${s}.nodes AS n (id, host, pid, version, threads, busy, started_at, last_seen_at, lease_ms)
  VALUES ($1, $4, $5, $6, $7, $8, ${now}, ${now}, $9)
  ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at, busy = excluded.busy,
    threads = excluded.threads, lease_ms = excluded.lease_ms, stopped_at = NULL,
    rejoined_at = CASE WHEN $10::boolean THEN excluded.last_seen_at ELSE n.rejoined_at END)
SELECT ARRAY(SELECT id FROM renewed) AS renewed, (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now`,
    /**
     * Records handlers' starts ($1 ids, $2 attempts, $3 owners, $4 times), fenced in the
     * UPDATE's own WHERE; rows are locked in id order first, as every statement that locks
     * several jobs takes them.
     */
    started: `
WITH i AS (SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::bigint[]) AS i(id, attempt, owner, at)),
locked AS MATERIALIZED (SELECT j.id FROM ${s}.jobs j WHERE ${idIn('j', 'i')} ORDER BY j.id FOR UPDATE)
UPDATE ${s}.jobs j SET started_at = i.at, attempt_started = true
FROM i WHERE ${idIn('j', 'locked')} AND j.id = i.id
  AND ${statusIs('j', 'running')} AND j.attempts = i.attempt AND j.lease_owner = i.owner`,
    /**
     * Attempts whose lease ran out, oldest first. The job leases of servers whose node
     * lease ran out (not heard of for their lease_ms, within the last day: no job lease is
     * longer) are cut first, in the same statement: the rescue's fence (lease_expires_at <
     * now) then holds for them, and a beat of a server that was only slow renews them
     * again, as for any job lease.
     *
     * Time during which the database was out of everyone's reach counts against no lease:
     * leases count from `since`, the later of the database's own start (a restart, a crash)
     * and the earliest return among the live servers when every one of them has rejoined
     * (their beats failed, then came back: a network or failover that cut them all off).
     * A node silent since before `since` is dead only a node lease after it; a job lease
     * that ran out before it runs out $2 (the job lease) after it. So a server that lost
     * the database keeps its attempts until it could have reached it again.
     */
    expired: `
WITH c AS (SELECT ${now} AS at_ms,
  greatest(${s}.up_since_ms(),
    (SELECT min(coalesce(rejoined_at, 0)) FROM ${s}.nodes
     WHERE stopped_at IS NULL AND lease_ms IS NOT NULL AND last_seen_at + lease_ms >= ${now})) AS since),
dead AS (
  SELECT n.id FROM ${s}.nodes n, c
  WHERE n.stopped_at IS NULL AND n.lease_ms IS NOT NULL AND greatest(n.last_seen_at, c.since) + n.lease_ms < c.at_ms
    AND n.last_seen_at > c.at_ms - 86400000),
cut AS (
  UPDATE ${s}.jobs j SET lease_expires_at = c.at_ms - 1 FROM dead, c
  WHERE j.status = 'running' AND j.lease_owner = dead.id AND j.lease_expires_at >= c.at_ms
  RETURNING ${EXPIRED_COLUMNS.map((column) => `j.${column}`).join(', ')}, j.lease_expires_at)
SELECT id::text AS id, ${EXPIRED_COLUMNS.slice(1).join(', ')}
FROM (SELECT * FROM cut UNION ALL
      SELECT ${EXPIRED_COLUMNS.join(', ')}, lease_expires_at
      FROM ${s}.jobs, c WHERE status = 'running' AND lease_expires_at < c.at_ms
        AND (lease_expires_at >= c.since OR c.since + $2 < c.at_ms)) e
ORDER BY lease_expires_at LIMIT $1`,
  };
}

export class PgLease {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof leaseStatements>;
  readonly #owners = new Set<string>();
  /** Owners whose last beat failed: their next one that lands records that they rejoin. */
  readonly #failedOwners = new Set<string>();
  /** Handlers' starts not written yet (a finish takes its attempt's start out and writes it itself). */
  readonly starts = new StartGroup((items) => this.#writeStarts(items), STARTS_EVERY_MS);

  constructor(ctx: StoreContext) {
    this.#ctx = ctx;
    this.#sql = leaseStatements(ctx.options.schema);
  }

  /** The owners this server beat for (its nodes, stopped when it closes). */
  get owners(): ReadonlySet<string> {
    return this.#owners;
  }

  async heartbeat(owner: string, ids: string[], leaseMs: number): Promise<string[]> {
    this.#owners.add(owner);
    const valid = ids.filter((id) => UUID.test(id));
    const threads = this.#ctx.options.threads ?? 0;
    const sent = Date.now();
    const rejoins = this.#failedOwners.has(owner);
    let result;
    try {
      result = await this.#ctx.db.query<{ renewed: string[]; now: number }>(this.#sql.heartbeat, [
        owner,
        valid,
        leaseMs,
        hostname(),
        process.pid,
        this.#ctx.options.version ?? '0.0.0',
        threads,
        Math.min(threads, ids.length),
        this.#ctx.options.nodeLeaseMs ?? null,
        rejoins,
      ]);
    } catch (error) {
      this.#failedOwners.add(owner);
      throw error;
    }
    this.#failedOwners.delete(owner);
    const row = result.rows[0];
    if (row !== undefined && !this.#ctx.db.fakeClock) {
      // The database's clock at the middle of the round trip.
      this.#ctx.db.setDatabaseNow(row.now, (sent + Date.now()) / 2);
    }
    const renewed = new Set(row?.renewed ?? []);
    const lost = ids.filter((id) => !renewed.has(id));
    // Attempts this server no longer holds are forgotten (they are stopped, never finished here).
    for (const id of lost) if (this.#ctx.running.get(id)?.owner === owner) this.#ctx.running.delete(id);
    return lost;
  }

  started(items: StartedAttempt[]): Promise<void> {
    const mine = items.filter((item) => {
      const running = this.#ctx.running.get(item.id);
      if (running === undefined || running.owner !== item.owner || running.wire.attempts !== item.attempt) return false;
      running.wire.startedAt = item.startedAt;
      return true;
    });
    if (mine.length === 0) return Promise.resolve();
    return this.starts.add(mine).then(() => {
      // Announced once stored, so a reader that hears it reads the job running.
      for (const item of mine) {
        const running = this.#ctx.running.get(item.id);
        if (running === undefined || running.owner !== item.owner || running.wire.attempts !== item.attempt) continue;
        this.#ctx.news.changed(item.id, running.wire.type, 'running', () => jobFromWire(running.wire));
      }
    });
  }

  async #writeStarts(items: StartedAttempt[]): Promise<void> {
    const rows = inIdOrder(items);
    // Concurrent with heartbeats and finishes of the same rows: each of them finds its rows
    // by id and fences in its UPDATE's own WHERE, so a start committed while one waits for
    // a row's lock is seen, not missed (see `started` above).
    await this.#ctx.db.joinById(this.#sql.started, [
      rows.map((item) => item.id),
      rows.map((item) => item.attempt),
      rows.map((item) => item.owner),
      rows.map((item) => item.startedAt),
    ]);
  }

  async expiredLeases(limit: number): Promise<ExpiredAttempt[]> {
    // What this server holds goes first: its starts, so that an attempt of its own that
    // started is never given back as unstarted (its node lease beats before any rescue).
    await this.starts.flush();
    const rows = await this.#ctx.db.query<ExpiredRow>(this.#sql.expired, [
      limit,
      this.#ctx.options.leaseMs ?? DEFAULT_LEASE_MS,
    ]);
    return rows.rows.map(toExpiredAttempt);
  }
}
