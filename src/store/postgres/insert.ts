/**
 * Inserts on PostgreSQL. A request without idempotency keys, dedupe keys or parents
 * outside it is one statement (admission, rows and dependency edges); any other is a
 * transaction that reads and locks what the plan (core/insert-plan.ts) asks about first.
 */
import type pg from 'pg';
import type { InsertOutcome, InsertResult } from '../store.js';
import type { Job, JobStatus, NewJob } from '../../contract/job.js';
import type { NewBatch } from '../../contract/batch.js';
import type { StoreContext } from './context.js';
import { JOB_COLUMNS, lockParents, PENDING_SQL, prepared, ROUND_BASES } from './sql.js';
import { run, UUID } from './connection.js';
import { canonicalJson } from '../core/canonical-json.js';
import { createdJob, exceedsCapacity, type InsertPlan, planInsert } from '../core/insert-plan.js';
import { jobFromWire, type JobRow, toWire } from '../core/rows.js';

function insertStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  /** The insert of a whole request; `keyed`: some of its jobs carry idempotency keys. */
  const insertText = (keyed: boolean) => `
WITH pending AS (SELECT coalesce(sum(n), 0)::bigint AS n FROM ${s}.counts WHERE status IN ${PENDING_SQL}),
i AS (
  SELECT i.*, coalesce(i.run_at > ${now}, false) AS due_later FROM unnest(
    $1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::text[], $6::text[], $7::int[], $8::bigint[],
    $9::bigint[], $10::float8[], $11::bigint[], $12::text[], $13::text[], $14::text[], $15::text[],
    $16::bigint[], $17::bigint[], $23::text[], $24::text[], $25::text[], $26::text[], $30::text[]) WITH ORDINALITY
    AS i(id, type, decided, priority, payload, error, max_attempts, timeout_ms, backoff_initial_ms,
         backoff_factor, backoff_max_ms, backoff_jitter, idempotency_key, depends_on, metadata, run_at,
         created_at, dedupe_key, group_key, schedule, callback, trace, ord)),
${ROUND_BASES(s, "i WHERE decided = 'ready' AND NOT due_later")},
turns AS (
  SELECT q.ord, b.base + row_number() OVER (PARTITION BY q.priority, q.group_key ORDER BY q.ord) - 1 AS round
  FROM i q JOIN bases b ON b.priority = q.priority AND b.group_key IS NOT DISTINCT FROM q.group_key
  WHERE q.decided = 'ready' AND NOT q.due_later),
ins AS (
  INSERT INTO ${s}.jobs (id, type, status, priority, payload, error, max_attempts, timeout_ms, backoff_initial_ms,
    backoff_factor, backoff_max_ms, backoff_jitter, idempotency_key, depends_on, metadata, run_at, created_at,
    finished_at, ready_at, ready_seq, dedupe_key, group_key, round, schedule, callback, batch, trace)
  SELECT i.id, i.type,
    CASE WHEN decided <> 'ready' THEN decided WHEN due_later THEN 'scheduled' ELSE 'queued' END,
    priority, payload, error, max_attempts, timeout_ms, backoff_initial_ms, backoff_factor, backoff_max_ms,
    backoff_jitter, idempotency_key, depends_on, metadata,
    CASE WHEN decided = 'waiting' OR (decided = 'ready' AND due_later) THEN run_at END,
    created_at,
    CASE WHEN decided = 'failed' THEN ${now} END,
    CASE WHEN decided = 'ready' AND NOT due_later THEN ${now} END,
    CASE WHEN decided = 'ready' AND NOT due_later THEN nextval('${s}.ready_order') END,
    dedupe_key, group_key, coalesce(turns.round, 0), i.schedule, i.callback, $27::uuid, i.trace
  FROM i LEFT JOIN turns ON turns.ord = i.ord WHERE $18 = 0 OR (SELECT n FROM pending) + $18 <= $19
  ORDER BY i.ord
  ${keyed ? 'ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING' : ''}
  RETURNING id::text AS id, status, run_at, ready_at, finished_at),
deps AS (
  INSERT INTO ${s}.job_deps (child, parent, position)
  SELECT d.child, d.parent, d.position FROM unnest($20::uuid[], $21::uuid[], $22::smallint[]) AS d(child, parent, position)
  WHERE d.child IN (SELECT id::uuid FROM ins)),
open AS (SELECT count(*) AS n FROM ins WHERE status NOT IN ('completed', 'failed', 'cancelled')),
b AS (
  INSERT INTO ${s}.batches (id, total, remaining, created_at, finished_at, callback, trace, first_job_id, last_job_id)
  SELECT $27::uuid, (SELECT count(*) FROM ins), open.n, $28::bigint, CASE WHEN open.n = 0 THEN ${now} END, $29::text,
    $31::text, (SELECT id::uuid FROM ins ORDER BY id::uuid LIMIT 1), (SELECT id::uuid FROM ins ORDER BY id::uuid DESC LIMIT 1)
  FROM open WHERE $27::uuid IS NOT NULL AND ($18 = 0 OR (SELECT n FROM pending) + $18 <= $19))
SELECT (SELECT n FROM pending) AS pending, ins.* FROM (SELECT 1) AS one LEFT JOIN ins ON true`;
  return {
    /**
     * One statement for a whole request (without idempotency keys or outside parents):
     * admission against the counted pending jobs, the rows, their dependency edges.
     * With a batch ($27, made at $28, callback $29, trace context $31), its row, counting the jobs inserted and those of
     * them not terminal (core/batches.ts says the same for SQLite), and the range of ids they lie in (migration 020).
     * Answers the pending count and one row per inserted job (none when the queue is full).
     */
    insert: prepared(insertText(true)),
    /**
     * The same for jobs without idempotency keys: a plain insert, where `ON CONFLICT` makes
     * each row a speculative insert (its own confirmation record in the WAL, a check of the
     * unique index) although no NULL key can conflict.
     */
    insertKeyless: prepared(insertText(false)),
    /** Locked like outside parents: a later item of the batch may depend on the job a key replays. */
    byKeys: `SELECT ${JOB_COLUMNS} FROM ${s}.jobs WHERE idempotency_key = ANY($1::text[]) FOR SHARE`,
    /** Unfinished jobs holding dedupe keys ($1), locked like outside parents. */
    liveByDedupe: `SELECT ${JOB_COLUMNS}, dedupe_key FROM ${s}.jobs
      WHERE dedupe_key = ANY($1::text[]) AND status NOT IN ('completed', 'failed', 'cancelled') FOR SHARE`,
    /** The newest completed job of a dedupe key ($1) finished within $2 ms. */
    doneByDedupe: `SELECT ${JOB_COLUMNS} FROM ${s}.jobs
      WHERE dedupe_key = $1 AND status = 'completed' AND finished_at >= ${now} - $2
      ORDER BY finished_at DESC LIMIT 1`,
  };
}

/** A request's jobs and their plan, as one part of an insert statement. */
interface Part {
  jobs: NewJob[];
  plan: Extract<InsertPlan, { ok: true }>;
}

interface InsertedRow {
  pending: number;
  id: string | null;
  status: JobStatus;
  run_at: number | null;
  ready_at: number | null;
  finished_at: number | null;
}

/** A request waiting to share an insert statement with the others that arrive meanwhile. */
interface Gathered {
  jobs: NewJob[];
  resolve: (result: InsertResult) => void;
  reject: (error: unknown) => void;
}

/** Jobs of gathered requests one statement takes at most; more wait for the next. */
const GATHER_MAX_JOBS = 1000;

export class PgInsert {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof insertStatements>;
  #gathered: Gathered[] = [];
  #writing = false;

  constructor(ctx: StoreContext) {
    this.#ctx = ctx;
    this.#sql = insertStatements(ctx.options.schema);
  }

  async insert(jobs: NewJob[], batch?: NewBatch): Promise<InsertResult> {
    for (const [index, job] of jobs.entries()) {
      for (const dependency of job.dependsOn) {
        if (!UUID.test(dependency)) return { ok: false, reason: 'unknown_dependency', index, dependency };
      }
    }
    const inBatch = new Set(jobs.map((job) => job.id));
    const needsTransaction = jobs.some(
      (job) => job.idempotencyKey !== null || job.dedupeKey != null || job.dependsOn.some((id) => !inBatch.has(id)),
    );
    // A request that reads nothing first shares its statement with the others that arrive meanwhile.
    if (!needsTransaction && batch === undefined) return this.#gather(jobs);
    for (let round = 0; ; round++) {
      const answer = needsTransaction
        ? await this.#ctx.db
            .transaction((client) => this.insertIn(client, jobs, batch))
            .catch((error: unknown) => {
              if (isInsertRace(error)) return 'again' as const;
              throw error;
            })
        : // Without keys or outside parents, the insert is one statement: it may run again.
          await this.#ctx.db.timedWrite(() =>
            this.#ctx.db.withClient((client) => this.insertIn(client, jobs, batch), true),
          );
      // A twin inserted under the same key meanwhile: again, and this time it is seen.
      if (answer !== 'again') return answer;
      if (round >= 5) throw new Error('an idempotency key kept changing hands during an insert');
    }
  }

  /** Inserts on a connection of the caller's (inside its transaction, when it runs one). */
  async insertIn(client: pg.PoolClient, jobs: NewJob[], batch?: NewBatch): Promise<InsertResult | 'again'> {
    const keys = jobs.flatMap((job) => (job.idempotencyKey === null ? [] : [job.idempotencyKey]));
    const plan = await this.#plan(client, jobs, keys);
    if (!plan.ok) return plan;
    const part = { jobs, plan };
    const { pending, rows } = await this.#write(client, [part], keys.length > 0, batch);
    if (
      plan.created.length > 0 &&
      rows.size === 0 &&
      exceedsCapacity(pending, plan.newPending, this.#ctx.options.capacity)
    ) {
      return { ok: false, reason: 'queue_full', pending, capacity: this.#ctx.options.capacity };
    }
    if (rows.size !== plan.created.length) {
      // A key taken by a transaction that committed after this one looked: roll back, look again.
      if (!this.#ctx.db.inTransaction(client)) throw new Error('an insert without keys lost rows');
      return 'again';
    }
    return this.#answer(client, part, rows);
  }

  /**
   * Requests without keys, dedupe keys, outside parents or a batch, gathered: while one
   * statement is written, the next gathers, and each is one insert of every waiting
   * request's jobs. A single POST's insert is mostly what any statement costs (about
   * 0.4 ms of the database's time for one row, 4 ms for a hundred), so requests that
   * arrive together share it. Each request is admitted whole, as alone: when the
   * gathered jobs do not all fit the queue, each request is inserted by itself, in order.
   */
  #gather(jobs: NewJob[]): Promise<InsertResult> {
    return new Promise((resolve, reject) => {
      this.#gathered.push({ jobs, resolve, reject });
      if (!this.#writing) {
        this.#writing = true;
        setImmediate(() => void this.#writeGathered());
      }
    });
  }

  async #writeGathered(): Promise<void> {
    try {
      while (this.#gathered.length > 0) {
        const group = this.#takeGathered();
        try {
          const answers = await this.#ctx.db.timedWrite(() =>
            this.#ctx.db.withClient((client) => this.#insertGathered(client, group), true),
          );
          for (const [i, request] of group.entries()) request.resolve(answers[i] as InsertResult);
        } catch (error) {
          for (const request of group) request.reject(error);
        }
      }
    } finally {
      this.#writing = false;
    }
  }

  /** The waiting requests, first come first, up to GATHER_MAX_JOBS jobs (at least one request). */
  #takeGathered(): Gathered[] {
    let jobs = 0;
    let taken = 0;
    for (const request of this.#gathered) {
      if (taken > 0 && jobs + request.jobs.length > GATHER_MAX_JOBS) break;
      jobs += request.jobs.length;
      taken++;
    }
    return this.#gathered.splice(0, taken);
  }

  async #insertGathered(client: pg.PoolClient, group: Gathered[]): Promise<InsertResult[]> {
    const answers: (InsertResult | undefined)[] = [];
    const parts: (Part & { at: number })[] = [];
    for (const [at, request] of group.entries()) {
      const plan = await this.#plan(client, request.jobs, []);
      if (plan.ok) parts.push({ jobs: request.jobs, plan, at });
      else answers[at] = plan;
    }
    const created = parts.reduce((sum, part) => sum + part.plan.created.length, 0);
    const newPending = parts.reduce((sum, part) => sum + part.plan.newPending, 0);
    const { pending, rows } = await this.#write(client, parts, false);
    if (created > 0 && rows.size === 0 && exceedsCapacity(pending, newPending, this.#ctx.options.capacity)) {
      // Not all of them fit: each request alone, as it would have been.
      for (const part of parts) answers[part.at] = (await this.insertIn(client, part.jobs)) as InsertResult;
      return answers as InsertResult[];
    }
    if (rows.size !== created) throw new Error('an insert without keys lost rows');
    for (const part of parts) answers[part.at] = this.#answer(client, part, rows);
    return answers as InsertResult[];
  }

  /** What was stored before decides each job's fate: keys seen, live dedupe keys, parents' states. */
  async #plan(client: pg.PoolClient, jobs: NewJob[], keys: string[]): Promise<InsertPlan> {
    // Idempotency keys seen before answer with their job.
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
    const parentStatus =
      outside.size > 0 ? await lockParents(client, this.#ctx.shared, [...outside]) : new Map<string, JobStatus>();
    const planning = planInsert(jobs, {
      byKey: (key) => existingByKey.get(key),
      liveByDedupe: (key) => liveByDedupe.get(key),
      statusOf: (id) => parentStatus.get(id),
      canonicalPayload: (index) => canonicalJson(jobs[index]?.payload ?? null),
    });
    let step = planning.next();
    while (step.done !== true) {
      const { dedupeKey, reuseMs } = step.value;
      step = planning.next((await client.query<JobRow>(this.#sql.doneByDedupe, [dedupeKey, reuseMs])).rows[0]);
    }
    return step.value;
  }

  /**
   * One statement for the jobs the parts create, admitted together: the pending count, and
   * the rows inserted by id (none when they do not all fit the queue).
   */
  async #write(
    client: pg.PoolClient,
    parts: readonly Part[],
    keyed: boolean,
    batch?: NewBatch,
  ): Promise<{ pending: number; rows: Map<string, InsertedRow> }> {
    const edges: [string[], string[], number[]] = [[], [], []];
    const entries = parts.flatMap(({ jobs, plan }) =>
      plan.created.map((entry) => ({ ...entry, job: jobs[entry.index] as NewJob })),
    );
    for (const { job, dependsOn } of entries) {
      for (const [position, parent] of dependsOn.entries()) {
        edges[0].push(job.id);
        edges[1].push(parent);
        edges[2].push(position);
      }
    }
    const column = <T>(pick: (entry: (typeof entries)[number]) => T) => entries.map(pick);
    const result = await run<InsertedRow>(client, keyed ? this.#sql.insert : this.#sql.insertKeyless, [
      column((e) => e.job.id),
      column((e) => e.job.type),
      column((e) => e.decided),
      column((e) => e.job.priority),
      column((e) => JSON.stringify(e.job.payload ?? null)),
      column((e) => (e.error === null ? null : JSON.stringify(e.error))),
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
      parts.reduce((sum, part) => sum + part.plan.newPending, 0),
      this.#ctx.options.capacity,
      ...edges,
      column((e) => e.job.dedupeKey ?? null),
      column((e) => e.job.group ?? null),
      column((e) => e.job.schedule ?? null),
      column((e) => (e.job.callback == null ? null : JSON.stringify(e.job.callback))),
      batch?.id ?? null,
      batch?.createdAt ?? null,
      batch?.callback == null ? null : JSON.stringify(batch.callback),
      column((e) => e.job.trace ?? null),
      batch?.trace ?? null,
    ]);
    return {
      pending: Number(result.rows[0]?.pending ?? 0),
      rows: new Map(result.rows.filter((row) => row.id !== null).map((row) => [row.id as string, row])),
    };
  }

  /** A part's answer from the rows its statement inserted; the news of them goes out once they are committed. */
  #answer(client: pg.PoolClient, { jobs, plan }: Part, rows: Map<string, InsertedRow>): InsertResult {
    const jobsById = new Map<string, Job>();
    const answer: InsertOutcome[] = [];
    for (const outcome of plan.outcomes) {
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
      const { index, error, dependsOn } = outcome.created;
      const source = jobs[index] as NewJob;
      const row = rows.get(source.id);
      if (row === undefined) throw new Error('an inserted job is missing from the answer');
      const job = createdJob(source, {
        status: row.status,
        error,
        dependsOn,
        runAt: row.run_at,
        readyAt: row.ready_at,
        finishedAt: row.finished_at,
      });
      jobsById.set(job.id, job);
      answer.push({ created: true, job });
    }
    // Aliases of an earlier item of the batch that was itself a replay.
    for (const [i, outcome] of plan.outcomes.entries()) {
      if ('alias' in outcome && answer[i]?.job === undefined) {
        const replayed = plan.outcomes.find((o) => 'replay' in o && o.replay.id === outcome.alias) as
          { replay: JobRow } | undefined;
        if (replayed !== undefined) answer[i] = { created: false, job: jobFromWire(toWire(replayed.replay)) };
      }
    }
    this.#ctx.db.afterCommit(client, () => {
      for (const { job } of answer.filter((o) => o.created)) {
        if (job.runAt !== null) this.#ctx.due.lowerDue(job.runAt);
        this.#ctx.news.changed(job.id, job.type, job.status, () => job, job.runAt);
      }
    });
    return { ok: true, outcomes: answer };
  }
}

/**
 * An insert that lost a race and may simply run again: two batches taking the same keys
 * in other orders (one is rolled back), or a dedupe key taken by a transaction that
 * committed after this one looked (this time its job is seen).
 */
export function isInsertRace(error: unknown): boolean {
  const { code, constraint } = error as { code?: unknown; constraint?: unknown };
  return code === '40P01' || (code === '23505' && constraint === 'jobs_dedupe_live');
}
