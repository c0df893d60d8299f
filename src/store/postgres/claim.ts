/**
 * Claims on PostgreSQL, all four ways:
 *
 * - plain: one statement, FOR UPDATE SKIP LOCKED over the claim index, in order;
 * - micro-batched: one short transaction that reads the candidates, forms the batches
 *   here (core/micro-batches.ts), and claims the chosen ones;
 * - aged (priority aging): candidates level by level, ordered by effective priority;
 * - cluster-limited (task and group limits): candidates type by type under an advisory
 *   lock per limited type and group, each one's allowance cut to what the cluster
 *   leaves; a held group's backlog is passed over without reading it (held-groups.ts).
 *
 * Due jobs are promoted first; claimed jobs carry their parents' results.
 */
import type { ClaimedJob, ClaimRequest } from '../store.js';
import type { StoreContext } from './context.js';
import type { LimitKind, TaskLimits } from '../../contract/limits.js';
import { formBatches } from '../core/micro-batches.js';
import { claimedOf, type JobRow, type JobWire, parentResults, toWire } from '../core/rows.js';
import { inLine, NOT_PAUSED, prefixed, prepared, statusIs, type LinePlace } from './sql.js';
import { run } from './connection.js';
import { HeldGroupReader } from './held-groups.js';

/** Candidates read by a micro-batched claim at most. */
const MAX_CANDIDATES = 512;

/** Batches of one job each, for a claim without micro-batching that still forms batches. */
const SINGLE_JOBS: NonNullable<ClaimRequest['micro']> = {
  costs: new Map<string, number>(),
  budgetMs: 0,
  maxJobs: 1,
  solo: new Set<string>(),
};

/**
 * Under priority aging, when the first candidate of a level in claim order became
 * ready: a level ages as its next job in fair order, so the level with the best
 * effective priority is taken first and, inside it, groups still take turns.
 */
/**
 * How every claim transaction begins. `claimIds` runs in three of them (micro-batched,
 * aged, limited), and a named statement keeps the plan it made under the settings of its
 * first runs on a connection: a setting changed later is not a reason to plan it again.
 * So the settings are one, here. Sorting off keeps each candidate read on its claim
 * index, even for a young table without statistics whose planner would rather sort
 * every queued row; the one sort left (the candidates of several types or levels, a few
 * rows) then costs 1e10 to the planner, which must not take that for a reason to
 * JIT-compile the statement (100+ ms a claim).
 */
export const CLAIM_TRANSACTION = 'BEGIN; SET LOCAL enable_sort = off; SET LOCAL jit = off';

const LEVEL_HEAD_READY_AT =
  'first_value(c.ready_at) OVER (PARTITION BY c.priority ORDER BY c.round, c.ready_at, c.ready_seq)';

export function claimStatements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  /**
   * The chosen candidates ($2) become running under the owner's lease ($1, $3 ms): the CTEs
   * `picked`, `claimed`. Candidates are locked by the statements that chose them; should one
   * not be, one another claim holds is skipped, never waited for. The rows are updated by
   * their ids as an array, as the plain claim's are: joined to `picked`, the planner, which
   * counts a few rows for the status fence, hashed a scan of the whole table for each claim.
   */
  const claimChosen = `
WITH picked AS MATERIALIZED (
  SELECT r.id FROM unnest($2::uuid[]) AS i(id) CROSS JOIN LATERAL (
    SELECT j.id, j.status FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1
    FOR UPDATE SKIP LOCKED) r
  WHERE r.status = 'queued'),
claimed AS (
  UPDATE ${s}.jobs j SET status = 'running', attempts = j.attempts + 1, started_at = ${now},
    prior_started_at = j.started_at, attempt_started = false, lease_owner = $1,
    lease_expires_at = ${now} + $3, progress = NULL, run_at = NULL
  WHERE j.id = ANY (ARRAY(SELECT id FROM picked)) AND ${statusIs('j', 'queued')}
  RETURNING j.prior_started_at AS previous_start, j.ready_seq, j.round, ${prefixed('j')})`;
  return {
    /**
     * The claim: the best queued jobs in index order ($2 of them), skipping rows other
     * claimers hold, become running under the owner's lease ($1, $3 ms). Nothing while
     * dispatch is paused cluster-wide. The locked rows are updated by their ids as an
     * array, not by a join: a generic plan counts on a tenth of the table for `LIMIT $2`,
     * and would join that many by hashing a scan of the whole table; an array of unknown
     * length it counts as a few ids, each one probe of the primary key.
     */
    claim: prepared(`
WITH picked AS MATERIALIZED (
  SELECT id FROM ${s}.jobs
  WHERE status = 'queued' AND ${NOT_PAUSED(s)}
  ORDER BY priority DESC, round, ready_at, ready_seq
  LIMIT $2
  FOR UPDATE SKIP LOCKED)
UPDATE ${s}.jobs j SET status = 'running', attempts = j.attempts + 1, started_at = ${now},
  prior_started_at = j.started_at, attempt_started = false, lease_owner = $1,
  lease_expires_at = ${now} + $3, progress = NULL, run_at = NULL
WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING j.prior_started_at AS previous_start, j.ready_seq, j.round, ${prefixed('j')}`),
    /** Candidates of a micro-batched claim, locked for the transaction that forms the batches. */
    claimCandidates: prepared(`
SELECT id::text AS id, type FROM ${s}.jobs
WHERE status = 'queued' AND ${NOT_PAUSED(s)}
ORDER BY priority DESC, round, ready_at, ready_seq
LIMIT $1
FOR UPDATE SKIP LOCKED`),
    /** The chosen candidates, found by id alone (never by status: see the finish function). */
    claimIds: prepared(`${claimChosen} SELECT * FROM claimed`),
    /**
     * The same under a rate limit, in one statement: the claimed jobs of rate-limited types
     * ($7) and groups ($8) are recorded as starts, and starts that left their window ($4
     * kinds, $5 types or groups, $6 ms) are forgotten (the DELETE reads the statement's
     * snapshot: never the new starts).
     */
    claimIdsRated: prepared(`${claimChosen},
forgotten AS (DELETE FROM ${s}.rate_starts r
  USING unnest($4::text[], $5::text[], $6::bigint[]) AS t(kind, key, per_ms)
  WHERE r.kind = t.kind AND r.type = t.key AND r.at <= ${now} - t.per_ms),
recorded AS (INSERT INTO ${s}.rate_starts (kind, type, at)
  SELECT 'type', c.type, ${now} FROM claimed c WHERE c.type = ANY($7::text[])
  UNION ALL SELECT 'group', c.group_key, ${now} FROM claimed c WHERE c.group_key = ANY($8::text[]))
SELECT * FROM claimed`),
    /**
     * Candidates under priority aging ($4 ms a level): a job's effective priority is
     * least(9, priority + waited / $4), which no index orders. A level ages as its first
     * job in claim order (jobs_claim, or jobs_claim_type per type), so the candidates are
     * the first $3 of each level (of each type: $1 types, at most $2 of each), levels
     * ordered by the effective priority of their first job, then its ready time.
     */
    claimCandidatesAged: `
SELECT c.id::text AS id, c.type FROM generate_series(0, 9) AS l(p) CROSS JOIN LATERAL (
  SELECT j.id, j.type, j.priority, j.round, j.ready_at, j.ready_seq FROM ${s}.jobs j
  WHERE j.status = 'queued' AND j.priority = l.p
  ORDER BY j.priority DESC, j.round, j.ready_at, j.ready_seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED) c
WHERE ${NOT_PAUSED(s)}
ORDER BY least(9, c.priority + (${now} - ${LEVEL_HEAD_READY_AT}) / $2::bigint) DESC, ${LEVEL_HEAD_READY_AT},
  c.priority DESC, c.round, c.ready_at, c.ready_seq
LIMIT $1`,
    /**
     * Task and group limits across the cluster. A claim that applies them first takes a
     * transaction-scoped advisory lock per limited type and group ($2: `:limit:<type>`,
     * `:group-limit:<group>`, in order), so that two servers never both count the same
     * free place, then reads what each uses: running attempts and starts inside its rate
     * window ($3 ms; 0 without a rate limit).
     */
    lockLimited: `SELECT pg_advisory_xact_lock(hashtextextended($1 || k, 0))
      FROM unnest($2::text[]) AS k ORDER BY k`,
    /**
     * What each limited type or group ($1 kinds, $2 names, $3 ms) uses, and, when $4,
     * whether it has queued jobs (one probe of jobs_claim_type, or one of
     * jobs_group_round per priority): a held one was passed over. A group's running
     * attempts are counted among all running jobs (jobs_running_type lists them).
     */
    limitUsage: `
SELECT t.kind, t.key,
  (CASE WHEN t.kind = 'type'
    THEN (SELECT count(*) FROM ${s}.jobs j WHERE j.status = 'running' AND j.type = t.key)
    ELSE (SELECT count(*) FROM ${s}.jobs j WHERE j.status = 'running' AND j.group_key = t.key) END)::int AS running,
  (SELECT count(*) FROM ${s}.rate_starts r
    WHERE r.kind = t.kind AND r.type = t.key AND r.at > ${now} - t.per_ms)::int AS started,
  $4::boolean AND (CASE WHEN t.kind = 'type'
    THEN EXISTS (SELECT 1 FROM ${s}.jobs j WHERE j.status = 'queued' AND j.type = t.key)
    ELSE EXISTS (SELECT 1 FROM generate_series(0, 9) AS l(p) WHERE EXISTS (SELECT 1 FROM ${s}.jobs j
      WHERE j.status = 'queued' AND j.group_key = t.key AND j.priority = l.p)) END) AS queued
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS t(kind, key, per_ms)`,
    /**
     * Candidates type by type ($1 types, at most $2 of each, best first, $3 in all), so a
     * type held back by its limit is never read: each type is one probe of jobs_claim_type.
     * Jobs of the groups held back by their limits ($4) are left out of each probe.
     */
    claimCandidatesByType: `
SELECT c.id::text AS id, c.type, c.group_key AS "group" FROM unnest($1::text[], $2::int[]) AS t(type, n) CROSS JOIN LATERAL (
  SELECT j.id, j.type, j.group_key, j.priority, j.round, j.ready_at, j.ready_seq FROM ${s}.jobs j
  WHERE j.status = 'queued' AND j.type = t.type AND (j.group_key IS NULL OR j.group_key <> ALL($4::text[]))
  ORDER BY j.priority DESC, j.round, j.ready_at, j.ready_seq
  LIMIT t.n
  FOR UPDATE SKIP LOCKED) c
WHERE ${NOT_PAUSED(s)}
ORDER BY c.priority DESC, c.round, c.ready_at, c.ready_seq
LIMIT $3`,
    claimCandidatesByTypeAged: `
SELECT c.id::text AS id, c.type, c.group_key AS "group"
FROM unnest($1::text[], $2::int[]) AS t(type, n) CROSS JOIN generate_series(0, 9) AS l(p) CROSS JOIN LATERAL (
  SELECT j.id, j.type, j.group_key, j.priority, j.round, j.ready_at, j.ready_seq FROM ${s}.jobs j
  WHERE j.status = 'queued' AND j.type = t.type AND j.priority = l.p
    AND (j.group_key IS NULL OR j.group_key <> ALL($5::text[]))
  ORDER BY j.priority DESC, j.round, j.ready_at, j.ready_seq
  LIMIT t.n
  FOR UPDATE SKIP LOCKED) c
WHERE ${NOT_PAUSED(s)}
ORDER BY least(9, c.priority + (${now} - ${LEVEL_HEAD_READY_AT}) / $4::bigint) DESC, ${LEVEL_HEAD_READY_AT},
  c.priority DESC, c.round, c.ready_at, c.ready_seq
LIMIT $3`,
  };
}

export class PgClaim {
  readonly #ctx: StoreContext;
  readonly #sql: ReturnType<typeof claimStatements>;
  readonly #held: HeldGroupReader;

  constructor(ctx: StoreContext) {
    this.#ctx = ctx;
    this.#sql = claimStatements(ctx.options.schema);
    this.#held = new HeldGroupReader(ctx.options.schema);
  }

  async claim(request: ClaimRequest): Promise<ClaimedJob[][]> {
    this.#ctx.db.assertOpen();
    if (!this.#ctx.db.available || request.batches <= 0) return [];
    await this.#ctx.due.promoteIfDue();
    const { rows, groups } = await this.#claimRows(request);
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
      const ids = [...new Set(withParents)];
      const parents = await this.#ctx.db
        .readByIds<{ id: string; type: string; result: string | null }>(this.#ctx.shared.parents, ids)
        .catch(() => null);
      const byId = new Map(parents?.map((row) => [row.id, row]) ?? []);
      for (const { wire } of claimed.values()) wire.parents = parentResults(wire.dependsOn, (id) => byId.get(id));
    }
    const batches: ClaimedJob[][] =
      groups === null
        ? [...claimed.values()].sort(inClaimOrder).map(({ wire }) => [claimedOf(wire)])
        : groups
            .map((ids) =>
              ids.flatMap((id) => (claimed.has(id) ? [claimedOf((claimed.get(id) as ClaimedRow).wire)] : [])),
            )
            .filter((batch) => batch.length > 0);
    for (const { wire, previousStart } of claimed.values()) {
      // Claimed jobs stay queued to a reader until their handler starts (lease.ts, started).
      this.#ctx.running.set(wire.id, { wire, owner: request.owner, previousStart });
    }
    return batches;
  }

  /** The claimed rows, and the batches they form (null: one job each, in claim order). */
  async #claimRows(request: ClaimRequest): Promise<{ rows: ClaimRow[]; groups: string[][] | null }> {
    const { types, micro } = request;
    const limits = request.limits ?? new Map<string, TaskLimits>();
    const groupLimits = request.groupLimits ?? new Map<string, TaskLimits>();
    if ((limits.size > 0 || groupLimits.size > 0) && types) {
      return this.#claimLimited(request, limits, groupLimits, types);
    }
    if ((this.#ctx.options.priorityAgingMs ?? 0) > 0) return this.#claimAged(request);
    if (micro === null || micro.costs.size === 0) return { rows: await this.#claimPlain(request), groups: null };
    return this.#claimMicroBatched(request, micro);
  }

  /** A claim of single jobs: one statement, in claim order. */
  async #claimPlain(request: ClaimRequest): Promise<ClaimRow[]> {
    const values = [request.owner, request.batches, request.leaseMs];
    return (await this.#ctx.db.query<ClaimRow>(this.#sql.claim, values)).rows;
  }

  /** A micro-batched claim: the candidates in claim order, the batches formed here, the chosen ones claimed. */
  async #claimMicroBatched(
    request: ClaimRequest,
    micro: NonNullable<ClaimRequest['micro']>,
  ): Promise<{ rows: ClaimRow[]; groups: string[][] }> {
    const limit = Math.min(MAX_CANDIDATES, request.batches * Math.max(1, micro.maxJobs));
    return this.#ctx.db.transaction(async (client) => {
      const candidates = (await run<{ id: string; type: string }>(client, this.#sql.claimCandidates, [limit])).rows;
      const groups = formBatches(candidates, request.batches, micro);
      const ids = groups.flat();
      if (ids.length === 0) return { rows: [] as ClaimRow[], groups };
      const rows = (await run<ClaimRow>(client, this.#sql.claimIds, [request.owner, ids, request.leaseMs])).rows;
      return { rows, groups };
    }, CLAIM_TRANSACTION);
  }

  /** A claim under priority aging: candidates level by level, ordered by effective priority. */
  async #claimAged(request: ClaimRequest): Promise<{ rows: ClaimRow[]; groups: string[][] }> {
    const micro = request.micro ?? SINGLE_JOBS;
    const limit = Math.min(MAX_CANDIDATES, request.batches * Math.max(1, micro.maxJobs));
    return this.#ctx.db.transaction(async (client) => {
      const candidates = (
        await client.query<{ id: string; type: string }>(this.#sql.claimCandidatesAged, [
          limit,
          this.#ctx.options.priorityAgingMs,
        ])
      ).rows;
      const formed = formBatches(candidates, request.batches, micro);
      const ids = formed.flat();
      if (ids.length === 0) return { rows: [] as ClaimRow[], groups: formed };
      const rows = (await run<ClaimRow>(client, this.#sql.claimIds, [request.owner, ids, request.leaseMs])).rows;
      return { rows, groups: formed };
    }, CLAIM_TRANSACTION);
  }

  /**
   * A claim under task and group limits, applied across every server: under an advisory
   * lock per limited type and group, each one's allowance is this server's (`allowance`,
   * `groupAllowance`) cut to what the cluster leaves (running attempts, starts inside its
   * rate window, on the database's clock); candidates are read type by type, so a held
   * type's backlog is never read, and a held group's jobs are left out of each type's
   * probe; a job is taken only while both its type and its group allow it; the starts of
   * rate-limited types and groups are recorded in the same transaction.
   */
  async #claimLimited(
    request: ClaimRequest,
    limits: ReadonlyMap<string, TaskLimits>,
    groupLimits: ReadonlyMap<string, TaskLimits>,
    types: readonly string[],
  ): Promise<{ rows: ClaimRow[]; groups: string[][] }> {
    const aging = this.#ctx.options.priorityAgingMs ?? 0;
    const limited: { kind: LimitKind; key: string; limit: TaskLimits }[] = [
      ...[...limits].map(([key, limit]) => ({ kind: 'type' as const, key, limit })),
      ...[...groupLimits].map(([key, limit]) => ({ kind: 'group' as const, key, limit })),
    ];
    const kinds = limited.map((entry) => entry.kind);
    const keys = limited.map((entry) => entry.key);
    const perMs = limited.map((entry) => entry.limit.rateLimit?.perMs ?? 0);
    const locks = limited.map((entry) => (entry.kind === 'type' ? ':limit:' : ':group-limit:') + entry.key);
    const ratedTypes = [...limits].filter(([, limit]) => limit.rateLimit !== null).map(([type]) => type);
    const ratedGroups = [...groupLimits].filter(([, limit]) => limit.rateLimit !== null).map(([group]) => group);
    const micro = request.micro ?? SINGLE_JOBS;
    const perBatch = Math.max(1, micro.maxJobs);
    const watching = request.passedOver !== undefined || request.groupPassedOver !== undefined;
    let passed: { kind: LimitKind; key: string }[] = [];
    const result = await this.#ctx.db.transaction(async (client) => {
      await client.query(this.#sql.lockLimited, [this.#ctx.options.schema, locks]);
      const usage = await client.query<{
        kind: LimitKind;
        key: string;
        running: number;
        started: number;
        queued: boolean;
      }>(this.#sql.limitUsage, [kinds, keys, perMs, watching]);
      const left = new Map<string, number>();
      const groupsLeft = new Map<string, number>();
      for (const row of usage.rows) {
        const limit = row.kind === 'type' ? limits.get(row.key) : groupLimits.get(row.key);
        const mine = row.kind === 'type' ? request.allowance : request.groupAllowance;
        let allowed = mine?.get(row.key) ?? Number.POSITIVE_INFINITY;
        if (limit?.concurrency != null) allowed = Math.min(allowed, limit.concurrency - row.running);
        if (limit?.rateLimit != null) allowed = Math.min(allowed, limit.rateLimit.max - row.started);
        (row.kind === 'type' ? left : groupsLeft).set(row.key, Math.max(0, allowed));
      }
      passed = usage.rows
        .filter((row) => row.queued && (row.kind === 'type' ? left : groupsLeft).get(row.key) === 0)
        .map((row) => ({ kind: row.kind, key: row.key }));
      const heldGroups = [...groupsLeft].filter(([, n]) => n === 0).map(([group]) => group);
      const open = types.filter((type) => left.get(type) !== 0);
      const total = Math.min(MAX_CANDIDATES, request.batches * perBatch);
      const counts = open.map((type) => Math.min(total, left.get(type) ?? total));
      // With groups held (and no aging), a held group's backlog is passed over without reading it (held-groups.ts).
      const byGroup =
        open.length > 0 && heldGroups.length > 0 && aging === 0
          ? await this.#held.candidates(client, open, counts, heldGroups, total)
          : null;
      const candidates =
        open.length === 0
          ? []
          : (byGroup ??
            (
              await client.query<{ id: string; type: string; group: string | null }>(
                aging > 0 ? this.#sql.claimCandidatesByTypeAged : this.#sql.claimCandidatesByType,
                aging > 0 ? [open, counts, total, aging, heldGroups] : [open, counts, total, heldGroups],
              )
            ).rows);
      // Limited types and groups are counted one job at a time: never in a micro-batch.
      const costs = new Map([...micro.costs].filter(([type]) => !limits.has(type)));
      const solo = new Set(micro.solo);
      const takenOfType = new Map<string, number>();
      const takenOfGroup = new Map<string, number>();
      const fitting = candidates.filter((candidate) => {
        const typeAllowed = left.get(candidate.type);
        const groupAllowed = candidate.group === null ? undefined : groupsLeft.get(candidate.group);
        const ofType = takenOfType.get(candidate.type) ?? 0;
        const ofGroup = candidate.group === null ? 0 : (takenOfGroup.get(candidate.group) ?? 0);
        if (typeAllowed !== undefined && ofType >= typeAllowed) return false;
        if (groupAllowed !== undefined && ofGroup >= groupAllowed) return false;
        if (typeAllowed !== undefined) takenOfType.set(candidate.type, ofType + 1);
        if (groupAllowed !== undefined) {
          takenOfGroup.set(candidate.group as string, ofGroup + 1);
          solo.add(candidate.id);
        }
        return true;
      });
      const formed = formBatches(fitting, request.batches, { ...micro, costs, solo });
      const ids = formed.flat();
      if (ids.length === 0) return { rows: [] as ClaimRow[], groups: formed };
      const values = [request.owner, ids, request.leaseMs];
      const claimed =
        ratedTypes.length === 0 && ratedGroups.length === 0
          ? await run<ClaimRow>(client, this.#sql.claimIds, values)
          : await run<ClaimRow>(client, this.#sql.claimIdsRated, [
              ...values,
              kinds,
              keys,
              perMs,
              ratedTypes,
              ratedGroups,
            ]);
      return { rows: claimed.rows, groups: formed };
    }, CLAIM_TRANSACTION);
    for (const { kind, key } of passed) {
      if (kind === 'type') request.passedOver?.(key);
      else request.groupPassedOver?.(key);
    }
    return result;
  }
}

/** A claimed row, with what orders it and what the running map keeps. */
interface ClaimedRow {
  wire: JobWire;
  previousStart: number | null;
  seq: number;
  round: number;
}

/** Claim order, for claimed rows. */
function inClaimOrder(a: ClaimedRow, b: ClaimedRow): number {
  return inLine(placeOf(a), placeOf(b));
}

function placeOf(row: ClaimedRow): LinePlace {
  return { priority: row.wire.priority, round: row.round, readyAt: row.wire.readyAt ?? 0, seq: row.seq };
}

type ClaimRow = JobRow & { previous_start: number | null; ready_seq: number | null; round: number | string };
