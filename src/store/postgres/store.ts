/**
 * The PostgreSQL job store: any number of Kiln servers share one database and behave as
 * one service (docs/postgres-store.md).
 *
 * - Every decision that involves time is made in SQL against the database's clock; this
 *   process only estimates that clock (`now()`) to turn instants into durations.
 * - A claim is one statement (FOR UPDATE SKIP LOCKED over the claim index, in order);
 *   a micro-batched claim is one short transaction that reads the candidates, forms the
 *   batches here, and claims the chosen ones.
 * - Finishes wait for one another: while one batch is being written, the next gathers,
 *   and each is one call of the `finish` function, fenced per item.
 * - Changes are announced to the other servers with NOTIFY, at most one per 10 ms per
 *   server, after the data committed; the other servers wake, update their paused flag
 *   and due timer, stop attempts that were cancelled, and read the jobs someone watches.
 *   A one-second poll with jitter stands in for lost notifications.
 * - A query that fails for want of the database marks the store unavailable (writes
 *   answer 503, /ready 503); a probe every second brings it back.
 */
import { hostname } from 'node:os';
import pg from 'pg';
import type { Job, JobStatus, NewJob, Progress } from '../../contract/job.js';
import { isTerminal, JOB_STATUSES, PRIORITY_LEVELS } from '../../contract/job.js';
import { canonicalJson } from '../canonical-json.js';
import { StoreError } from '../errors.js';
import type { JobWire } from '../sqlite/protocol.js';
import {
  decodeCursor,
  dueDelivery,
  type ExpiredRow,
  encodeCursor,
  type JobRow,
  jobFromWire,
  parseJson,
  type ScheduleRow,
  toExpiredAttempt,
  toSchedule,
  toSummary,
  toWire,
} from '../sqlite/rows.js';
import {
  type AttemptOutcome,
  type Changes,
  type ClaimedJob,
  type ClaimRequest,
  type ClusterFacet,
  type DeliveryAttempt,
  type DeliveryRecord,
  type DueDelivery,
  type ExpiredAttempt,
  type Finished,
  type FinishItem,
  type FireResult,
  type InsertOutcome,
  type InsertResult,
  type InvalidState,
  isInvalidState,
  type JobStore,
  type ListFilter,
  type NodeInfo,
  type Page,
  type QueueCounts,
  type Schedule,
  type ScheduleDefinition,
  type ScheduleFire,
  type StartedAttempt,
  type StoreEvent,
  type StoreListener,
  type StoreOptions,
  type SubscribeOptions,
  type LimitOverride,
  type TaskLimits,
} from '../store.js';
import { type DeliveryRow, deliveryRecords } from '../delivery-records.js';
import { LIMITS_PREFIX, parseOverrides } from '../settings-codec.js';
import { formBatches } from '../micro-batches.js';
import { dedupeRival, dependencyMessage, invalidState, retryTarget, tickApplies, tickOverlaps } from '../rules.js';
import { migrate } from './migrate.js';
import { type Statements, statements } from './sql.js';
import { StartGroup } from './start-group.js';

export interface PostgresStoreOptions extends StoreOptions {
  url: string;
  schema: string;
  /** Connections of the pool (the listener has one more of its own). */
  poolSize: number;
  /** Worker threads of this server (reported in GET /v1/nodes). */
  threads?: number;
  /** Job lease length (rows of servers without a node lease are listed for three). */
  leaseMs?: number;
  /** How long a beat of this server keeps it alive for the others (KILN_NODE_LEASE_MS). */
  nodeLeaseMs?: number;
  version?: string;
  /** How often an idle server claims anyway, in case a notification was lost. */
  pollMs?: number;
}

/** A job this process runs: what a finish or a progress event is built from. */
interface Running {
  wire: JobWire;
  owner: string;
  previousStart: number | null;
}

/** A finish of an attempt that ran (the finish function's business). */
type EndedItem = FinishItem & { outcome: Exclude<AttemptOutcome, { kind: 'unstarted' }> };

interface PendingFinish {
  items: FinishItem[];
  resolve: (answers: (Finished | null)[]) => void;
  reject: (error: unknown) => void;
}

type Change = [id: string, status: JobStatus];

interface Announcement {
  /** The announcing store. */
  n: string;
  c?: Change[];
  /** Progress: id, attempt, percent, message. */
  p?: [string, number, number, string | null][];
  /** The earliest due time among the changes. */
  d?: number;
  /** Dispatch paused or resumed. */
  x?: boolean;
  /** Callback deliveries were stored (sent by the database's trigger, `n` "db"). */
  k?: 1;
}

/**
 * A job id this store can hold: a UUID as it writes them, in lower case. An id is
 * case-sensitive on every store, though the uuid type would take either case.
 */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const NOTIFY_EVERY_MS = 10;
const NOTIFY_MAX_BYTES = 7900;
/** Characters of a progress message that travel in a notification (the whole one is in the row). */
const PROGRESS_MESSAGE_CHARS = 200;
const PROGRESS_EVERY_MS = 200;
/**
 * How often handlers' starts are written: an attempt whose start is not written yet when
 * its server dies is given back by the rescue, as one that never started.
 */
const STARTS_EVERY_MS = 50;
const PROBE_EVERY_MS = 1000;
const DUE_CACHE_MS = 1000;
const FOLD_EVERY_MS = 60_000;
/** How long a statement may go unanswered before it fails as store_unavailable (upkeep excepted). */
const QUERY_TIMEOUT_MS = 15_000;
/** How often one server looks whether the jobs table needs ANALYZE or VACUUM. */
const UPKEEP_EVERY_MS = 5_000;
/** Candidates read by a micro-batched claim at most. */
const MAX_CANDIDATES = 512;

/** Errors that mean the database cannot be reached or cannot write, not a bad statement. */
const UNAVAILABLE_SQLSTATES = /^(08|53|57P|58)/;

export class PostgresStore implements JobStore {
  /** Shared by every server on the schema: it lists them (`nodes`). */
  readonly cluster: ClusterFacet = this;
  readonly #options: PostgresStoreOptions;
  readonly #pool: pg.Pool;
  readonly #sql: Statements;
  readonly #channel: string;
  readonly #tag = `${hostname()}:${process.pid}:${Math.random().toString(16).slice(2, 10)}`;
  readonly #clock: (() => number) | null;
  /** How this store's announcements start (`n` is their first key). */
  readonly #ownPrefix = `{"n":${JSON.stringify(this.#tag)}`;
  readonly #listeners = new Map<StoreListener, SubscribeOptions | undefined>();
  readonly #running = new Map<string, Running>();
  readonly #owners = new Set<string>();
  #listener: pg.Client | null = null;
  #listenerRetry: NodeJS.Timeout | null = null;
  #available = true;
  #probe: NodeJS.Timeout | null = null;
  #closed = false;
  #closing: Promise<void> | null = null;
  /** Local clock + skew = the database's clock, measured on every heartbeat. */
  #skewMs = 0;
  #due: { at: number | null; readAt: number } | null = null;
  #lastPromote = 0;
  #finishQueue: PendingFinish[] = [];
  #finishing = false;
  #outbox: Change[] = [];
  #outboxProgress: NonNullable<Announcement['p']> = [];
  #outboxDue: number | null = null;
  #outboxPaused: boolean | null = null;
  #notifyTimer: NodeJS.Timeout | null = null;
  #progress = new Map<string, { attempt: number; owner: string; text: string }>();
  #progressTimer: NodeJS.Timeout | null = null;
  readonly #starts = new StartGroup((items) => this.#writeStarts(items), STARTS_EVERY_MS);
  #pollTimer: NodeJS.Timeout | null = null;
  #foldTimer: NodeJS.Timeout | null = null;
  #upkeepTimer: NodeJS.Timeout | null = null;
  #upkeeping = false;
  /** The pause flag as the listeners were last told it (null: never told; the dispatcher reads it at start). */
  #pausedTold: boolean | null = null;
  #remote: Promise<void> = Promise.resolve();

  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(options);
    try {
      await store.#start();
    } catch (error) {
      await store.close().catch(() => undefined);
      throw error;
    }
    return store;
  }

  private constructor(options: PostgresStoreOptions) {
    this.#options = options;
    this.#clock = options.clock ?? null;
    this.#sql = statements(options.schema);
    this.#channel = `${options.schema}_events`;
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
    // An idle connection that breaks must not take the process down; the next query reconnects.
    this.#pool.on('error', () => this.#probeSoon());
  }

  async #start(): Promise<void> {
    const client = await this.#connect();
    try {
      await migrate(client, this.#options.schema);
      const clock = await client.query<{ now: number }>(`SELECT "${this.#options.schema}".now_ms() AS now`);
      this.#skewMs = Math.round((clock.rows[0]?.now ?? Date.now()) - Date.now());
    } finally {
      client.release();
    }
    await this.#listen();
    const poll = this.#options.pollMs ?? 1000;
    const tick = () => {
      this.#pollTimer = setTimeout(tick, poll * (0.8 + Math.random() * 0.4));
      this.#pollTimer.unref();
      this.#emit({ kind: 'ready' });
      void this.#recheckPaused();
    };
    this.#pollTimer = setTimeout(tick, poll);
    this.#pollTimer.unref();
    this.#foldTimer = setInterval(() => {
      this.#pool.query(this.#sql.foldCounts).catch(() => undefined);
    }, FOLD_EVERY_MS);
    this.#foldTimer.unref();
    this.#upkeepTimer = setInterval(() => void this.#upkeep(), UPKEEP_EVERY_MS);
    this.#upkeepTimer.unref();
  }

  #observeCommit: ((seconds: number) => void) | null = null;

  observeCommits(observer: ((seconds: number) => void) | null): void {
    this.#observeCommit = observer;
  }

  get available(): boolean {
    return this.#available && !this.#closed;
  }

  now(): number {
    return this.#clock === null ? Date.now() + this.#skewMs : this.#clock();
  }

  subscribe(listener: StoreListener, options?: SubscribeOptions): () => void {
    this.#listeners.set(listener, options);
    return () => this.#listeners.delete(listener);
  }

  // ── writes ────────────────────────────────────────────────────────────────

  async insert(jobs: NewJob[]): Promise<InsertResult> {
    for (const [index, job] of jobs.entries()) {
      for (const dependency of job.dependsOn) {
        if (!UUID.test(dependency)) return { ok: false, reason: 'unknown_dependency', index, dependency };
      }
    }
    const inBatch = new Set(jobs.map((job) => job.id));
    const needsTransaction = jobs.some(
      (job) => job.idempotencyKey !== null || job.dedupeKey != null || job.dependsOn.some((id) => !inBatch.has(id)),
    );
    for (let round = 0; ; round++) {
      const answer = needsTransaction
        ? await this.#transaction((client) => this.#insert(client, jobs)).catch((error: unknown) => {
            if (isInsertRace(error)) return 'again' as const;
            throw error;
          })
        : await this.#timedWrite(() => this.#withClient((client) => this.#insert(client, jobs)));
      // A twin inserted under the same key meanwhile: again, and this time it is seen.
      if (answer !== 'again') return answer;
      if (round >= 5) throw new Error('an idempotency key kept changing hands during an insert');
    }
  }

  async #insert(client: pg.PoolClient, jobs: NewJob[]): Promise<InsertResult | 'again'> {
    const payloads = jobs.map((job) => JSON.stringify(job.payload ?? null));
    // Idempotency keys seen before answer with their job.
    const keys = jobs.flatMap((job) => (job.idempotencyKey === null ? [] : [job.idempotencyKey]));
    const existingByKey = new Map<string, JobRow>();
    if (keys.length > 0) {
      const rows = await client.query<JobRow>(this.#sql.byKeys, [keys]);
      for (const row of rows.rows) existingByKey.set(row.idempotency_key as string, row);
    }
    const dedupeKeys = jobs.flatMap((job) => (job.dedupeKey == null ? [] : [job.dedupeKey]));
    const liveByDedupe = new Map<string, JobRow>();
    if (dedupeKeys.length > 0) {
      const rows = await client.query<JobRow & { dedupe_key: string }>(this.#sql.liveByDedupe, [dedupeKeys]);
      for (const row of rows.rows) liveByDedupe.set(row.dedupe_key, row);
    }
    const outside = new Set<string>();
    for (const job of jobs) for (const id of job.dependsOn) outside.add(id);
    for (const job of jobs) outside.delete(job.id);
    const parentStatus = new Map<string, JobStatus>();
    if (outside.size > 0) {
      const rows = await client.query<{ id: string; status: JobStatus }>(this.#sql.lockParents, [[...outside]]);
      for (const row of rows.rows) parentStatus.set(row.id, row.status);
    }

    type Decided = {
      job: NewJob;
      index: number;
      decided: 'ready' | 'waiting' | 'failed';
      error: string | null;
      dependsOn: string[];
    };
    const outcomes: (
      { replay: JobRow; dedupe?: 'inflight' | 'result' } | { alias: string; dedupe?: 'inflight' } | { created: Decided }
    )[] = [];
    const batchDedupe = new Map<string, string>();
    const created: Decided[] = [];
    const alias = new Map<string, string>();
    const batchKeys = new Map<string, { type: string; payload: string; id: string }>();
    const batchStatus = new Map<string, 'ready' | 'waiting' | 'failed'>();
    let newPending = 0;
    for (const [index, job] of jobs.entries()) {
      const key = job.idempotencyKey;
      if (key !== null) {
        const canonical = canonicalJson(job.payload ?? null);
        const earlier = batchKeys.get(key);
        if (earlier !== undefined) {
          if (earlier.type !== job.type || earlier.payload !== canonical) {
            return { ok: false, reason: 'idempotency_conflict', index, existingId: earlier.id };
          }
          alias.set(job.id, earlier.id);
          outcomes.push({ alias: earlier.id });
          continue;
        }
        const existing = existingByKey.get(key);
        if (existing !== undefined) {
          if (existing.type !== job.type || canonicalJson(parseJson(existing.payload)) !== canonical) {
            return { ok: false, reason: 'idempotency_conflict', index, existingId: existing.id };
          }
          alias.set(job.id, existing.id);
          outcomes.push({ replay: existing });
          continue;
        }
        batchKeys.set(key, { type: job.type, payload: canonical, id: job.id });
      }
      const dedupeKey = job.dedupeKey ?? null;
      if (dedupeKey !== null) {
        const earlier = batchDedupe.get(dedupeKey);
        const live = liveByDedupe.get(dedupeKey);
        const done =
          earlier !== undefined || live !== undefined || job.reuseMs == null
            ? undefined
            : (await client.query<JobRow>(this.#sql.doneByDedupe, [dedupeKey, job.reuseMs])).rows[0];
        if (earlier !== undefined) {
          alias.set(job.id, earlier);
          outcomes.push({ alias: earlier, dedupe: 'inflight' });
          continue;
        }
        if (live !== undefined || done !== undefined) {
          const standIn = (live ?? done) as JobRow;
          alias.set(job.id, standIn.id);
          outcomes.push({ replay: standIn, dedupe: live !== undefined ? 'inflight' : 'result' });
          continue;
        }
        batchDedupe.set(dedupeKey, job.id);
      }
      const dependsOn = job.dependsOn.map((id) => alias.get(id) ?? id);
      let failedParent: { id: string; status: JobStatus } | null = null;
      let waiting = false;
      for (const parent of dependsOn) {
        const inBatch = batchStatus.get(parent);
        const status: JobStatus | undefined =
          inBatch === undefined ? parentStatus.get(parent) : inBatch === 'failed' ? 'failed' : 'queued';
        if (status === undefined) {
          const known = existingReplay(outcomes, parent);
          if (known === undefined) return { ok: false, reason: 'unknown_dependency', index, dependency: parent };
          if (known === 'failed' || known === 'cancelled') failedParent ??= { id: parent, status: known };
          else if (known !== 'completed') waiting = true;
          continue;
        }
        if (status === 'failed' || status === 'cancelled') failedParent ??= { id: parent, status };
        else if (status !== 'completed') waiting = true;
      }
      const decided = failedParent !== null ? 'failed' : waiting ? 'waiting' : 'ready';
      const error =
        failedParent === null
          ? null
          : JSON.stringify({
              code: 'dependency_failed',
              message: dependencyMessage(failedParent.id, failedParent.status),
              attempt: 0,
            });
      if (decided !== 'failed') newPending++;
      batchStatus.set(job.id, decided);
      const entry: Decided = { job, index, decided, error, dependsOn };
      created.push(entry);
      outcomes.push({ created: entry });
    }

    const edges: [string[], string[], number[]] = [[], [], []];
    for (const { job, dependsOn } of created) {
      for (const [position, parent] of dependsOn.entries()) {
        edges[0].push(job.id);
        edges[1].push(parent);
        edges[2].push(position);
      }
    }
    const column = <T>(pick: (entry: Decided) => T) => created.map(pick);
    const result = await client.query<{
      pending: number;
      id: string | null;
      status: JobStatus;
      run_at: number | null;
      ready_at: number | null;
      finished_at: number | null;
    }>(this.#sql.insert, [
      column((e) => e.job.id),
      column((e) => e.job.type),
      column((e) => e.decided),
      column((e) => e.job.priority),
      column((e) => payloads[e.index]),
      column((e) => e.error),
      column((e) => e.job.maxAttempts),
      column((e) => e.job.timeoutMs),
      column((e) => e.job.backoff.initialMs),
      column((e) => e.job.backoff.factor),
      column((e) => e.job.backoff.maxMs),
      column((e) => e.job.backoff.jitter),
      column((e) => e.job.idempotencyKey),
      column((e) => JSON.stringify(e.dependsOn)),
      column((e) => JSON.stringify(e.job.metadata ?? {})),
      column((e) => e.job.runAt),
      column((e) => e.job.createdAt),
      newPending,
      this.#options.capacity,
      ...edges,
      column((e) => e.job.dedupeKey ?? null),
      column((e) => e.job.group ?? null),
      column((e) => e.job.schedule ?? null),
      column((e) => (e.job.callback == null ? null : JSON.stringify(e.job.callback))),
    ]);
    const pending = Number(result.rows[0]?.pending ?? 0);
    const rows = new Map(result.rows.filter((row) => row.id !== null).map((row) => [row.id as string, row]));
    if (created.length > 0 && rows.size === 0 && newPending > 0 && pending + newPending > this.#options.capacity) {
      return { ok: false, reason: 'queue_full', pending, capacity: this.#options.capacity };
    }
    if (rows.size !== created.length) {
      // A key taken by a transaction that committed after this one looked: roll back, look again.
      if (!afterCommitHooks.has(client)) throw new Error('an insert without keys lost rows');
      return 'again';
    }

    const jobsById = new Map<string, Job>();
    const answer: InsertOutcome[] = [];
    for (const outcome of outcomes) {
      if ('replay' in outcome) {
        const job = jobFromWire(toWire(outcome.replay));
        answer.push(
          outcome.dedupe === undefined ? { created: false, job } : { created: false, job, dedupe: outcome.dedupe },
        );
        continue;
      }
      if ('alias' in outcome) {
        const job = jobsById.get(outcome.alias) as Job;
        answer.push(
          outcome.dedupe === undefined ? { created: false, job } : { created: false, job, dedupe: outcome.dedupe },
        );
        continue;
      }
      const { job: source, error, dependsOn } = outcome.created;
      const row = rows.get(source.id);
      if (row === undefined) throw new Error('an inserted job is missing from the answer');
      const job: Job = {
        id: source.id,
        type: source.type,
        status: row.status,
        priority: source.priority,
        payload: source.payload ?? null,
        result: null,
        error: error === null ? null : (JSON.parse(error) as Job['error']),
        attempts: 0,
        maxAttempts: source.maxAttempts,
        timeoutMs: source.timeoutMs,
        backoff: source.backoff,
        progress: null,
        idempotencyKey: source.idempotencyKey,
        dependsOn,
        metadata: source.metadata ?? {},
        group: source.group ?? null,
        callback: source.callback ?? null,
        runAt: row.run_at,
        createdAt: source.createdAt,
        startedAt: null,
        finishedAt: row.finished_at,
        readyAt: row.ready_at,
        schedule: source.schedule ?? null,
      };
      jobsById.set(job.id, job);
      answer.push({ created: true, job });
    }
    // Aliases of an earlier item of the batch that was itself a replay.
    for (const [i, outcome] of outcomes.entries()) {
      if ('alias' in outcome && answer[i]?.job === undefined) {
        const replayed = outcomes.find((o) => 'replay' in o && o.replay.id === outcome.alias) as
          { replay: JobRow } | undefined;
        if (replayed !== undefined) answer[i] = { created: false, job: jobFromWire(toWire(replayed.replay)) };
      }
    }
    this.#afterCommit(client, () => {
      for (const { job } of answer.filter((o) => o.created)) {
        if (job.runAt !== null) this.#lowerDue(job.runAt);
        this.#changed(job.id, job.type, job.status, () => job, job.runAt);
      }
    });
    return { ok: true, outcomes: answer };
  }

  async claim(request: ClaimRequest): Promise<ClaimedJob[][]> {
    this.#assertOpen();
    if (!this.#available || request.batches <= 0) return [];
    await this.#promoteIfDue();
    const { micro } = request;
    let rows: ClaimRow[];
    let groups: string[][] | null = null;
    if (request.limits !== undefined && request.limits !== null && request.limits.size > 0 && request.types) {
      const claimed = await this.#claimLimited(request, request.limits, request.types);
      rows = claimed.rows;
      groups = claimed.groups;
    } else if ((this.#options.priorityAgingMs ?? 0) > 0) {
      const claimed = await this.#claimAged(request);
      rows = claimed.rows;
      groups = claimed.groups;
    } else if (micro === null || micro.costs.size === 0) {
      rows = (await this.#query<ClaimRow>(this.#sql.claim, [request.owner, request.batches, request.leaseMs])).rows;
    } else {
      const limit = Math.min(MAX_CANDIDATES, request.batches * Math.max(1, micro.maxJobs));
      // The candidates must come in index order; a planner without statistics for a young
      // table may prefer a bitmap scan and a sort of every queued row, so sorting is off here.
      const claimed = await this.#transaction(async (client) => {
        const candidates = (await client.query<{ id: string; type: string }>(this.#sql.claimCandidates, [limit])).rows;
        groups = formBatches(candidates, request.batches, micro);
        const ids = groups.flat();
        if (ids.length === 0) return [];
        return (await client.query<ClaimRow>(this.#sql.claimIds, [request.owner, ids, request.leaseMs])).rows;
      }, 'BEGIN; SET LOCAL enable_sort = off');
      rows = claimed;
    }
    if (rows.length === 0) return [];
    const claimed = new Map<string, ClaimedRow>();
    const withParents: string[] = [];
    for (const row of rows) {
      const wire = toWire(row);
      claimed.set(wire.id, {
        wire,
        previousStart: row.previous_start,
        seq: row.ready_seq ?? 0,
        round: Number(row.round),
      });
      wire.parents = [];
      if (wire.dependsOn.length > 0) withParents.push(...wire.dependsOn);
    }
    if (withParents.length > 0) {
      const parents = await this.#query<{ id: string; type: string; result: string | null }>(this.#sql.parents, [
        [...new Set(withParents)],
      ]).catch(() => null);
      const byId = new Map(parents?.rows.map((row) => [row.id, row]) ?? []);
      for (const { wire } of claimed.values()) {
        wire.parents = wire.dependsOn.map((id) => {
          const row = byId.get(id);
          return row === undefined
            ? { id, type: '', result: null }
            : { id, type: row.type, result: parseJson(row.result) };
        });
      }
    }
    const batches: ClaimedJob[][] =
      groups === null
        ? [...claimed.values()].sort(inClaimOrder).map(({ wire }) => [claimedOf(wire)])
        : (groups as string[][])
            .map((ids) =>
              ids.flatMap((id) => (claimed.has(id) ? [claimedOf((claimed.get(id) as ClaimedRow).wire)] : [])),
            )
            .filter((batch) => batch.length > 0);
    for (const { wire, previousStart } of claimed.values()) {
      this.#running.set(wire.id, { wire, owner: request.owner, previousStart });
      this.#changed(wire.id, wire.type, 'running', () => jobFromWire(wire));
    }
    return batches;
  }

  /** A claim under priority aging: candidates level by level, ordered by effective priority. */
  async #claimAged(request: ClaimRequest): Promise<{ rows: ClaimRow[]; groups: string[][] }> {
    const micro = request.micro ?? {
      costs: new Map<string, number>(),
      budgetMs: 0,
      maxJobs: 1,
      solo: new Set<string>(),
    };
    const limit = Math.min(MAX_CANDIDATES, request.batches * Math.max(1, micro.maxJobs));
    return this.#transaction(async (client) => {
      const candidates = (
        await client.query<{ id: string; type: string }>(this.#sql.claimCandidatesAged, [
          limit,
          this.#options.priorityAgingMs,
        ])
      ).rows;
      const formed = formBatches(candidates, request.batches, micro);
      const ids = formed.flat();
      if (ids.length === 0) return { rows: [] as ClaimRow[], groups: formed };
      const rows = (await client.query<ClaimRow>(this.#sql.claimIds, [request.owner, ids, request.leaseMs])).rows;
      return { rows, groups: formed };
    }, 'BEGIN; SET LOCAL enable_sort = off; SET LOCAL jit = off');
  }

  /**
   * A claim under task limits, applied across every server: under an advisory lock per
   * limited type, each type's allowance is this server's (`allowance`) cut to what the
   * cluster leaves (running attempts of the type, starts inside its rate window, on the
   * database's clock); candidates are read type by type, so a held type's backlog is
   * never read; the starts of rate-limited types are recorded in the same transaction.
   */
  async #claimLimited(
    request: ClaimRequest,
    limits: ReadonlyMap<string, TaskLimits>,
    types: readonly string[],
  ): Promise<{ rows: ClaimRow[]; groups: string[][] }> {
    const aging = this.#options.priorityAgingMs ?? 0;
    const limited = [...limits.keys()].sort();
    const perMs = limited.map((type) => limits.get(type)?.rateLimit?.perMs ?? 0);
    const micro = request.micro ?? {
      costs: new Map<string, number>(),
      budgetMs: 0,
      maxJobs: 1,
      solo: new Set<string>(),
    };
    const perBatch = Math.max(1, micro.maxJobs);
    let passed: string[] = [];
    const result = await this.#transaction(async (client) => {
      await client.query(this.#sql.lockLimitedTypes, [this.#options.schema, limited]);
      const usage = await client.query<{ type: string; running: number; started: number }>(this.#sql.limitUsage, [
        limited,
        perMs,
      ]);
      const left = new Map<string, number>();
      for (const row of usage.rows) {
        const limit = limits.get(row.type);
        let allowed = request.allowance?.get(row.type) ?? Number.POSITIVE_INFINITY;
        if (limit?.concurrency != null) allowed = Math.min(allowed, limit.concurrency - row.running);
        if (limit?.rateLimit != null) allowed = Math.min(allowed, limit.rateLimit.max - row.started);
        left.set(row.type, Math.max(0, allowed));
      }
      const held = limited.filter((type) => left.get(type) === 0);
      const open = types.filter((type) => left.get(type) !== 0);
      const total = Math.min(MAX_CANDIDATES, request.batches * perBatch);
      const counts = open.map((type) => Math.min(total, left.get(type) ?? total));
      const candidates =
        open.length === 0
          ? []
          : (
              await client.query<{ id: string; type: string }>(
                aging > 0 ? this.#sql.claimCandidatesByTypeAged : this.#sql.claimCandidatesByType,
                aging > 0 ? [open, counts, total, aging] : [open, counts, total],
              )
            ).rows;
      // Limited types are counted one job at a time: never in a micro-batch.
      const costs = new Map([...micro.costs].filter(([type]) => !limits.has(type)));
      const taken = new Map<string, number>();
      const fitting = candidates.filter((candidate) => {
        const allowed = left.get(candidate.type);
        if (allowed === undefined) return true;
        const n = taken.get(candidate.type) ?? 0;
        if (n >= allowed) return false;
        taken.set(candidate.type, n + 1);
        return true;
      });
      const formed = formBatches(fitting, request.batches, { ...micro, costs });
      const ids = formed.flat();
      if (held.length > 0 && request.passedOver !== undefined) {
        passed = (await client.query<{ type: string }>(this.#sql.queuedTypes, [held])).rows.map((row) => row.type);
      }
      if (ids.length === 0) return { rows: [] as ClaimRow[], groups: formed };
      const claimed = (await client.query<ClaimRow>(this.#sql.claimIds, [request.owner, ids, request.leaseMs])).rows;
      const rated = claimed.filter((row) => limits.get(row.type)?.rateLimit != null).map((row) => row.type);
      if (rated.length > 0) {
        await client.query(this.#sql.forgetStarts, [limited, perMs]);
        await client.query(this.#sql.recordStarts, [rated]);
      }
      return { rows: claimed, groups: formed };
      // Sorting off keeps each type's probe on jobs_claim_type; the one sort left (the
      // candidates of all types, a few rows) then costs 1e10 to the planner, which must
      // not take that for a reason to JIT-compile the statement (100+ ms a claim).
    }, 'BEGIN; SET LOCAL enable_sort = off; SET LOCAL jit = off');
    for (const type of passed) request.passedOver?.(type);
    return result;
  }

  async #promoteIfDue(): Promise<void> {
    // Promote when a known due time has passed, when nothing is known (start, after a
    // cancel), and once a second for what other servers scheduled without a word.
    const due = this.#due;
    const promote = due === null || (due.at !== null && due.at <= this.now());
    if (!promote && Date.now() - this.#lastPromote < DUE_CACHE_MS) return;
    this.#lastPromote = Date.now();
    const readAt = Date.now();
    const promoted = await this.#query<{ id: string | null; type: string; next_due: number | null }>(this.#sql.promote);
    for (const row of promoted.rows) {
      if (row.id === null) this.#due = { at: row.next_due, readAt };
      else this.#changed(row.id, row.type, 'queued', null);
    }
  }

  async heartbeat(owner: string, ids: string[], leaseMs: number): Promise<string[]> {
    this.#owners.add(owner);
    const valid = ids.filter((id) => UUID.test(id));
    const threads = this.#options.threads ?? 0;
    const sent = Date.now();
    const result = await this.#query<{ renewed: string[]; now: number }>(this.#sql.heartbeat, [
      owner,
      valid,
      leaseMs,
      hostname(),
      process.pid,
      this.#options.version ?? '0.0.0',
      threads,
      Math.min(threads, ids.length),
      this.#options.nodeLeaseMs ?? null,
    ]);
    const row = result.rows[0];
    if (row !== undefined && this.#clock === null) {
      // The database's clock at the middle of the round trip.
      this.#skewMs = Math.round(row.now - (sent + Date.now()) / 2);
    }
    const renewed = new Set(row?.renewed ?? []);
    const lost = ids.filter((id) => !renewed.has(id));
    // Attempts this server no longer holds are forgotten (they are stopped, never finished here).
    for (const id of lost) if (this.#running.get(id)?.owner === owner) this.#running.delete(id);
    return lost;
  }

  started(items: StartedAttempt[]): Promise<void> {
    const mine = items.filter((item) => {
      const running = this.#running.get(item.id);
      if (running === undefined || running.owner !== item.owner || running.wire.attempts !== item.attempt) return false;
      running.wire.startedAt = item.startedAt;
      return true;
    });
    return mine.length === 0 ? Promise.resolve() : this.#starts.add(mine);
  }

  async #writeStarts(items: StartedAttempt[]): Promise<void> {
    const rows = items.filter((item) => UUID.test(item.id)).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    // Concurrent with heartbeats and finishes of the same rows: each of them finds its rows
    // by id and fences in its UPDATE's own WHERE, so a start committed while one waits for
    // a row's lock is seen, not missed (see sql.ts).
    await this.#query(this.#sql.started, [
      rows.map((item) => item.id),
      rows.map((item) => item.attempt),
      rows.map((item) => item.owner),
      rows.map((item) => item.startedAt),
    ]);
  }

  progress(id: string, attempt: number, owner: string, progress: Progress): void {
    const running = this.#running.get(id);
    if (running === undefined || running.owner !== owner || running.wire.attempts !== attempt) return;
    running.wire.progress = progress;
    this.#progress.set(id, { attempt, owner, text: JSON.stringify(progress) });
    this.#outboxProgress.push([id, attempt, progress.percent, progress.message]);
    this.#scheduleNotify();
    this.#progressTimer ??= setTimeout(() => void this.#flushProgress(), PROGRESS_EVERY_MS);
    for (const [listener] of this.#listeners) {
      listener({ kind: 'progress', id, attempt, progress, job: () => jobFromWire(running.wire) });
    }
  }

  async #flushProgress(): Promise<void> {
    this.#progressTimer = null;
    if (this.#progress.size === 0 || this.#closed) return;
    const entries = [...this.#progress.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    this.#progress.clear();
    await this.#query(this.#sql.progress, [
      entries.map(([id]) => id),
      entries.map(([, p]) => p.attempt),
      entries.map(([, p]) => p.owner),
      entries.map(([, p]) => p.text),
    ]).catch(() => undefined);
  }

  finish(items: FinishItem[]): Promise<(Finished | null)[]> {
    if (items.length === 0) return Promise.resolve([]);
    // A finish records its attempt's start itself; should it not land, the start is written
    // after all (fenced like it: it changes nothing if the job has moved on).
    const taken = items.map((item) => this.#starts.take(item.id, item.attempt) ?? this.#startOf(item));
    const written = new Promise<(Finished | null)[]>((resolve, reject) => {
      this.#finishQueue.push({ items, resolve, reject });
      if (!this.#finishing) {
        this.#finishing = true;
        setImmediate(() => void this.#writeFinishes());
      }
    });
    written.then(
      (answers) => {
        for (const [i, answer] of answers.entries()) if (answer === null) this.#restoreStart(taken[i]);
      },
      () => {
        for (const start of taken) this.#restoreStart(start);
      },
    );
    return written;
  }

  /** The start of an attempt that ran (any finish but a rescue's). */
  #startOf(item: FinishItem): StartedAttempt | undefined {
    if (item.expired === true || item.outcome.kind === 'unstarted') return undefined;
    return { id: item.id, attempt: item.attempt, owner: item.owner, startedAt: item.startedAt ?? this.now() };
  }

  #restoreStart(start: StartedAttempt | undefined): void {
    if (start !== undefined) this.#starts.restore(start);
  }

  /** Writes every waiting finish in one call, then the ones that gathered meanwhile. */
  async #writeFinishes(): Promise<void> {
    while (this.#finishQueue.length > 0) {
      // One call holds each job once: an owner's late outcome and a rescue of the same job
      // must each get their own answer, so the later one waits for the next call.
      const group: PendingFinish[] = [];
      const later: PendingFinish[] = [];
      const ids = new Set<string>();
      for (const pending of this.#finishQueue) {
        if (later.length > 0 || pending.items.some((item) => ids.has(item.id))) {
          later.push(pending);
          continue;
        }
        for (const item of pending.items) ids.add(item.id);
        group.push(pending);
      }
      this.#finishQueue = later;
      try {
        const answers = await this.#finishGroup(group.flatMap((pending) => pending.items));
        let offset = 0;
        for (const pending of group) {
          pending.resolve(answers.slice(offset, offset + pending.items.length));
          offset += pending.items.length;
        }
      } catch (error) {
        for (const pending of group) pending.reject(error);
      }
    }
    this.#finishing = false;
  }

  /** Attempts that never started are given back by a statement of their own; the rest go to the finish function. */
  async #finishGroup(items: FinishItem[]): Promise<(Finished | null)[]> {
    const unstarted = items.filter((item) => item.outcome.kind === 'unstarted');
    if (unstarted.length === 0) return this.#finishAttempts(items as EndedItem[]);
    const ended = items.filter((item): item is EndedItem => item.outcome.kind !== 'unstarted');
    const [returned, finished] = await Promise.all([
      this.#returnUnstarted(unstarted),
      ended.length === 0 ? [] : this.#finishAttempts(ended),
    ]);
    const answers = new Map<FinishItem, Finished | null>();
    for (const [i, item] of unstarted.entries()) answers.set(item, returned[i] ?? null);
    for (const [i, item] of ended.entries()) answers.set(item, finished[i] ?? null);
    return items.map((item) => answers.get(item) ?? null);
  }

  async #returnUnstarted(items: FinishItem[]): Promise<(Finished | null)[]> {
    this.#assertOpen();
    const valid = items.filter((item) => UUID.test(item.id)).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const result = await this.#timedWrite(() =>
      this.#query<JobRow>(this.#sql.returnUnstarted, [
        valid.map((item) => item.id),
        valid.map((item) => item.attempt),
        valid.map((item) => item.owner),
        valid.map((item) => item.expired === true),
      ]),
    );
    const returned = new Map(result.rows.map((row) => [row.id, toWire(row)]));
    return items.map((item) => {
      const wire = returned.get(item.id);
      if (wire === undefined) return null;
      const running = this.#running.get(item.id);
      if (running?.owner === item.owner && running.wire.attempts === item.attempt) this.#running.delete(item.id);
      this.#changed(wire.id, wire.type, 'queued', () => jobFromWire(wire));
      return { status: 'queued', others: 0 } satisfies Finished;
    });
  }

  async #finishAttempts(items: EndedItem[]): Promise<(Finished | null)[]> {
    this.#assertOpen();
    const now = this.now();
    // In id order, as every statement that locks several jobs takes them: no deadlocks.
    const valid = items.filter((item) => UUID.test(item.id)).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const kinds = valid.map((item) =>
      item.outcome.kind === 'completed'
        ? 'completed'
        : item.outcome.kind === 'released'
          ? 'released'
          : item.outcome.retryAt === null
            ? 'failed'
            : 'retry',
    );
    const progressOf = (item: FinishItem) => {
      const running = this.#running.get(item.id);
      return running !== undefined && running.owner === item.owner && running.wire.progress !== null
        ? JSON.stringify(running.wire.progress)
        : null;
    };
    const result = await this.#timedWrite(() =>
      this.#query<{
        id: string;
        status: JobStatus;
        run_at: number | null;
        finished_at: number | null;
        is_other: boolean;
      }>(this.#sql.finish, [
        valid.map((item) => item.id),
        valid.map((item) => item.attempt),
        valid.map((item) => item.owner),
        kinds,
        valid.map((item) => (item.outcome.kind === 'completed' ? item.outcome.resultText : null)),
        valid.map((item) => (item.outcome.kind === 'completed' ? null : JSON.stringify(item.outcome.error))),
        valid.map(progressOf),
        valid.map((item) =>
          item.outcome.kind === 'completed' || item.outcome.retryAt === null
            ? null
            : Math.max(0, Math.round(item.outcome.retryAt - now)),
        ),
        valid.map((item) => item.expired === true),
        valid.map((item) => item.startedAt ?? null),
      ]),
    );
    const accepted = new Map<string, (typeof result.rows)[number]>();
    const others: string[] = [];
    for (const row of result.rows) {
      if (row.is_other) others.push(row.id);
      else accepted.set(row.id, row);
    }
    // Jobs whose new state this process does not hold (rescued, dependents) are read once.
    const unknown = [...accepted.keys()].filter((id) => !this.#running.has(id)).concat(others);
    const read = new Map<string, JobWire>();
    if (unknown.length > 0 && this.#anyListener()) {
      const rows = await this.#query<JobRow>(this.#sql.getMany, [unknown]).catch(() => null);
      for (const row of rows?.rows ?? []) read.set(row.id, toWire(row));
    }
    const othersOf = new Map<string, number>();
    const answers = items.map((item) => {
      const row = accepted.get(item.id);
      const running = this.#running.get(item.id);
      if (row === undefined) {
        // Refused: the attempt is void; nothing of it needs keeping here.
        if (running?.owner === item.owner && running.wire.attempts === item.attempt) this.#running.delete(item.id);
        return null;
      }
      let wire: JobWire | undefined = read.get(item.id);
      if (running !== undefined && running.owner === item.owner && running.wire.attempts === item.attempt) {
        this.#running.delete(item.id);
        wire = running.wire;
        wire.status = row.status;
        wire.runAt = row.run_at;
        wire.finishedAt = row.finished_at;
        if (item.startedAt !== undefined) wire.startedAt = item.startedAt;
        if (item.outcome.kind === 'completed') wire.resultText = item.outcome.resultText;
        else wire.error = item.outcome.error;
        if (item.outcome.kind === 'released') wire.attempts = Math.max(0, wire.attempts - 1);
      }
      if (row.run_at !== null) this.#lowerDue(row.run_at);
      const done = wire;
      // This server may already run the next attempt (another server promoted the retry,
      // and this one claimed it before this answer came): the news of this one is stale here.
      const newer = this.#running.get(item.id);
      const stale = newer !== undefined && newer.wire.attempts > item.attempt;
      this.#changed(
        item.id,
        done?.type ?? '',
        row.status,
        done === undefined ? null : () => jobFromWire(done),
        row.run_at,
        !stale,
      );
      return { status: row.status, others: othersOf.get(item.id) ?? 0 } satisfies Finished;
    });
    const otherRows = new Map(result.rows.filter((r) => r.is_other).map((r) => [r.id, r]));
    for (const id of others) {
      const wire = read.get(id);
      const row = otherRows.get(id);
      if (row?.run_at != null) this.#lowerDue(row.run_at);
      const status = row?.status ?? wire?.status ?? 'queued';
      this.#changed(id, wire?.type ?? '', status, wire === undefined ? null : () => jobFromWire(wire));
    }
    // Dependents are reported on the first accepted item (the store cannot tell whose they are cheaply).
    if (others.length > 0) {
      const first = answers.findIndex((answer) => answer !== null);
      const answer = answers[first];
      if (answer) answer.others = others.length;
    }
    if (others.length > 0) this.#emit({ kind: 'ready' });
    return answers;
  }

  async release(items: { id: string; attempt: number; owner: string }[]): Promise<void> {
    const rows = items.filter((item) => UUID.test(item.id)).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    if (rows.length === 0) return;
    const result = await this.#query<JobRow>(this.#sql.release, [
      rows.map((item) => item.id),
      rows.map((item) => item.attempt),
      rows.map((item) => item.owner),
      rows.map((item) => this.#running.get(item.id)?.previousStart ?? null),
    ]);
    for (const row of result.rows) {
      this.#running.delete(row.id);
      const wire = toWire(row);
      this.#changed(wire.id, wire.type, 'queued', () => jobFromWire(wire));
    }
  }

  async cancel(id: string): Promise<Changes | InvalidState | null> {
    if (!UUID.test(id)) return null;
    const answer = await this.#transaction(async (client) => {
      const state = (await client.query<{ status: JobStatus; attempts: number }>(this.#sql.lockJob, [id])).rows[0];
      if (state === undefined) return null;
      if (isTerminal(state.status)) {
        return invalidState(state.status, `job is ${state.status}; only a job that is not finished can be cancelled`);
      }
      const error = JSON.stringify({ code: 'cancelled', message: 'cancelled by request', attempt: state.attempts });
      const job = (await client.query<JobRow>(this.#sql.cancel, [id, error])).rows[0] as JobRow;
      const others = (await client.query<JobRow>(this.#sql.failDependents, [[id], true])).rows;
      return { job: toWire(job), others: others.map(toWire) };
    });
    if (answer === null || 'invalidState' in answer) return answer;
    this.#running.delete(id);
    // It may have been the next due job: read the next one again when asked.
    this.#due = null;
    return this.#applyChanges(answer.job, answer.others);
  }

  async retry(id: string): Promise<Changes | InvalidState | null> {
    if (!UUID.test(id)) return null;
    const answer = await this.#transaction(async (client) => {
      const state = (await client.query<{ status: JobStatus; depends_on: string }>(this.#sql.lockJob, [id])).rows[0];
      if (state === undefined) return null;
      const dependsOn = JSON.parse(state.depends_on) as string[];
      const parents =
        dependsOn.length === 0
          ? new Map<string, JobStatus>()
          : new Map(
              (await client.query<{ id: string; status: JobStatus }>(this.#sql.lockParents, [dependsOn])).rows.map(
                (row) => [row.id, row.status],
              ),
            );
      const target = retryTarget(state.status, dependsOn, (parent) => parents.get(parent));
      if (typeof target !== 'string') return target;
      const rival = (await client.query<{ id: string }>(this.#sql.dedupeRival, [id])).rows[0];
      if (rival !== undefined) return dedupeRival(state.status, rival.id);
      const waiting = target === 'waiting';
      const job = (await client.query<JobRow>(this.#sql.retry, [id, waiting ? 'waiting' : 'queued'])).rows[0];
      const wire = toWire(job as JobRow);
      if (wire.status === 'queued' && dependsOn.length > 0) {
        const parents = await client.query<{ id: string; type: string; result: string | null }>(this.#sql.parents, [
          dependsOn,
        ]);
        const byId = new Map(parents.rows.map((row) => [row.id, row]));
        wire.parents = dependsOn.map((parent) => {
          const row = byId.get(parent);
          return row === undefined
            ? { id: parent, type: '', result: null }
            : { id: parent, type: row.type, result: parseJson(row.result) };
        });
      }
      return { job: wire, others: [] as JobWire[] };
    });
    if (answer === null || 'invalidState' in answer) return answer;
    return this.#applyChanges(answer.job, answer.others);
  }

  async remove(id: string): Promise<'removed' | InvalidState | null> {
    if (!UUID.test(id)) return null;
    return this.#transaction(async (client) => {
      const state = (await client.query<{ status: JobStatus }>(this.#sql.lockJob, [id])).rows[0];
      if (state === undefined) return null;
      if (!isTerminal(state.status)) {
        return invalidState(
          state.status,
          `job is ${state.status}; only a finished job (completed, failed or cancelled) can be removed`,
        );
      }
      await client.query(this.#sql.remove, [id]);
      return 'removed' as const;
    });
  }

  async setPaused(paused: boolean): Promise<void> {
    await this.#query(this.#sql.setPaused, [String(paused)]);
    this.#pausedTold = paused;
    this.#outboxPaused = paused;
    this.#scheduleNotify();
  }

  async purge(status: 'completed' | 'failed' | 'cancelled', ageMs: number, limit: number): Promise<number> {
    const result = await this.#query<{ n: number }>(this.#sql.purge, [status, ageMs, limit]);
    return result.rows[0]?.n ?? 0;
  }

  // ── reads ─────────────────────────────────────────────────────────────────

  async get(id: string): Promise<Job | null> {
    if (!UUID.test(id)) return null;
    const row = (await this.#query<JobRow>(this.#sql.get, [id])).rows[0];
    return row === undefined ? null : this.#jobOf(row);
  }

  async getMany(ids: readonly string[]): Promise<Job[]> {
    const valid = ids.filter((id) => UUID.test(id));
    if (valid.length === 0) return [];
    const rows = (await this.#query<JobRow>(this.#sql.getMany, [valid])).rows;
    return rows.map((row) => this.#jobOf(row));
  }

  /** A job as read, with the progress of its attempt here if that is newer than the stored one. */
  #jobOf(row: JobRow): Job {
    const job = jobFromWire(toWire(row));
    const running = this.#running.get(job.id);
    if (running !== undefined && job.status === 'running' && running.wire.attempts === job.attempts) {
      job.progress = running.wire.progress;
    }
    return job;
  }

  async list(filter: ListFilter): Promise<Page> {
    const limit = Math.floor(filter.limit);
    if (!(limit > 0)) return { jobs: [], nextCursor: null };
    const before = filter.cursor === undefined ? null : decodeCursor(filter.cursor);
    if (before !== null && !UUID.test(before)) {
      throw new StoreError(
        'invalid_cursor',
        `cursor must be a value from a previous page's nextCursor, got "${filter.cursor}"`,
      );
    }
    const where: string[] = [];
    const params: unknown[] = [];
    const statuses = filter.statuses !== undefined && filter.statuses.length > 0 ? [...new Set(filter.statuses)] : null;
    if (statuses !== null) {
      params.push(statuses);
      where.push(`status = ANY($${params.length}::text[])`);
    }
    if (filter.type !== undefined) {
      params.push(filter.type);
      where.push(`type = $${params.length}`);
    }
    if (filter.group !== undefined) {
      params.push(filter.group);
      where.push(`group_key = $${params.length}`);
    }
    if (filter.schedule !== undefined) {
      params.push(filter.schedule);
      where.push(`schedule = $${params.length}`);
    }
    if (before !== null) {
      params.push(before);
      where.push(`id < $${params.length}::uuid`);
    }
    params.push(limit + 1);
    const rows = (await this.#query<JobRow>(this.#sql.list(where, params.length), params)).rows;
    const page = rows.length > limit ? rows.slice(0, limit) : rows;
    const last = page[page.length - 1];
    return {
      jobs: page.map(toSummary),
      nextCursor: rows.length > limit && last !== undefined ? encodeCursor(last.id) : null,
    };
  }

  async counts(): Promise<QueueCounts> {
    const [counts, oldest] = await Promise.all([
      this.#query<{ status: JobStatus; priority: number; n: number }>(this.#sql.counts),
      this.#query<{ at: number | null }>(this.#sql.oldestQueued),
    ]);
    const byStatus = Object.fromEntries(JOB_STATUSES.map((status) => [status, 0])) as Record<JobStatus, number>;
    const queuedByPriority = new Array<number>(PRIORITY_LEVELS).fill(0);
    for (const row of counts.rows) {
      if (!(row.status in byStatus)) continue;
      byStatus[row.status] += Number(row.n);
      if (row.status === 'queued')
        queuedByPriority[row.priority] = (queuedByPriority[row.priority] ?? 0) + Number(row.n);
    }
    const pending = byStatus.waiting + byStatus.scheduled + byStatus.queued + byStatus.retrying;
    return { byStatus, queuedByPriority, pending, oldestQueuedReadyAt: oldest.rows[0]?.at ?? null, exact: true };
  }

  async limitOverrides(): Promise<Map<string, LimitOverride>> {
    const rows = await this.#query<{ key: string; value: string }>(this.#sql.settingsByPrefix, [LIMITS_PREFIX]);
    return parseOverrides(rows.rows.map((row) => [row.key, row.value]));
  }

  async setLimitOverride(type: string, override: LimitOverride | null): Promise<void> {
    if (override === null) await this.#query(this.#sql.deleteSetting, [LIMITS_PREFIX + type]);
    else await this.#query(this.#sql.putSetting, [LIMITS_PREFIX + type, JSON.stringify(override)]);
  }

  async paused(): Promise<boolean> {
    const row = (await this.#query<{ value: string }>(this.#sql.paused)).rows[0];
    return row?.value === 'true';
  }

  async schedules(): Promise<Schedule[]> {
    return (await this.#query<ScheduleRow>(this.#sql.schedules)).rows.map(toSchedule);
  }

  async getSchedule(name: string): Promise<Schedule | null> {
    const row = (await this.#query<ScheduleRow>(this.#sql.schedule, [name])).rows[0];
    return row === undefined ? null : toSchedule(row);
  }

  async putSchedule(schedule: ScheduleDefinition): Promise<{ created: boolean; schedule: Schedule }> {
    const { name, cron, timezone, job, overlap, catchUp, paused, nextRunAt, updatedAt } = schedule;
    const values = [name, cron, timezone, JSON.stringify(job), overlap, catchUp, paused, nextRunAt, updatedAt];
    const row = (await this.#query<ScheduleRow & { created: boolean }>(this.#sql.putSchedule, values)).rows[0];
    if (row === undefined) throw new Error('an upsert of a schedule answered no row');
    return { created: row.created, schedule: toSchedule(row) };
  }

  async removeSchedule(name: string): Promise<boolean> {
    return ((await this.#query(this.#sql.removeSchedule, [name])).rowCount ?? 0) > 0;
  }

  async fireSchedule(fire: ScheduleFire): Promise<FireResult> {
    for (let round = 0; ; round++) {
      try {
        return await this.#transaction((client) => this.#fireSchedule(client, fire));
      } catch (error) {
        if ((error !== AGAIN && !isInsertRace(error)) || round >= 5) throw error;
      }
    }
  }

  async #fireSchedule(client: pg.PoolClient, fire: ScheduleFire): Promise<FireResult> {
    // The row lock orders the servers firing one tick: the second reads the first's next_run_at, and stops.
    const current = (await client.query<ScheduleRow>(this.#sql.lockSchedule, [fire.name])).rows[0];
    if (current === undefined) return { fired: false };
    if (!tickApplies(fire.expected, current)) return { fired: false };
    // The row as this transaction leaves it: each UPDATE returns it.
    let row = current;
    if (fire.expected !== null) {
      row = (await client.query<ScheduleRow>(this.#sql.advanceSchedule, [fire.name, fire.nextRunAt])).rows[0] ?? row;
    }
    const last =
      current.last_job_id === null
        ? undefined
        : (await client.query<{ status: JobStatus }>(this.#sql.statusOf, [current.last_job_id])).rows[0];
    const overlap = tickOverlaps(fire.skipOverlap, last?.status);
    let insert: InsertResult | null = null;
    if (!overlap && fire.job !== null) {
      const answer = await this.#insert(client, [fire.job]);
      if (answer === 'again') throw AGAIN;
      insert = answer;
      const outcome = answer.ok ? answer.outcomes[0] : undefined;
      if (outcome !== undefined) {
        const recorded = [fire.name, fire.runAt, outcome.job.id];
        row = (await client.query<ScheduleRow>(this.#sql.recordScheduleRun, recorded)).rows[0] ?? row;
      }
    }
    return { fired: true, schedule: toSchedule(row), overlap, insert };
  }

  async nextDueAt(): Promise<number | null> {
    if (this.#due !== null && Date.now() - this.#due.readAt < DUE_CACHE_MS) return this.#due.at;
    const readAt = Date.now();
    const at = (await this.#query<{ at: number | null }>(this.#sql.nextDue)).rows[0]?.at ?? null;
    this.#due = { at, readAt };
    return at;
  }

  async expiredLeases(limit: number): Promise<ExpiredAttempt[]> {
    const rows = await this.#query<ExpiredRow>(this.#sql.expired, [limit]);
    return rows.rows.map(toExpiredAttempt);
  }

  async nodes(): Promise<NodeInfo[]> {
    const rows = await this.#query<{
      id: string;
      host: string;
      pid: number;
      version: string;
      threads: number;
      busy: number;
      started_at: number;
      last_seen_at: number;
    }>(this.#sql.nodes, [3 * (this.#options.leaseMs ?? 30_000)]);
    return rows.rows.map((row) => ({
      id: row.id,
      host: row.host,
      pid: row.pid,
      version: row.version,
      threads: row.threads,
      busy: row.busy,
      startedAt: row.started_at,
      lastSeenAt: row.last_seen_at,
    }));
  }

  // ── callback deliveries ───────────────────────────────────────────────────

  async claimDeliveries(owner: string, leaseMs: number, limit: number): Promise<DueDelivery[]> {
    const leased = await this.#query<{
      id: string;
      job_id: string;
      event: string;
      attempts: number;
      body: string | null;
      callback: string | null;
    }>(this.#sql.claimDeliveries, [owner, leaseMs, limit]);
    const first = leased.rows.filter((row) => row.body === null).map((row) => row.job_id);
    const jobs = new Map<string, Job>();
    if (first.length > 0) {
      for (const row of (await this.#query<JobRow>(this.#sql.getMany, [first])).rows) {
        jobs.set(row.id, jobFromWire(toWire(row)));
      }
    }
    return leased.rows.map((row) =>
      dueDelivery(
        {
          id: row.id,
          jobId: row.job_id,
          event: row.event,
          attempt: row.attempts + 1,
          callbackText: row.callback,
          body: row.body,
        },
        jobs.get(row.job_id) ?? null,
      ),
    );
  }

  async recordDeliveryAttempt(attempt: DeliveryAttempt): Promise<boolean> {
    if (!UUID.test(attempt.id)) return false;
    const result = await this.#query(this.#sql.recordDelivery, [
      attempt.id,
      attempt.attempt,
      attempt.owner,
      attempt.body,
      attempt.outcome === 'retry' ? 'pending' : attempt.outcome,
      attempt.httpStatus,
      attempt.error,
      attempt.retryInMs,
      attempt.outcome === 'delivered' ? 'delivered' : 'failed',
    ]);
    return result.rowCount === 1;
  }

  async nextDeliveryAt(): Promise<number | null> {
    return (await this.#query<{ at: number | null }>(this.#sql.nextDelivery)).rows[0]?.at ?? null;
  }

  async deliveries(jobId: string): Promise<DeliveryRecord[] | null> {
    if (!UUID.test(jobId)) return null;
    const [job, rows] = await Promise.all([
      this.#query(this.#sql.statusOf, [jobId]),
      this.#query<DeliveryRow>(this.#sql.deliveriesOf, [jobId]),
    ]);
    return job.rowCount === 0 ? null : deliveryRecords(rows.rows);
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      for (const timer of [this.#probe, this.#pollTimer, this.#notifyTimer, this.#progressTimer, this.#listenerRetry]) {
        if (timer !== null) clearTimeout(timer);
      }
      if (this.#foldTimer !== null) clearInterval(this.#foldTimer);
      if (this.#upkeepTimer !== null) clearInterval(this.#upkeepTimer);
      await this.#flushProgress();
      await this.#starts.flush().catch(() => undefined);
      await this.#notify();
      if (this.#owners.size > 0) await this.#pool.query(this.#sql.stopNode, [[...this.#owners]]).catch(() => undefined);
      this.#closed = true;
      const listener = this.#listener;
      this.#listener = null;
      await listener?.end().catch(() => undefined);
      await this.#pool.end().catch(() => undefined);
    })();
    return this.#closing;
  }

  /**
   * The jobs table churns: every job is updated at least twice and deleted once. Where
   * autovacuum is off or slow to come (its defaults wait a minute, and scale with the
   * table), the claim index fills with dead entries and the planner's statistics go
   * stale. So one server at a time (an advisory lock) looks every few seconds and runs
   * ANALYZE or VACUUM on `jobs` itself when the table's own counters say it is due.
   */
  async #upkeep(): Promise<void> {
    if (this.#upkeeping || this.#closed || !this.#available) return;
    this.#upkeeping = true;
    try {
      // One connection for the lock, the work and the unlock: the lock is the session's.
      await this.#withClient(async (client) => {
        const due = await client.query<{ locked: boolean; analyze: boolean; vacuum: boolean }>(this.#sql.upkeepDue);
        const row = due.rows[0];
        if (row === undefined || !row.locked) return;
        try {
          await client.query(this.#sql.forgetNodes);
          // A VACUUM of a large table may take longer than any statement of the hot path.
          const long = (text: string) => ({ text, query_timeout: 3_600_000 }) as pg.QueryConfig;
          if (row.vacuum) await client.query(long(this.#sql.vacuum));
          else if (row.analyze) await client.query(long(this.#sql.analyze));
        } finally {
          await client.query(this.#sql.upkeepDone);
        }
      });
    } catch {
      // A missed turn is taken again in a few seconds.
    } finally {
      this.#upkeeping = false;
    }
  }

  // ── events and notifications ──────────────────────────────────────────────

  /** Publishes a change here and queues it for the other servers. */
  #changed(
    id: string,
    type: string,
    status: JobStatus,
    job: (() => Job) | null,
    dueAt: number | null = null,
    publishHere = true,
  ): void {
    // A job this server claimed meanwhile (on another connection, whose answer came first)
    // has moved past `queued`: news that it became ready is stale and would void the claim.
    if ((status === 'queued' || status === 'scheduled' || status === 'waiting') && this.#running.has(id)) return;
    this.#outbox.push([id, status]);
    if (dueAt !== null) this.#outboxDue = this.#outboxDue === null ? dueAt : Math.min(this.#outboxDue, dueAt);
    this.#scheduleNotify();
    if (this.#listeners.size === 0 || !publishHere) return;
    const thunk = job ?? (() => stubJob(id, type, status));
    this.#emit({ kind: 'changed', id, type, status, job: thunk });
  }

  #emit(event: StoreEvent): void {
    for (const [listener] of this.#listeners) listener(event);
  }

  #anyListener(): boolean {
    return this.#listeners.size > 0;
  }

  #watched(id: string): boolean {
    for (const [, options] of this.#listeners) if (options?.watching?.(id) === true) return true;
    return false;
  }

  #scheduleNotify(): void {
    if (this.#notifyTimer !== null || this.#closed) return;
    this.#notifyTimer = setTimeout(() => {
      this.#notifyTimer = null;
      void this.#notify();
    }, NOTIFY_EVERY_MS);
  }

  /** Sends what changed since the last notification, split under PostgreSQL's payload limit. */
  async #notify(): Promise<void> {
    const changes = this.#outbox;
    const progress = this.#outboxProgress;
    const due = this.#outboxDue;
    const paused = this.#outboxPaused;
    this.#outbox = [];
    this.#outboxProgress = [];
    this.#outboxDue = null;
    this.#outboxPaused = null;
    if (changes.length === 0 && progress.length === 0 && paused === null) return;
    const payloads: string[] = [];
    let current: Announcement = { n: this.#tag };
    let size = Buffer.byteLength(JSON.stringify(current)) + 64;
    const push = () => {
      payloads.push(JSON.stringify(current));
      current = { n: this.#tag };
      size = Buffer.byteLength(JSON.stringify(current)) + 64;
    };
    if (due !== null) current.d = due;
    if (paused !== null) current.x = paused;
    for (const change of changes) {
      const bytes = Buffer.byteLength(JSON.stringify(change)) + 1;
      if (size + bytes > NOTIFY_MAX_BYTES) push();
      (current.c ??= []).push(change);
      size += bytes;
    }
    // The latest report per job, its message cut short: a notification holds at most 8000 bytes.
    const latest = new Map<string, NonNullable<Announcement['p']>[number]>();
    for (const entry of progress) {
      const message = entry[3] === null ? null : entry[3].slice(0, PROGRESS_MESSAGE_CHARS);
      latest.set(entry[0], [entry[0], entry[1], entry[2], message]);
    }
    for (const entry of latest.values()) {
      const bytes = Buffer.byteLength(JSON.stringify(entry)) + 1;
      if (size + bytes > NOTIFY_MAX_BYTES) push();
      (current.p ??= []).push(entry);
      size += bytes;
    }
    push();
    for (const payload of payloads) {
      try {
        await this.#pool.query('SELECT pg_notify($1, $2)', [this.#channel, payload]);
      } catch {
        // Lost notifications are covered by the other servers' polling.
      }
    }
  }

  async #listen(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.#options.url,
      types: { getTypeParser },
      connectionTimeoutMillis: 5000,
      keepAlive: true,
    });
    client.on('error', () => this.#relisten(client));
    client.on('end', () => this.#relisten(client));
    client.on('notification', (message) => {
      if (message.channel !== this.#channel || message.payload === undefined) return;
      // This server's own announcements come back too: known by their first bytes, never parsed.
      if (message.payload.startsWith(this.#ownPrefix)) return;
      let announcement: Announcement;
      try {
        announcement = JSON.parse(message.payload) as Announcement;
      } catch {
        return;
      }
      if (announcement.n === this.#tag) return;
      this.#remote = this.#remote.then(() => this.#onAnnouncement(announcement)).catch(() => undefined);
    });
    await client.connect();
    await client.query(`LISTEN "${this.#channel}"`);
    if (this.#closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.#listener = client;
  }

  /**
   * The pause flag as the database has it, told to the listeners when it differs from
   * what they were last told: a pause or resume whose notification was lost (or arrived
   * out of order) is noticed within a poll.
   */
  async #recheckPaused(): Promise<void> {
    if (this.#closed || !this.#available) return;
    const paused = await this.paused().catch(() => null);
    if (paused === null || paused === this.#pausedTold) return;
    this.#pausedTold = paused;
    this.#emit({ kind: 'paused', paused });
  }

  #relisten(client: pg.Client): void {
    if (this.#listener !== client || this.#closed) return;
    this.#listener = null;
    client.end().catch(() => undefined);
    const again = (delay: number) => {
      if (this.#closed) return;
      this.#listenerRetry = setTimeout(() => {
        this.#listenerRetry = null;
        this.#listen().then(
          // Whatever happened while nobody listened: look again.
          () => {
            this.#emit({ kind: 'ready' });
            void this.#recheckPaused();
          },
          () => again(Math.min(delay * 2, 5000)),
        );
      }, delay);
      this.#listenerRetry.unref();
    };
    again(100);
  }

  async #onAnnouncement(announcement: Announcement): Promise<void> {
    if (announcement.k !== undefined) this.#emit({ kind: 'deliveries' });
    // A hint only: the flag is read from the database, so announcements that cross are harmless.
    if (announcement.x !== undefined) await this.#recheckPaused();
    if (announcement.d !== undefined) this.#lowerDue(announcement.d);
    const changes = announcement.c ?? [];
    const progress = announcement.p ?? [];
    if (this.#listeners.size === 0) return;
    // The watched jobs are read in one query, and read again if someone started watching meanwhile.
    const read = new Map<string, Job>();
    for (let round = 0; round < 3; round++) {
      const wanted = [
        ...new Set(
          [...changes.map((change) => change[0]), ...progress.map((entry) => entry[0])].filter(
            (id) => !read.has(id) && this.#watched(id),
          ),
        ),
      ];
      if (wanted.length === 0) break;
      const rows = await this.#query<JobRow>(this.#sql.getMany, [wanted]).catch(() => null);
      if (rows === null) break;
      for (const row of rows.rows) read.set(row.id, jobFromWire(toWire(row)));
    }
    let ready = false;
    for (const [id, status] of changes) {
      if (status === 'queued') ready = true;
      const job = read.get(id);
      const type = job?.type ?? '';
      this.#emit({ kind: 'changed', id, type, status, remote: true, job: () => job ?? stubJob(id, type, status) });
    }
    for (const [id, attempt, percent, message] of progress) {
      const job = read.get(id);
      const value = { percent, message };
      if (job !== undefined) job.progress = value;
      this.#emit({ kind: 'progress', id, attempt, progress: value, job: () => job ?? stubJob(id, '', 'running') });
    }
    if (ready) this.#emit({ kind: 'ready' });
  }

  /** A job is due at `at`: the next claim after it promotes. Unknown until read, the rest stays unknown. */
  #lowerDue(at: number): void {
    if (this.#due === null) this.#due = { at, readAt: 0 };
    else if (this.#due.at === null || at < this.#due.at) this.#due = { at, readAt: this.#due.readAt };
  }

  #applyChanges(job: JobWire, others: JobWire[]): Changes {
    this.#changed(job.id, job.type, job.status, () => jobFromWire(job));
    for (const other of others) this.#changed(other.id, other.type, other.status, () => jobFromWire(other));
    if (job.status === 'queued' || others.some((other) => other.status === 'queued')) this.#emit({ kind: 'ready' });
    return { job: jobFromWire(job), others: others.map(jobFromWire) };
  }

  // ── connections ───────────────────────────────────────────────────────────

  #assertOpen(): void {
    if (this.#closed) throw new StoreError('store_closed', 'the job store is closed');
  }

  async #connect(): Promise<pg.PoolClient> {
    try {
      const client = await this.#pool.connect();
      // A checked-out connection that breaks between two statements emits 'error' with no
      // listener of the pool's: the statement in flight fails instead, and release drops it.
      if (!guarded.has(client)) {
        guarded.add(client);
        client.on('error', (error) => this.#markUnavailable(error));
      }
      if (this.#clock !== null) {
        await client.query(`SELECT set_config('kiln.now_ms', $1, false)`, [String(this.#clock())]);
      }
      return client;
    } catch (error) {
      throw this.#translate(error);
    }
  }

  async #query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> {
    this.#assertOpen();
    if (this.#clock !== null) return this.#withClient((client) => client.query<R>(text, values));
    try {
      const result = await this.#pool.query<R>(text, values);
      this.#markAvailable();
      return result;
    } catch (error) {
      throw this.#translate(error);
    }
  }

  async #withClient<T>(work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    this.#assertOpen();
    const client = await this.#connect();
    let broken: unknown;
    try {
      const result = await work(client);
      this.#markAvailable();
      return result;
    } catch (error) {
      broken = error;
      throw this.#translate(error);
    } finally {
      client.release(broken !== undefined && isUnavailable(broken) ? (broken as Error) : undefined);
    }
  }

  async #transaction<T>(work: (client: pg.PoolClient) => Promise<T>, begin = 'BEGIN'): Promise<T> {
    return this.#withClient(async (client) => {
      const started = performance.now();
      await client.query(begin);
      const after: (() => void)[] = [];
      afterCommitHooks.set(client, after);
      try {
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
    });
  }

  /** Runs `hook` once the client's transaction committed (at once outside a transaction). */
  #afterCommit(client: pg.PoolClient, hook: () => void): void {
    const hooks = afterCommitHooks.get(client);
    if (hooks === undefined) hook();
    else hooks.push(hook);
  }

  /** A write outside an explicit transaction (it commits by itself), timed for kiln_store_commit_seconds. */
  async #timedWrite<T>(write: () => Promise<T>): Promise<T> {
    const started = performance.now();
    const result = await write();
    this.#observeCommit?.((performance.now() - started) / 1000);
    return result;
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

  #markUnavailable(_error: unknown): void {
    if (this.#closed) return;
    this.#available = false;
    if (this.#probe !== null) return;
    const probe = () => {
      this.#probe = setTimeout(() => {
        this.#pool.query('SELECT 1').then(
          () => {
            this.#probe = null;
            this.#markAvailable();
          },
          () => probe(),
        );
      }, PROBE_EVERY_MS);
      this.#probe.unref();
    };
    probe();
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
    this.#emit({ kind: 'ready' });
  }
}

/** A claimed row, with what orders it and what the running map keeps. */
interface ClaimedRow {
  wire: JobWire;
  previousStart: number | null;
  seq: number;
  round: number;
}

/** Claim order (the claim index's): priority, the group's turn, ready time, place in line. */
function inClaimOrder(a: ClaimedRow, b: ClaimedRow): number {
  return (
    b.wire.priority - a.wire.priority ||
    a.round - b.round ||
    (a.wire.readyAt ?? 0) - (b.wire.readyAt ?? 0) ||
    a.seq - b.seq
  );
}

type ClaimRow = JobRow & { previous_start: number | null; ready_seq: number | null; round: number | string };

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
 * An insert that lost a race and may simply run again: two batches taking the same keys
 * in other orders (one is rolled back), or a dedupe key taken by a transaction that
 * committed after this one looked (this time its job is seen).
 */
function isInsertRace(error: unknown): boolean {
  const { code, constraint } = error as { code?: unknown; constraint?: unknown };
  return code === '40P01' || (code === '23505' && constraint === 'jobs_dedupe_live');
}

/** Thrown inside a transaction to roll it back and run it again. */
const AGAIN = Symbol('again');

function isRefusal(value: unknown): boolean {
  return typeof value === 'object' && value !== null && (value as { ok?: unknown }).ok === false;
}

/** The status of a job an earlier item of this batch replayed, if one did. */
function existingReplay(
  outcomes: ({ replay: JobRow } | { alias: string } | { created: unknown })[],
  id: string,
): JobStatus | undefined {
  for (const outcome of outcomes) if ('replay' in outcome && outcome.replay.id === id) return outcome.replay.status;
  return undefined;
}

function claimedOf(wire: JobWire): ClaimedJob {
  const { payloadText, resultText: _result, parents, ...summary } = wire;
  return { ...summary, payloadText: payloadText ?? 'null', parents: parents ?? [] };
}

/** What a change says of a job nobody here watches (its listeners only look at id and status). */
function stubJob(id: string, type: string, status: JobStatus): Job {
  return {
    id,
    type,
    status,
    priority: 0,
    payload: null,
    result: null,
    error: null,
    attempts: 0,
    maxAttempts: 0,
    timeoutMs: 0,
    backoff: { initialMs: 0, factor: 1, maxMs: 0, jitter: 'none' },
    progress: null,
    idempotencyKey: null,
    dependsOn: [],
    metadata: {},
    group: null,
    callback: null,
    runAt: null,
    createdAt: 0,
    startedAt: null,
    finishedAt: null,
    readyAt: null,
    schedule: null,
  };
}
