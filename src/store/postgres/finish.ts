/**
 * The finish group commit on PostgreSQL. Finishes wait for one another: while one group
 * is being written, the next gathers, and each is one call of the `finish` function,
 * fenced per item (job, attempt, owner). Attempts that never started are given back by a
 * statement of their own, uncounted, and snoozes are written by one of their own (the
 * job has not finished: no dependents to release or fail).
 */
import type { AttemptOutcome, Finished, FinishItem, StartedAttempt } from '../store.js';
import type { JobStatus } from '../../contract/job.js';
import type { StartGroup } from './start-group.js';
import type { StoreContext } from './context.js';
import { inIdOrder } from './connection.js';
import { jobFromWire, type JobRow, type JobWire, toWire } from '../core/rows.js';
import { idIn, prefixed, prepared, statusIs } from './sql.js';

/** A finish of an attempt that ran and ended (the finish function's business). */
type EndedItem = FinishItem & { outcome: Exclude<AttemptOutcome, { kind: 'unstarted' } | { kind: 'snoozed' }> };

/** A snooze (`ctx.snooze`), as retry-policy.ts decided it. */
type SnoozedItem = FinishItem & { outcome: Extract<AttemptOutcome, { kind: 'snoozed' }> };

interface PendingFinish {
  items: FinishItem[];
  resolve: (answers: (Finished | null)[]) => void;
  reject: (error: unknown) => void;
}

export function finishStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  return {
    /**
     * Rescued attempts whose handler never started ($1 ids, $2 attempts, $3 owners, $4 whether
     * the lease must have run out): queued again as before the claim, the attempt not counted,
     * the rescue counted as an interruption.
     */
    returnUnstarted: `
WITH i AS (SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::boolean[]) AS i(id, attempt, owner, expired)),
locked AS MATERIALIZED (SELECT j.id FROM ${s}.jobs j WHERE ${idIn('j', 'i')} ORDER BY j.id FOR UPDATE)
UPDATE ${s}.jobs j SET status = 'queued', attempts = j.attempts - 1, started_at = j.prior_started_at,
  interruptions = j.interruptions + CASE WHEN i.expired THEN 1 ELSE 0 END,
  interrupted_by = CASE WHEN i.expired THEN array_append(j.interrupted_by, j.lease_owner) ELSE j.interrupted_by END,
  lease_owner = NULL, lease_expires_at = NULL
FROM i WHERE ${idIn('j', 'locked')} AND j.id = i.id
  AND ${statusIs('j', 'running')} AND j.attempts = i.attempt AND j.lease_owner = i.owner AND NOT j.attempt_started
  AND (NOT i.expired OR j.lease_expires_at < ${now})
RETURNING ${prefixed('j')}`,
    /**
     * Snoozes ($1 ids, $2 attempts, $3 owners, $4 whether the lease must have run out, $5 ms
     * until the job is due, $6 when the attempt started): scheduled again, the attempt given
     * back, one more snooze. Each row is locked by its id first and fenced again in the
     * UPDATE, as the finish function does (a heartbeat may commit while the lock is awaited).
     */
    snooze: `
WITH i AS (SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::boolean[], $5::bigint[], $6::bigint[])
  AS i(id, attempt, owner, expired, due_in, started)),
t AS MATERIALIZED (
  SELECT i.* FROM i CROSS JOIN LATERAL (SELECT j.id FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r)
UPDATE ${s}.jobs j SET status = 'scheduled', run_at = ${now} + t.due_in, attempts = greatest(j.attempts - 1, 0),
  snoozes = j.snoozes + 1, started_at = coalesce(t.started, j.started_at),
  interruptions = j.interruptions + CASE WHEN t.expired THEN 1 ELSE 0 END,
  interrupted_by = CASE WHEN t.expired THEN array_append(j.interrupted_by, j.lease_owner) ELSE j.interrupted_by END,
  lease_owner = NULL, lease_expires_at = NULL
FROM t WHERE ${idIn('j', 't')} AND j.id = t.id AND ${statusIs('j', 'running')} AND j.attempts = t.attempt AND j.lease_owner = t.owner
  AND (NOT t.expired OR j.lease_expires_at < ${now})
RETURNING j.id::text AS id, j.run_at`,
    finish:
      prepared(`SELECT job_id::text AS id, job_status AS status, job_run_at AS run_at, job_finished_at AS finished_at,
  is_other FROM ${s}.finish($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
  $8::bigint[], $9::boolean[], $10::bigint[])`),
  };
}

export class PgFinish {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof finishStatements>;
  readonly #starts: StartGroup;
  #finishQueue: PendingFinish[] = [];
  #finishing = false;

  constructor(ctx: StoreContext, starts: StartGroup) {
    this.#ctx = ctx;
    this.#sql = finishStatements(ctx.options.schema);
    this.#starts = starts;
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
    return { id: item.id, attempt: item.attempt, owner: item.owner, startedAt: item.startedAt ?? this.#ctx.db.now() };
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

  /**
   * Attempts that never started are given back by a statement of their own, snoozes are
   * written by another; the rest go to the finish function.
   */
  async #finishGroup(items: FinishItem[]): Promise<(Finished | null)[]> {
    const unstarted = items.filter((item) => item.outcome.kind === 'unstarted');
    const snoozed = items.filter((item): item is SnoozedItem => item.outcome.kind === 'snoozed');
    if (unstarted.length === 0 && snoozed.length === 0) return this.#finishAttempts(items as EndedItem[]);
    const ended = items.filter(
      (item): item is EndedItem => item.outcome.kind !== 'unstarted' && item.outcome.kind !== 'snoozed',
    );
    const [returned, slept, finished] = await Promise.all([
      unstarted.length === 0 ? [] : this.#returnUnstarted(unstarted),
      snoozed.length === 0 ? [] : this.#snooze(snoozed),
      ended.length === 0 ? [] : this.#finishAttempts(ended),
    ]);
    const answers = new Map<FinishItem, Finished | null>();
    for (const [i, item] of unstarted.entries()) answers.set(item, returned[i] ?? null);
    for (const [i, item] of snoozed.entries()) answers.set(item, slept[i] ?? null);
    for (const [i, item] of ended.entries()) answers.set(item, finished[i] ?? null);
    return items.map((item) => answers.get(item) ?? null);
  }

  async #snooze(items: SnoozedItem[]): Promise<(Finished | null)[]> {
    this.#ctx.db.assertOpen();
    const now = this.#ctx.db.now();
    const valid = inIdOrder(items);
    const result = await this.#ctx.db.joinById<{ id: string; run_at: number }>(this.#sql.snooze, [
      valid.map((item) => item.id),
      valid.map((item) => item.attempt),
      valid.map((item) => item.owner),
      valid.map((item) => item.expired === true),
      valid.map((item) => Math.max(0, Math.round(item.outcome.runAt - now))),
      valid.map((item) => item.startedAt ?? null),
    ]);
    const dueAt = new Map(result.rows.map((row) => [row.id, Number(row.run_at)]));
    // Snoozes whose job this process does not hold (an outcome written again later) are read once.
    const unknown = [...dueAt.keys()].filter((id) => !this.#ctx.running.has(id));
    const read = new Map<string, JobWire>();
    if (unknown.length > 0 && this.#ctx.news.anyListener()) {
      const rows = await this.#ctx.db.readByIds<JobRow>(this.#ctx.shared.getMany, unknown).catch(() => null);
      for (const row of rows ?? []) read.set(row.id, toWire(row));
    }
    return items.map((item) => {
      const runAt = dueAt.get(item.id);
      const running = this.#ctx.running.get(item.id);
      const mine = running !== undefined && running.owner === item.owner && running.wire.attempts === item.attempt;
      if (mine) this.#ctx.running.delete(item.id);
      if (runAt === undefined) return null;
      let wire: JobWire | null = read.get(item.id) ?? null;
      if (mine) {
        wire = running.wire;
        wire.status = 'scheduled';
        wire.runAt = runAt;
        wire.attempts = Math.max(0, wire.attempts - 1);
        wire.snoozes += 1;
        if (item.expired === true) wire.interruptions += 1;
        if (item.startedAt !== undefined) wire.startedAt = item.startedAt;
      }
      this.#ctx.due.lowerDue(runAt);
      const done = wire;
      this.#ctx.news.changed(
        item.id,
        done?.type ?? '',
        'scheduled',
        done === null ? null : () => jobFromWire(done),
        runAt,
      );
      return { status: 'scheduled', others: 0 } satisfies Finished;
    });
  }

  async #returnUnstarted(items: FinishItem[]): Promise<(Finished | null)[]> {
    this.#ctx.db.assertOpen();
    const valid = inIdOrder(items);
    const result = await this.#ctx.db.joinById<JobRow>(this.#sql.returnUnstarted, [
      valid.map((item) => item.id),
      valid.map((item) => item.attempt),
      valid.map((item) => item.owner),
      valid.map((item) => item.expired === true),
    ]);
    const returned = new Map(result.rows.map((row) => [row.id, toWire(row)]));
    return items.map((item) => {
      const wire = returned.get(item.id);
      if (wire === undefined) return null;
      const running = this.#ctx.running.get(item.id);
      if (running?.owner === item.owner && running.wire.attempts === item.attempt) this.#ctx.running.delete(item.id);
      this.#ctx.news.changed(wire.id, wire.type, 'queued', () => jobFromWire(wire));
      return { status: 'queued', others: 0 } satisfies Finished;
    });
  }

  async #finishAttempts(items: EndedItem[]): Promise<(Finished | null)[]> {
    this.#ctx.db.assertOpen();
    const now = this.#ctx.db.now();
    // In id order, as every statement that locks several jobs takes them: no deadlocks.
    const valid = inIdOrder(items);
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
      const running = this.#ctx.running.get(item.id);
      return running !== undefined && running.owner === item.owner && running.wire.progress !== null
        ? JSON.stringify(running.wire.progress)
        : null;
    };
    const result = await this.#ctx.db.timedWrite(() =>
      this.#ctx.db.query<{
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
    const unknown = [...accepted.keys()].filter((id) => !this.#ctx.running.has(id)).concat(others);
    const read = new Map<string, JobWire>();
    if (unknown.length > 0 && this.#ctx.news.anyListener()) {
      const rows = await this.#ctx.db.readByIds<JobRow>(this.#ctx.shared.getMany, unknown).catch(() => null);
      for (const row of rows ?? []) read.set(row.id, toWire(row));
    }
    const othersOf = new Map<string, number>();
    const answers = items.map((item) => {
      const row = accepted.get(item.id);
      const running = this.#ctx.running.get(item.id);
      if (row === undefined) {
        // Refused: the attempt is void; nothing of it needs keeping here.
        if (running?.owner === item.owner && running.wire.attempts === item.attempt) this.#ctx.running.delete(item.id);
        return null;
      }
      let wire: JobWire | undefined = read.get(item.id);
      if (running !== undefined && running.owner === item.owner && running.wire.attempts === item.attempt) {
        this.#ctx.running.delete(item.id);
        wire = running.wire;
        wire.status = row.status;
        wire.runAt = row.run_at;
        wire.finishedAt = row.finished_at;
        if (item.startedAt !== undefined) wire.startedAt = item.startedAt;
        if (item.expired === true) wire.interruptions += 1;
        if (item.outcome.kind === 'completed') wire.resultText = item.outcome.resultText;
        else wire.error = item.outcome.error;
        if (item.outcome.kind === 'released') wire.attempts = Math.max(0, wire.attempts - 1);
      }
      if (row.run_at !== null) this.#ctx.due.lowerDue(row.run_at);
      const done = wire;
      // This server may already run the next attempt (another server promoted the retry,
      // and this one claimed it before this answer came): the news of this one is stale here.
      const newer = this.#ctx.running.get(item.id);
      const stale = newer !== undefined && newer.wire.attempts > item.attempt;
      this.#ctx.news.changed(
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
      if (row?.run_at != null) this.#ctx.due.lowerDue(row.run_at);
      const status = row?.status ?? wire?.status ?? 'queued';
      this.#ctx.news.changed(id, wire?.type ?? '', status, wire === undefined ? null : () => jobFromWire(wire));
    }
    // Dependents are reported on the first accepted item (the store cannot tell whose they are cheaply).
    if (others.length > 0) {
      const first = answers.findIndex((answer) => answer !== null);
      const answer = answers[first];
      if (answer) answer.others = others.length;
    }
    if (others.length > 0) this.#ctx.news.emit({ kind: 'ready' });
    return answers;
  }
}
