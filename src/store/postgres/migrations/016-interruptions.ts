import { functionOf, rewritten } from './step-text.js';
import fenceById from './015-fence-by-id.js';

/**
 * Interruptions and outages.
 *
 * - `jobs.interruptions` and `jobs.interrupted_by`: how many times a rescue took an
 *   attempt of the job from a server that died or stalled (counted or given back), and
 *   those servers (lease owners), so that a job that keeps taking its server down is
 *   stopped after KILN_MAX_INTERRUPTIONS. The finish function of step 15 counts one on
 *   every rescue that lands (`p_expired`); the statement that gives back an unstarted
 *   attempt (finish.ts) does the same.
 * - `nodes.rejoined_at`: when the server's beats came back after failing (null: they never
 *   failed since it started). While every live server has rejoined since a silent node's
 *   last beat, the database was out of everyone's reach meanwhile, and that node's lease
 *   counts from the first return only (lease.ts, `expired`).
 *
 * - `up_since_ms()`: when the database last started (`pg_postmaster_start_time()`), on the
 *   clock of `now_ms()`: time before it, when nobody could reach the database, counts
 *   against no lease.
 *
 * Adds columns and a function, and replaces the finish function with the same signature
 * and result.
 */
const finish = rewritten('016', functionOf('016', fenceById, 'CREATE OR REPLACE FUNCTION {{schema}}.finish('), [
  [
    `      started_at = coalesce(t.started, j.started_at),
      lease_owner = NULL, lease_expires_at = NULL`,
    `      started_at = coalesce(t.started, j.started_at),
      interruptions = j.interruptions + CASE WHEN t.expired THEN 1 ELSE 0 END,
      interrupted_by = CASE WHEN t.expired THEN array_append(j.interrupted_by, j.lease_owner) ELSE j.interrupted_by END,
      lease_owner = NULL, lease_expires_at = NULL`,
  ],
]);

export default `
-- When the database last started, on its clock in ms: no lease counts time before it. A
-- session that pins the clock (kiln.now_ms, tests) pins this too (kiln.up_since_ms, else 0).
CREATE FUNCTION {{schema}}.up_since_ms() RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN nullif(current_setting('kiln.now_ms', true), '') IS NULL
    THEN (extract(epoch FROM pg_postmaster_start_time()) * 1000)::bigint
    ELSE coalesce(nullif(current_setting('kiln.up_since_ms', true), '')::bigint, 0) END
$$;

ALTER TABLE {{schema}}.jobs ADD COLUMN interruptions integer NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.jobs ADD COLUMN interrupted_by text[];
ALTER TABLE {{schema}}.nodes ADD COLUMN rejoined_at bigint;
${finish}`;
