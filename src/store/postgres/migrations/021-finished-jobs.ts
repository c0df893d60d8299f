import { functionOf, rewritten } from './step-text.js';
import finishWithoutDependents from './018-finish-without-dependents.js';

/**
 * Finished jobs out of the hot table (docs/postgres-store.md, "Finished jobs").
 *
 * `jobs_done` has the columns of `jobs` and holds finished jobs, partitioned by status
 * (`jobs_done_completed`; `jobs_done_ended` for failed and cancelled jobs) and then by
 * finish time, a span of whole hours a partition (`<parent>_<from hour>_<to hour>`, hours
 * since the epoch), with a default partition for a job finished outside every span.
 * Retention removes a span with one `DROP TABLE` (`drop_done_partitions`) and makes the
 * next ones ahead of need (`prepare_done_partitions`), no row deleted one by one and no
 * dead row left behind.
 *
 * The finish function moves a job it completes or fails into `jobs_done` (a delete here,
 * an insert there, in its one statement) when nothing else reads it where it is: no
 * callback (deliveries join `jobs`), no idempotency key (unique by an index on `jobs`), no
 * dedupe key (its result is reused from `jobs`). Every other finished job stays in `jobs`,
 * as before, and is purged by rows. Reads by id, lists and batch counts read both tables;
 * a cancel, retry or removal of a moved job moves it back first (job-actions.ts).
 *
 * The counts follow the rows (the statement triggers of step 1 on `jobs_done` too); a
 * batch's `remaining` falls with each of its jobs moved in (`batch_jobs_done`), which
 * only the finish does. Finished jobs already in `jobs` that qualify are moved into the
 * default partitions, whose rows retention deletes.
 *
 * Replaces the finish function with the same signature and result.
 */

/** The columns of `jobs`, in the table's order (a test holds it to the table). */
export const JOB_TABLE_COLUMNS = [
  'id',
  'type',
  'status',
  'priority',
  'payload',
  'result',
  'error',
  'attempts',
  'max_attempts',
  'timeout_ms',
  'backoff_initial_ms',
  'backoff_factor',
  'backoff_max_ms',
  'backoff_jitter',
  'progress',
  'idempotency_key',
  'depends_on',
  'metadata',
  'run_at',
  'created_at',
  'started_at',
  'finished_at',
  'ready_at',
  'ready_seq',
  'lease_owner',
  'lease_expires_at',
  'dedupe_key',
  'group_key',
  'round',
  'schedule',
  'callback',
  'attempt_started',
  'prior_started_at',
  'snoozes',
  'batch',
  'trace',
  'interruptions',
  'interrupted_by',
] as const;

/** Whether a finished job in `jobs` (alias `j`) may move to `jobs_done`. */
const MOVABLE = (j: string) => `${j}.callback IS NULL AND ${j}.idempotency_key IS NULL AND ${j}.dedupe_key IS NULL`;

/** A moved job's columns as the finish writes them (`g`: the deleted row and the item's `t_*`). */
const MOVED: Partial<Record<(typeof JOB_TABLE_COLUMNS)[number], string>> = {
  status: 'g.t_kind',
  result: `CASE WHEN g.t_kind = 'completed' THEN g.t_result ELSE g.result END`,
  error: `CASE WHEN g.t_kind = 'completed' THEN g.error ELSE g.t_error END`,
  progress: `CASE WHEN g.t_kind = 'completed' THEN coalesce(g.t_progress, g.progress) ELSE g.progress END`,
  run_at: 'NULL',
  finished_at: 'at_ms',
  started_at: 'coalesce(g.t_started, g.started_at)',
  lease_owner: 'NULL',
  lease_expires_at: 'NULL',
  interruptions: 'g.interruptions + CASE WHEN g.t_expired THEN 1 ELSE 0 END',
  interrupted_by: 'CASE WHEN g.t_expired THEN array_append(g.interrupted_by, g.lease_owner) ELSE g.interrupted_by END',
};

const FENCE = `j.id = t.id AND j.status = (SELECT 'running'::text) AND j.attempts = t.attempt AND j.lease_owner = t.owner
      AND (NOT t.expired OR j.lease_expires_at < at_ms)`;

/** The finish function as this step writes it (step 22 rewrites it). */
export const finish = rewritten(
  '021',
  functionOf('021', finishWithoutDependents, 'CREATE OR REPLACE FUNCTION {{schema}}.finish(', 'END $$;\n'),
  [
    [
      `    FROM t
    WHERE ${FENCE}
    RETURNING j.id, j.status, j.run_at, j.finished_at)
  SELECT array_agg(u.id), array_agg(u.status), array_agg(u.run_at), array_agg(u.finished_at)
  INTO done_ids, done_status, done_run_at, done_finished FROM u;`,
      `    FROM t
    WHERE ${FENCE}
      AND NOT (t.kind IN ('completed', 'failed') AND ${MOVABLE('j')})
    RETURNING j.id, j.status, j.run_at, j.finished_at),
  -- A job completed or failed for good that nothing reads in \`jobs\` moves to \`jobs_done\`.
  g AS (
    DELETE FROM {{schema}}.jobs j USING t
    WHERE ${FENCE}
      AND t.kind IN ('completed', 'failed') AND ${MOVABLE('j')}
    RETURNING j.*, t.kind AS t_kind, t.result AS t_result, t.error AS t_error, t.progress AS t_progress,
      t.started AS t_started, t.expired AS t_expired),
  m AS (
    INSERT INTO {{schema}}.jobs_done (${JOB_TABLE_COLUMNS.join(', ')})
    SELECT ${JOB_TABLE_COLUMNS.map((column) => MOVED[column] ?? `g.${column}`).join(', ')} FROM g
    RETURNING id, status, run_at, finished_at),
  x AS (SELECT * FROM u UNION ALL SELECT * FROM m)
  SELECT array_agg(x.id), array_agg(x.status), array_agg(x.run_at), array_agg(x.finished_at)
  INTO done_ids, done_status, done_run_at, done_finished FROM x;`,
    ],
  ],
);

const TERMINAL = `('completed', 'failed', 'cancelled')`;

/** Finished jobs already in `jobs` that qualify, moved (into the default partitions). */
export const MOVE_FINISHED = `
WITH g AS (
  DELETE FROM {{schema}}.jobs j WHERE j.status IN ${TERMINAL} AND j.finished_at IS NOT NULL AND ${MOVABLE('j')}
  RETURNING j.*)
INSERT INTO {{schema}}.jobs_done (${JOB_TABLE_COLUMNS.join(', ')}) SELECT ${JOB_TABLE_COLUMNS.join(', ')} FROM g`;

export default `
CREATE TABLE {{schema}}.jobs_done (LIKE {{schema}}.jobs INCLUDING DEFAULTS) PARTITION BY LIST (status);
CREATE TABLE {{schema}}.jobs_done_completed PARTITION OF {{schema}}.jobs_done
  FOR VALUES IN ('completed') PARTITION BY RANGE (finished_at);
CREATE TABLE {{schema}}.jobs_done_ended PARTITION OF {{schema}}.jobs_done
  FOR VALUES IN ('failed', 'cancelled') PARTITION BY RANGE (finished_at);
CREATE TABLE {{schema}}.jobs_done_completed_default PARTITION OF {{schema}}.jobs_done_completed DEFAULT;
CREATE TABLE {{schema}}.jobs_done_ended_default PARTITION OF {{schema}}.jobs_done_ended DEFAULT;
CREATE INDEX jobs_done_id ON {{schema}}.jobs_done (id);

CREATE TRIGGER jobs_done_count_insert AFTER INSERT ON {{schema}}.jobs_done
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_inserted();
CREATE TRIGGER jobs_done_count_delete AFTER DELETE ON {{schema}}.jobs_done
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_deleted();

${MOVE_FINISHED};

-- Jobs moved in by the finish leave their batch's remaining jobs, as its UPDATE trigger
-- counts them in \`jobs\` (step 19), the batches' rows locked in id order.
CREATE FUNCTION {{schema}}.batch_jobs_done() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  moved uuid[];
  deltas int[];
  ats bigint[];
BEGIN
  SELECT array_agg(d.batch ORDER BY d.batch), array_agg(d.delta ORDER BY d.batch), array_agg(d.at ORDER BY d.batch)
  INTO moved, deltas, ats
  FROM (SELECT n.batch, -count(*)::int AS delta, max(n.finished_at) AS at
        FROM new_rows n WHERE n.batch IS NOT NULL GROUP BY n.batch) d;
  IF moved IS NULL THEN RETURN NULL; END IF;
  PERFORM 1 FROM {{schema}}.batches WHERE id = ANY (moved) ORDER BY id FOR UPDATE;
  UPDATE {{schema}}.batches b SET remaining = b.remaining + d.delta,
    finished_at = CASE WHEN b.remaining + d.delta <> 0 THEN NULL
                       WHEN b.remaining = 0 THEN b.finished_at
                       ELSE coalesce(d.at, {{schema}}.now_ms()) END
  FROM unnest(moved, deltas, ats) AS d(batch, delta, at)
  WHERE b.id = d.batch;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_done_batch_on_insert AFTER INSERT ON {{schema}}.jobs_done
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.batch_jobs_done();

-- The spans of hours partitions of p_parent (jobs_done_completed, jobs_done_ended) cover.
CREATE FUNCTION {{schema}}.done_partitions(p_parent text)
RETURNS TABLE (name text, from_h bigint, to_h bigint) LANGUAGE sql STABLE AS $$
  SELECT c.relname::text, m[1]::bigint, m[2]::bigint
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  CROSS JOIN LATERAL regexp_match(c.relname::text, '_([0-9]+)_([0-9]+)$') AS m
  WHERE i.inhparent = ('{{schema}}.' || quote_ident(p_parent))::regclass AND m IS NOT NULL
$$;

-- Partitions of p_width_h hours each for p_parent from where the last one ends (or from
-- now's span, after a gap) until p_ahead_h hours from now; answers how many it made. One
-- server at a time; a lock not granted in time, or a span the default partition already
-- holds jobs of, is left for the default partition.
CREATE FUNCTION {{schema}}.prepare_done_partitions(p_parent text, p_width_h int, p_ahead_h int)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  now_h bigint := {{schema}}.now_ms() / 3600000;
  next_h bigint;
  part text;
  made int := 0;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext('kiln:done-partitions:{{schema}}')) THEN RETURN 0; END IF;
  PERFORM set_config('lock_timeout', '200ms', true);
  SELECT max(p.to_h) INTO next_h FROM {{schema}}.done_partitions(p_parent) p;
  next_h := greatest(coalesce(next_h, 0), now_h - now_h % p_width_h);
  WHILE next_h <= now_h + p_ahead_h LOOP
    part := p_parent || '_' || next_h || '_' || (next_h + p_width_h);
    BEGIN
      EXECUTE format('CREATE TABLE {{schema}}.%I (LIKE {{schema}}.%I INCLUDING DEFAULTS)', part, p_parent);
      EXECUTE format('ALTER TABLE {{schema}}.%I ATTACH PARTITION {{schema}}.%I FOR VALUES FROM (%s) TO (%s)',
        p_parent, part, next_h * 3600000, (next_h + p_width_h) * 3600000);
      made := made + 1;
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
    next_h := next_h + p_width_h;
  END LOOP;
  RETURN made;
END $$;

-- Drops every partition of p_parent whose span ends by p_before_ms: its jobs leave the
-- counts and their edges go with them. Answers how many jobs went. One server at a time.
CREATE FUNCTION {{schema}}.drop_done_partitions(p_parent text, p_before_ms bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  part record;
  n bigint;
  total bigint := 0;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext('kiln:done-partitions:{{schema}}')) THEN RETURN 0; END IF;
  PERFORM set_config('lock_timeout', '200ms', true);
  FOR part IN SELECT p.name FROM {{schema}}.done_partitions(p_parent) p
              WHERE p.to_h * 3600000 <= p_before_ms ORDER BY p.from_h LOOP
    BEGIN
      EXECUTE format($q$
        WITH c AS (SELECT status, priority, count(*) AS n FROM {{schema}}.%I GROUP BY status, priority),
        i AS (INSERT INTO {{schema}}.counts (slot, status, priority, n)
              SELECT pg_backend_pid(), status, priority, -n FROM c
              ON CONFLICT (slot, status, priority) DO UPDATE SET n = {{schema}}.counts.n + excluded.n)
        SELECT coalesce(sum(n), 0) FROM c$q$, part.name) INTO n;
      IF EXISTS (SELECT 1 FROM {{schema}}.job_deps) THEN
        EXECUTE format('DELETE FROM {{schema}}.job_deps WHERE child IN (SELECT id FROM {{schema}}.%I)', part.name);
      END IF;
      EXECUTE format('DROP TABLE {{schema}}.%I', part.name);
      total := total + n;
    EXCEPTION WHEN lock_not_available THEN
      NULL;
    END;
  END LOOP;
  RETURN total;
END $$;
${finish}`;
