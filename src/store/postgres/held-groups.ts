import type pg from 'pg';
import { run } from './connection.js';
import { inLine, NOT_PAUSED, prepared, statusIs } from './sql.js';

/**
 * Candidates of a claim while groups are held back by their limits, without reading a
 * held group's backlog. A held group's jobs stay queued in the claim index (type,
 * priority, round, ready time, place in line); a probe that leaves them out with a
 * condition on `group_key` reads past every one of them that comes first in line: with
 * one tenant's 100,000 jobs held at priority 9 and nothing else there, every claim would
 * read the 100,000. So each level of a type's line (its jobs at one priority) is read in
 * two ways, the second only where the first cannot tell:
 *
 * 1. its first WINDOW jobs in line, whoever they belong to: when the jobs wanted of the
 *    groups not held are among them (fair share puts each group's next job near the
 *    front), they are the candidates, in order, and nothing more is read;
 * 2. where those are all (or nearly all) held: the groups with queued jobs of the level,
 *    found by skipping from one to the next in `jobs_type_group` (type, priority, group,
 *    then line order; migration 014; one probe each, at most MAX_GROUPS), and for each
 *    group not held, and for the jobs without a group, its first jobs in line. The best of
 *    those are the level's candidates: a held group's jobs are never read.
 *
 * Past MAX_GROUPS groups in one level it is read as before, in line, held jobs skipped one
 * by one. Nothing is remembered between claims, so no job put anywhere in line, by any
 * server, is missed. Nothing is locked while reading; the jobs chosen are locked in line
 * order, one that another claim holds replaced by the next.
 */

/** Jobs of a level read in line before its groups are looked at one by one. */
const WINDOW = 64;
/** Groups at one priority looked at one by one, at most. */
export const MAX_GROUPS = 1000;
/** Rounds of locking the chosen jobs, each replacing those another claim held. */
const LOCK_ROUNDS = 3;
/** The levels of a type's line, best first. */
const LEVELS = Array.from({ length: 10 }, (_, index) => 9 - index);

export interface HeldCandidate {
  id: string;
  type: string;
  group: string | null;
}

interface CandidateRow extends HeldCandidate {
  priority: number;
  round: string | number;
  ready_at: string | number;
  ready_seq: string | number;
}

export function heldGroupStatements(schema: string) {
  const s = `"${schema}"`;
  const columns = 'j.id::text AS id, j.type, j.group_key AS "group", j.priority, j.round, j.ready_at, j.ready_seq';
  const notPaused = NOT_PAUSED(s);
  // A group's line is read in `jobs_type_group` (type, priority, group, then line order). Its group
  // is named as a range of one and ordered by first, which no other index gives (an equality would
  // make that order a given, and the type's index would do, reading past the held jobs).
  const groupLine = 'ORDER BY j.group_key, j.round, j.ready_at, j.ready_seq';
  return {
    /**
     * The first $3 jobs in line of each level ($1 types, $2 priorities), held or not. Nothing
     * is locked here: the jobs chosen are, afterwards (`lock`).
     */
    window: prepared(`
SELECT w.* FROM unnest($1::text[], $2::smallint[]) AS t(type, p) CROSS JOIN LATERAL (
  SELECT ${columns} FROM ${s}.jobs j
  WHERE j.status = 'queued' AND j.type = t.type AND j.priority = t.p
  ORDER BY j.round, j.ready_at, j.ready_seq
  LIMIT $3) w
WHERE ${notPaused}`),
    /**
     * Levels read group by group ($1 types, $2 priorities, $3 jobs of each group): the
     * groups with queued jobs of the level (at most $5 each; the `groups` rows say how
     * many), skipping from one to the next in `jobs_type_group`, and the first jobs of each
     * group not held ($4) and of the jobs without a group, in line order. Nothing is locked.
     */
    byGroup: prepared(`
WITH RECURSIVE levels AS (SELECT * FROM unnest($1::text[], $2::smallint[], $3::int[]) AS t(type, p, n)),
groups AS (
  SELECT t.type, t.p, (SELECT j.group_key FROM ${s}.jobs j
    WHERE j.status = 'queued' AND j.type = t.type AND j.priority = t.p AND j.group_key IS NOT NULL
    ORDER BY j.group_key LIMIT 1) AS g, 1 AS k
  FROM levels t
  UNION ALL
  SELECT g.type, g.p, (SELECT j.group_key FROM ${s}.jobs j
    WHERE j.status = 'queued' AND j.type = g.type AND j.priority = g.p AND j.group_key > g.g
    ORDER BY j.group_key LIMIT 1), g.k + 1
  FROM groups g WHERE g.g IS NOT NULL AND g.k <= $5),
sizes AS (SELECT type, p, count(*)::int AS n FROM groups WHERE g IS NOT NULL GROUP BY type, p)
SELECT 'job' AS kind, c.*, NULL::int AS groups FROM levels t
  JOIN sizes z ON z.type = t.type AND z.p = t.p AND z.n <= $5
  JOIN groups gr ON gr.type = t.type AND gr.p = t.p AND gr.g IS NOT NULL AND gr.g <> ALL($4::text[]) CROSS JOIN LATERAL (
  SELECT ${columns} FROM ${s}.jobs j
  WHERE j.status = 'queued' AND j.type = t.type AND j.priority = t.p AND j.group_key >= gr.g AND j.group_key <= gr.g
  ${groupLine} LIMIT t.n) c
WHERE ${notPaused}
UNION ALL
SELECT 'job', c.*, NULL FROM levels t CROSS JOIN LATERAL (
  SELECT ${columns} FROM ${s}.jobs j
  WHERE j.status = 'queued' AND j.type = t.type AND j.priority = t.p AND j.group_key IS NULL
  ${groupLine} LIMIT t.n) c
WHERE ${notPaused}
UNION ALL
SELECT 'groups', NULL, z.type, NULL, z.p, NULL, NULL, NULL, z.n FROM sizes z`),
    /** The chosen jobs ($1), locked, skipping any another claim or statement holds: those answered. */
    lock: prepared(`SELECT j.id::text AS id FROM ${s}.jobs j WHERE j.id = ANY($1::uuid[]) AND ${statusIs('j', 'queued')}
FOR UPDATE SKIP LOCKED`),
  };
}

/** One server's reads of the line while groups are held (see above). */
export class HeldGroupReader {
  readonly #sql: ReturnType<typeof heldGroupStatements>;

  constructor(schema: string) {
    this.#sql = heldGroupStatements(schema);
  }

  /**
   * Up to `counts[i]` candidates of each type of `types`, `total` in all, best first,
   * none of the groups in `held`; null when a priority has more than MAX_GROUPS groups
   * (the caller reads in line then).
   */
  async candidates(
    client: pg.PoolClient,
    types: readonly string[],
    counts: readonly number[],
    held: readonly string[],
    total: number,
  ): Promise<HeldCandidate[] | null> {
    const wanted = new Map(types.map((type, index) => [type, Math.min(total, counts[index] ?? total)]));
    const window = Math.max(...wanted.values(), 0) + WINDOW;
    const levelTypes = types.flatMap((type) => LEVELS.map(() => type));
    const levelPriorities = types.flatMap(() => LEVELS);
    const read = (await run<CandidateRow>(client, this.#sql.window, [levelTypes, levelPriorities, window])).rows;
    const heldSet = new Set(held);
    const open = (row: CandidateRow) => row.group === null || !heldSet.has(row.group);

    // A level whose window is full and holds fewer of the jobs wanted than its type wants is read by group.
    const inWindow = new Map<string, CandidateRow[]>();
    const full = new Map<string, number>();
    for (const row of read) {
      const key = levelKey(row.type, row.priority);
      full.set(key, (full.get(key) ?? 0) + 1);
      if (!open(row)) continue;
      const list = inWindow.get(key) ?? [];
      list.push(row);
      inWindow.set(key, list);
    }
    const byGroup: { type: string; p: number; n: number }[] = [];
    for (const [key, rows] of full) {
      const [type, priority] = fromLevelKey(key);
      const n = wanted.get(type) ?? 0;
      if (rows === window && (inWindow.get(key)?.length ?? 0) < n) byGroup.push({ type, p: priority, n });
    }
    let candidates: CandidateRow[] = read.filter(open);
    if (byGroup.length > 0) {
      const answer = (
        await run<CandidateRow & { kind: 'job' | 'groups'; groups: number | null }>(client, this.#sql.byGroup, [
          byGroup.map((level) => level.type),
          byGroup.map((level) => level.p),
          byGroup.map((level) => level.n),
          held,
          MAX_GROUPS,
        ])
      ).rows;
      if (answer.some((row) => row.kind === 'groups' && (row.groups ?? 0) > MAX_GROUPS)) return null;
      const regrouped = new Set(byGroup.map((level) => levelKey(level.type, level.p)));
      candidates = [
        ...candidates.filter((row) => !regrouped.has(levelKey(row.type, row.priority))),
        ...answer.filter((row) => row.kind === 'job'),
      ];
    }
    candidates.sort((a, b) => inLine(placeOf(a), placeOf(b)));
    return this.#lockInLine(client, candidates, wanted, total);
  }

  /**
   * The best candidates, locked: taken in line order within each type's and the claim's
   * count; one another claim or statement holds is passed over for the next in line, so a
   * claim comes back short only when what was read runs out.
   */
  async #lockInLine(
    client: pg.PoolClient,
    candidates: readonly CandidateRow[],
    wanted: ReadonlyMap<string, number>,
    total: number,
  ): Promise<HeldCandidate[]> {
    const taken = new Map<string, number>();
    const chosen: HeldCandidate[] = [];
    let next = 0;
    for (let round = 0; round < LOCK_ROUNDS && chosen.length < total; round++) {
      const asked = new Map(taken);
      const batch: CandidateRow[] = [];
      while (next < candidates.length && chosen.length + batch.length < total) {
        const row = candidates[next++] as CandidateRow;
        const ofType = asked.get(row.type) ?? 0;
        if (ofType >= (wanted.get(row.type) ?? 0)) continue;
        asked.set(row.type, ofType + 1);
        batch.push(row);
      }
      if (batch.length === 0) break;
      const locked = new Set(
        (await run<{ id: string }>(client, this.#sql.lock, [batch.map((row) => row.id)])).rows.map((row) => row.id),
      );
      for (const row of batch) {
        if (!locked.has(row.id)) continue;
        taken.set(row.type, (taken.get(row.type) ?? 0) + 1);
        chosen.push({ id: row.id, type: row.type, group: row.group });
      }
    }
    return chosen;
  }
}

function placeOf(row: CandidateRow) {
  return {
    priority: row.priority,
    round: Number(row.round),
    readyAt: Number(row.ready_at),
    seq: Number(row.ready_seq),
  };
}

function levelKey(type: string, priority: number): string {
  return `${priority}\u0000${type}`;
}

function fromLevelKey(key: string): [string, number] {
  const cut = key.indexOf('\u0000');
  return [key.slice(cut + 1), Number(key.slice(0, cut))];
}
