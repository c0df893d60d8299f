import { PENDING_STATUSES } from '../core/statuses.js';

/**
 * The statements of the PostgreSQL store, templated once per schema. Every time that
 * decides something (ready, due, lease expiry, finish, retention) is `now_ms()`, the
 * database's clock; callers pass durations.
 */

export const PENDING_SQL = `(${PENDING_STATUSES.map((status) => `'${status}'`).join(', ')})`;

/** Columns of a job as core/rows.ts names them (it maps the rows of both stores). */
export const SUMMARY_COLUMNS =
  'id::text AS id, type, status, priority, error, attempts, max_attempts, timeout_ms, backoff_initial_ms, ' +
  'backoff_factor, backoff_max_ms, backoff_jitter, progress, idempotency_key, depends_on, metadata, run_at, ' +
  'created_at, started_at, finished_at, ready_at, lease_owner, lease_expires_at, group_key, schedule, callback';

export const JOB_COLUMNS = `${SUMMARY_COLUMNS}, payload, result`;

/** The first round of each (priority, group) among the rows `from` names, one probe each. */
const ROUND_BASES = (s: string, from: string) =>
  `(SELECT g.priority, g.group_key, ${s}.round_base(g.priority, g.group_key) AS base
    FROM (SELECT DISTINCT priority, group_key FROM ${from}) g)`;

/**
 * Under priority aging, when the first candidate of a level in claim order became
 * ready: a level ages as its next job in fair order, so the level with the best
 * effective priority is taken first and, inside it, groups still take turns.
 */
const LEVEL_HEAD_READY_AT =
  'first_value(c.ready_at) OVER (PARTITION BY c.priority ORDER BY c.round, c.ready_at, c.ready_seq)';

export function statements(schema: string) {
  const s = `"${schema}"`;
  const now = `${s}.now_ms()`;
  const prefixed = (alias: string) =>
    JOB_COLUMNS.split(', ')
      .map((column) => (column.startsWith('id::text') ? `${alias}.id::text AS id` : `${alias}.${column}`))
      .join(', ');
  return {
    /**
     * One statement for a whole request (without idempotency keys or outside parents):
     * admission against the counted pending jobs, the rows, their dependency edges.
     * Answers the pending count and one row per inserted job (none when the queue is full).
     */
    insert: `
WITH pending AS (SELECT coalesce(sum(n), 0)::bigint AS n FROM ${s}.counts WHERE status IN ${PENDING_SQL}),
i AS (
  SELECT i.*, coalesce(i.run_at > ${now}, false) AS due_later FROM unnest(
    $1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::text[], $6::text[], $7::int[], $8::bigint[],
    $9::bigint[], $10::float8[], $11::bigint[], $12::text[], $13::text[], $14::text[], $15::text[],
    $16::bigint[], $17::bigint[], $23::text[], $24::text[], $25::text[], $26::text[]) WITH ORDINALITY
    AS i(id, type, decided, priority, payload, error, max_attempts, timeout_ms, backoff_initial_ms,
         backoff_factor, backoff_max_ms, backoff_jitter, idempotency_key, depends_on, metadata, run_at,
         created_at, dedupe_key, group_key, schedule, callback, ord)),
turns AS (
  SELECT q.ord, b.base + row_number() OVER (PARTITION BY q.priority, q.group_key ORDER BY q.ord) - 1 AS round
  FROM i q JOIN ${ROUND_BASES(s, "i WHERE decided = 'ready' AND NOT due_later")} AS b
    ON b.priority = q.priority AND b.group_key IS NOT DISTINCT FROM q.group_key
  WHERE q.decided = 'ready' AND NOT q.due_later),
ins AS (
  INSERT INTO ${s}.jobs (id, type, status, priority, payload, error, max_attempts, timeout_ms, backoff_initial_ms,
    backoff_factor, backoff_max_ms, backoff_jitter, idempotency_key, depends_on, metadata, run_at, created_at,
    finished_at, ready_at, ready_seq, dedupe_key, group_key, round, schedule, callback)
  SELECT i.id, i.type,
    CASE WHEN decided <> 'ready' THEN decided WHEN due_later THEN 'scheduled' ELSE 'queued' END,
    priority, payload, error, max_attempts, timeout_ms, backoff_initial_ms, backoff_factor, backoff_max_ms,
    backoff_jitter, idempotency_key, depends_on, metadata,
    CASE WHEN decided = 'waiting' OR (decided = 'ready' AND due_later) THEN run_at END,
    created_at,
    CASE WHEN decided = 'failed' THEN ${now} END,
    CASE WHEN decided = 'ready' AND NOT due_later THEN ${now} END,
    CASE WHEN decided = 'ready' AND NOT due_later THEN nextval('${s}.ready_order') END,
    dedupe_key, group_key, coalesce(turns.round, 0), i.schedule, i.callback
  FROM i LEFT JOIN turns ON turns.ord = i.ord WHERE $18 = 0 OR (SELECT n FROM pending) + $18 <= $19
  ORDER BY i.ord
  ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
  RETURNING id::text AS id, status, run_at, ready_at, finished_at),
deps AS (
  INSERT INTO ${s}.job_deps (child, parent, position)
  SELECT d.child, d.parent, d.position FROM unnest($20::uuid[], $21::uuid[], $22::smallint[]) AS d(child, parent, position)
  WHERE d.child IN (SELECT id::uuid FROM ins))
SELECT (SELECT n FROM pending) AS pending, ins.* FROM (SELECT 1) AS one LEFT JOIN ins ON true`,

    /** Locked like outside parents: a later item of the batch may depend on the job a key replays. */
    byKeys: `SELECT ${JOB_COLUMNS} FROM ${s}.jobs WHERE idempotency_key = ANY($1::text[]) FOR SHARE`,
    /** Unfinished jobs holding dedupe keys ($1), locked like outside parents. */
    liveByDedupe: `SELECT ${JOB_COLUMNS}, dedupe_key FROM ${s}.jobs
      WHERE dedupe_key = ANY($1::text[]) AND status NOT IN ('completed', 'failed', 'cancelled') FOR SHARE`,
    /** The newest completed job of a dedupe key ($1) finished within $2 ms. */
    doneByDedupe: `SELECT ${JOB_COLUMNS} FROM ${s}.jobs
      WHERE dedupe_key = $1 AND status = 'completed' AND finished_at >= ${now} - $2
      ORDER BY finished_at DESC LIMIT 1`,
    /** Another unfinished job with the job's dedupe key (a retry would make two). */
    dedupeRival: `SELECT l.id::text AS id FROM ${s}.jobs j JOIN ${s}.jobs l ON l.dedupe_key = j.dedupe_key AND l.id <> j.id
      WHERE j.id = $1 AND l.status NOT IN ('completed', 'failed', 'cancelled') LIMIT 1`,
    /** Outside parents, locked so a parent cannot finish unseen while its child is inserted. */
    lockParents: `SELECT id::text AS id, status FROM ${s}.jobs WHERE id = ANY($1::uuid[]) FOR SHARE`,

    /** Due jobs become queued, ready since their runAt; the last row answers the next due time. */
    promote: `
WITH due AS MATERIALIZED (
  SELECT id, priority, group_key, run_at FROM ${s}.jobs WHERE status IN ('scheduled', 'retrying') AND run_at <= ${now}
  ORDER BY run_at LIMIT 1000 FOR UPDATE SKIP LOCKED),
turns AS (
  SELECT d.id, b.base + row_number() OVER (PARTITION BY d.priority, d.group_key ORDER BY d.run_at, d.id) - 1 AS round
  FROM due d JOIN ${ROUND_BASES(s, 'due')} AS b ON b.priority = d.priority AND b.group_key IS NOT DISTINCT FROM d.group_key),
promoted AS (
  UPDATE ${s}.jobs j SET status = 'queued', ready_at = j.run_at, ready_seq = nextval('${s}.ready_order'), run_at = NULL,
    round = turns.round
  FROM turns WHERE j.id = turns.id
  RETURNING j.id::text AS id, j.type)
SELECT id, type, NULL::bigint AS next_due FROM promoted
UNION ALL
SELECT NULL, NULL, (SELECT min(run_at) FROM ${s}.jobs
                    WHERE status IN ('scheduled', 'retrying') AND id NOT IN (SELECT id FROM due))`,

    nextDue: `SELECT min(run_at) AS at FROM ${s}.jobs WHERE status IN ('scheduled', 'retrying')`,

    /**
     * The claim: the best queued jobs in index order ($2 of them), skipping rows other
     * claimers hold, become running under the owner's lease ($1, $3 ms). Nothing while
     * dispatch is paused cluster-wide.
     */
    claim: `
WITH picked AS MATERIALIZED (
  SELECT id, started_at AS previous_start FROM ${s}.jobs
  WHERE status = 'queued' AND NOT EXISTS (SELECT 1 FROM ${s}.settings WHERE key = 'paused' AND value = 'true')
  ORDER BY priority DESC, round, ready_at, ready_seq
  LIMIT $2
  FOR UPDATE SKIP LOCKED)
UPDATE ${s}.jobs j SET status = 'running', attempts = j.attempts + 1, started_at = ${now},
  prior_started_at = j.started_at, attempt_started = false, lease_owner = $1,
  lease_expires_at = ${now} + $3, progress = NULL, run_at = NULL
FROM picked WHERE j.id = picked.id
RETURNING picked.previous_start, j.ready_seq, j.round, ${prefixed('j')}`,

    /**
     * Task limits across the cluster. A claim that applies them first takes a
     * transaction-scoped advisory lock per limited type ($2, in order), so that two servers
     * never both count the same free place, then reads what each type uses: running
     * attempts and starts inside its rate window ($3 ms; 0 without a rate limit).
     */
    lockLimitedTypes: `SELECT pg_advisory_xact_lock(hashtextextended($1 || ':limit:' || t, 0))
      FROM unnest($2::text[]) AS t ORDER BY t`,
    limitUsage: `
SELECT t.type,
  (SELECT count(*) FROM ${s}.jobs j WHERE j.status = 'running' AND j.type = t.type)::int AS running,
  (SELECT count(*) FROM ${s}.rate_starts r WHERE r.type = t.type AND r.at > ${now} - t.per_ms)::int AS started
FROM unnest($1::text[], $2::bigint[]) AS t(type, per_ms)`,
    /** Forget starts that left their type's window. */
    forgetStarts: `DELETE FROM ${s}.rate_starts r USING unnest($1::text[], $2::bigint[]) AS t(type, per_ms)
      WHERE r.type = t.type AND r.at <= ${now} - t.per_ms`,
    recordStarts: `INSERT INTO ${s}.rate_starts (type, at) SELECT t, ${now} FROM unnest($1::text[]) AS t`,
    /**
     * Candidates type by type ($1 types, at most $2 of each, best first, $3 in all), so a
     * type held back by its limit is never read: each type is one probe of jobs_claim_type.
     */
    claimCandidatesByType: `
SELECT c.id::text AS id, c.type FROM unnest($1::text[], $2::int[]) AS t(type, n) CROSS JOIN LATERAL (
  SELECT j.id, j.type, j.priority, j.round, j.ready_at, j.ready_seq FROM ${s}.jobs j
  WHERE j.status = 'queued' AND j.type = t.type
  ORDER BY j.priority DESC, j.round, j.ready_at, j.ready_seq
  LIMIT t.n
  FOR UPDATE SKIP LOCKED) c
WHERE NOT EXISTS (SELECT 1 FROM ${s}.settings WHERE key = 'paused' AND value = 'true')
ORDER BY c.priority DESC, c.round, c.ready_at, c.ready_seq
LIMIT $3`,
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
WHERE NOT EXISTS (SELECT 1 FROM ${s}.settings WHERE key = 'paused' AND value = 'true')
ORDER BY least(9, c.priority + (${now} - ${LEVEL_HEAD_READY_AT}) / $2::bigint) DESC, ${LEVEL_HEAD_READY_AT},
  c.priority DESC, c.round, c.ready_at, c.ready_seq
LIMIT $1`,
    claimCandidatesByTypeAged: `
SELECT c.id::text AS id, c.type
FROM unnest($1::text[], $2::int[]) AS t(type, n) CROSS JOIN generate_series(0, 9) AS l(p) CROSS JOIN LATERAL (
  SELECT j.id, j.type, j.priority, j.round, j.ready_at, j.ready_seq FROM ${s}.jobs j
  WHERE j.status = 'queued' AND j.type = t.type AND j.priority = l.p
  ORDER BY j.priority DESC, j.round, j.ready_at, j.ready_seq
  LIMIT t.n
  FOR UPDATE SKIP LOCKED) c
WHERE NOT EXISTS (SELECT 1 FROM ${s}.settings WHERE key = 'paused' AND value = 'true')
ORDER BY least(9, c.priority + (${now} - ${LEVEL_HEAD_READY_AT}) / $4::bigint) DESC, ${LEVEL_HEAD_READY_AT},
  c.priority DESC, c.round, c.ready_at, c.ready_seq
LIMIT $3`,
    /** Held types that have queued jobs (a claim passed them over). */
    queuedTypes: `SELECT t AS type FROM unnest($1::text[]) AS t
      WHERE EXISTS (SELECT 1 FROM ${s}.jobs j WHERE j.status = 'queued' AND j.type = t)`,

    /** Candidates of a micro-batched claim, locked for the transaction that forms the batches. */
    claimCandidates: `
SELECT id::text AS id, type FROM ${s}.jobs
WHERE status = 'queued' AND NOT EXISTS (SELECT 1 FROM ${s}.settings WHERE key = 'paused' AND value = 'true')
ORDER BY priority DESC, round, ready_at, ready_seq
LIMIT $1
FOR UPDATE SKIP LOCKED`,

    /** The chosen candidates, found by id alone (never by status: see the finish function). */
    claimIds: `
WITH picked AS MATERIALIZED (
  SELECT r.id, r.previous_start FROM unnest($2::uuid[]) AS i(id) CROSS JOIN LATERAL (
    SELECT j.id, j.status, j.started_at AS previous_start FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
  WHERE r.status = 'queued')
UPDATE ${s}.jobs j SET status = 'running', attempts = j.attempts + 1, started_at = ${now},
  prior_started_at = j.started_at, attempt_started = false, lease_owner = $1,
  lease_expires_at = ${now} + $3, progress = NULL, run_at = NULL
FROM picked WHERE j.id = picked.id AND j.status = 'queued'
RETURNING picked.previous_start, j.ready_seq, j.round, ${prefixed('j')}`,

    parents: `SELECT id::text AS id, type, result FROM ${s}.jobs WHERE id = ANY($1::uuid[])`,

    /**
     * Renews the owner's leases on the ids it names (a lease that ran out but was not yet
     * rescued is renewed: the rescue's fence then fails) and records the node.
     */
    heartbeat: `
WITH held AS MATERIALIZED (
  SELECT r.id FROM (SELECT id FROM unnest($2::uuid[]) AS u(id) ORDER BY id) AS i CROSS JOIN LATERAL (
    SELECT j.id, j.status, j.lease_owner FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
  WHERE r.status = 'running' AND r.lease_owner = $1),
renewed AS (
  UPDATE ${s}.jobs j SET lease_expires_at = ${now} + $3 FROM held
  WHERE j.id = held.id AND j.status = 'running' AND j.lease_owner = $1
  RETURNING j.id::text AS id),
node AS (
  INSERT INTO ${s}.nodes (id, host, pid, version, threads, busy, started_at, last_seen_at, lease_ms)
  VALUES ($1, $4, $5, $6, $7, $8, ${now}, ${now}, $9)
  ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at, busy = excluded.busy,
    threads = excluded.threads, lease_ms = excluded.lease_ms, stopped_at = NULL)
SELECT ARRAY(SELECT id FROM renewed) AS renewed, (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now`,

    progress: `
WITH held AS MATERIALIZED (
  SELECT i.* FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[]) AS i(id, attempt, owner, progress)
  CROSS JOIN LATERAL (
    SELECT j.status, j.attempts, j.lease_owner FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
  WHERE r.status = 'running' AND r.attempts = i.attempt AND r.lease_owner = i.owner)
UPDATE ${s}.jobs j SET progress = held.progress FROM held
WHERE j.id = held.id AND j.status = 'running' AND j.attempts = held.attempt AND j.lease_owner = held.owner`,

    /**
     * Records handlers' starts ($1 ids, $2 attempts, $3 owners, $4 times), fenced in the
     * UPDATE's own WHERE; rows are locked in id order first, as every statement that locks
     * several jobs takes them.
     */
    started: `
WITH i AS (SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::bigint[]) AS i(id, attempt, owner, at)),
locked AS MATERIALIZED (SELECT j.id FROM ${s}.jobs j WHERE j.id IN (SELECT id FROM i) ORDER BY j.id FOR UPDATE)
UPDATE ${s}.jobs j SET started_at = i.at, attempt_started = true
FROM i WHERE j.id = i.id AND j.id IN (SELECT id FROM locked)
  AND j.status = 'running' AND j.attempts = i.attempt AND j.lease_owner = i.owner`,

    /**
     * Rescued attempts whose handler never started ($1 ids, $2 attempts, $3 owners, $4 whether
     * the lease must have run out): queued again as before the claim, the attempt not counted.
     */
    returnUnstarted: `
WITH i AS (SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::boolean[]) AS i(id, attempt, owner, expired)),
locked AS MATERIALIZED (SELECT j.id FROM ${s}.jobs j WHERE j.id IN (SELECT id FROM i) ORDER BY j.id FOR UPDATE)
UPDATE ${s}.jobs j SET status = 'queued', attempts = j.attempts - 1, started_at = j.prior_started_at,
  lease_owner = NULL, lease_expires_at = NULL
FROM i WHERE j.id = i.id AND j.id IN (SELECT id FROM locked)
  AND j.status = 'running' AND j.attempts = i.attempt AND j.lease_owner = i.owner AND NOT j.attempt_started
  AND (NOT i.expired OR j.lease_expires_at < ${now})
RETURNING ${prefixed('j')}`,

    finish: `SELECT job_id::text AS id, job_status AS status, job_run_at AS run_at, job_finished_at AS finished_at,
  is_other FROM ${s}.finish($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
  $8::bigint[], $9::boolean[], $10::bigint[])`,

    release: `
WITH held AS MATERIALIZED (
  SELECT i.* FROM unnest($1::uuid[], $2::int[], $3::text[], $4::bigint[]) AS i(id, attempt, owner, previous_start)
  CROSS JOIN LATERAL (
    SELECT j.status, j.attempts, j.lease_owner FROM ${s}.jobs j WHERE j.id = i.id LIMIT 1 FOR UPDATE) r
  WHERE r.status = 'running' AND r.attempts = i.attempt AND r.lease_owner = i.owner)
UPDATE ${s}.jobs j SET status = 'queued', attempts = j.attempts - 1, started_at = held.previous_start,
  lease_owner = NULL, lease_expires_at = NULL
FROM held WHERE j.id = held.id AND j.status = 'running' AND j.attempts = held.attempt AND j.lease_owner = held.owner
RETURNING ${prefixed('j')}`,

    lockJob: `SELECT status, attempts, depends_on FROM ${s}.jobs WHERE id = $1 FOR UPDATE`,
    cancel: `
UPDATE ${s}.jobs SET status = 'cancelled', error = $2, finished_at = ${now}, run_at = NULL, lease_owner = NULL,
  lease_expires_at = NULL
WHERE id = $1 RETURNING ${JOB_COLUMNS}`,
    failDependents: `SELECT ${JOB_COLUMNS} FROM ${s}.fail_dependents($1::uuid[], $2)`,
    retry: `
UPDATE ${s}.jobs SET status = $2, ready_at = CASE WHEN $2 = 'queued' THEN ${now} END,
  ready_seq = CASE WHEN $2 = 'queued' THEN nextval('${s}.ready_order') END, attempts = 0,
  round = CASE WHEN $2 = 'queued' THEN ${s}.round_base(priority, group_key) ELSE round END,
  finished_at = NULL, result = NULL, progress = NULL, run_at = NULL, lease_owner = NULL, lease_expires_at = NULL
WHERE id = $1 RETURNING ${JOB_COLUMNS}`,
    remove: `
WITH gone AS (DELETE FROM ${s}.jobs WHERE id = $1 AND status IN ('completed', 'failed', 'cancelled') RETURNING id)
DELETE FROM ${s}.job_deps WHERE child IN (SELECT id FROM gone)`,
    statusOf: `SELECT status FROM ${s}.jobs WHERE id = $1`,

    get: `SELECT ${JOB_COLUMNS} FROM ${s}.jobs WHERE id = $1`,
    getMany: `SELECT ${JOB_COLUMNS} FROM ${s}.jobs WHERE id = ANY($1::uuid[])`,

    counts: `SELECT status, priority, sum(n)::bigint AS n FROM ${s}.counts GROUP BY status, priority HAVING sum(n) <> 0`,
    /** When the oldest queued job became ready: one probe of the claim index per priority. */
    oldestQueued: `
SELECT min(q.ready_at) AS at FROM generate_series(0, 9) AS p(priority),
LATERAL (SELECT ready_at FROM ${s}.jobs WHERE status = 'queued' AND priority = p.priority
         ORDER BY priority DESC, round, ready_at, ready_seq LIMIT 1) AS q`,

    paused: `SELECT value FROM ${s}.settings WHERE key = 'paused'`,
    settingsByPrefix: `SELECT key, value FROM ${s}.settings WHERE starts_with(key, $1)`,
    putSetting: `INSERT INTO ${s}.settings (key, value) VALUES ($1, $2)
      ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
    deleteSetting: `DELETE FROM ${s}.settings WHERE key = $1`,
    setPaused: `INSERT INTO ${s}.settings (key, value) VALUES ('paused', $1)
ON CONFLICT (key) DO UPDATE SET value = excluded.value`,

    /**
     * Attempts whose lease ran out, oldest first. The job leases of servers whose node
     * lease ran out (not heard of for their lease_ms, within the last day: no job lease is
     * longer) are cut first, in the same statement:
     * the rescue's fence (lease_expires_at < now) then holds for them, and a beat of a
     * server that was only slow renews them again, as for any job lease.
     */
    expired: `
WITH dead AS (
  SELECT id FROM ${s}.nodes WHERE stopped_at IS NULL AND lease_ms IS NOT NULL AND last_seen_at + lease_ms < ${now}
    AND last_seen_at > ${now} - 86400000),
cut AS (
  UPDATE ${s}.jobs j SET lease_expires_at = ${now} - 1 FROM dead
  WHERE j.status = 'running' AND j.lease_owner = dead.id AND j.lease_expires_at >= ${now}
  RETURNING j.id, j.type, j.lease_owner, j.attempts, j.attempt_started, j.max_attempts, j.backoff_initial_ms, j.backoff_factor,
    j.backoff_max_ms, j.backoff_jitter, j.lease_expires_at)
SELECT id::text AS id, type, lease_owner, attempts, attempt_started, max_attempts, backoff_initial_ms, backoff_factor,
  backoff_max_ms, backoff_jitter
FROM (SELECT * FROM cut UNION ALL
      SELECT id, type, lease_owner, attempts, attempt_started, max_attempts, backoff_initial_ms, backoff_factor,
        backoff_max_ms, backoff_jitter, lease_expires_at
      FROM ${s}.jobs WHERE status = 'running' AND lease_expires_at < ${now}) e
ORDER BY lease_expires_at LIMIT $1`,

    /** A batch of the oldest terminal jobs past their retention; their edges go with them. */
    purge: `
WITH gone AS (
  DELETE FROM ${s}.jobs WHERE id IN (
    SELECT id FROM ${s}.jobs WHERE status = $1 AND finished_at IS NOT NULL AND finished_at < ${now} - $2
    ORDER BY finished_at LIMIT $3)
  RETURNING id),
edges AS (DELETE FROM ${s}.job_deps WHERE child IN (SELECT id FROM gone))
SELECT count(*)::int AS n FROM gone`,

    /** Live servers: heard of within their node lease ($1 ms for rows written without one). */
    nodes: `
SELECT id, host, pid, version, threads, busy, started_at, last_seen_at FROM ${s}.nodes
WHERE stopped_at IS NULL AND last_seen_at > ${now} - coalesce(lease_ms, $1) ORDER BY started_at, id`,
    stopNode: `UPDATE ${s}.nodes SET stopped_at = ${now}, busy = 0 WHERE id = ANY($1::text[])`,
    /** Rows of servers gone for a week (each start of a server is a row of its own). */
    forgetNodes: `DELETE FROM ${s}.nodes WHERE last_seen_at < ${now} - 7 * 86400000`,

    /** Folds the count rows of connections that are gone into slot 0, so the table stays small. */
    foldCounts: `
WITH gone AS (
  DELETE FROM ${s}.counts WHERE slot <> 0 AND slot NOT IN (SELECT pid FROM pg_stat_activity)
  RETURNING status, priority, n)
INSERT INTO ${s}.counts (slot, status, priority, n)
SELECT 0, status, priority, sum(n) FROM gone GROUP BY status, priority
ON CONFLICT (slot, status, priority) DO UPDATE SET n = ${s}.counts.n + excluded.n`,

    /**
     * Takes the upkeep lock if no other server holds it (a session lock, given back by
     * upkeepDone on the same connection) and says whether `jobs` wants ANALYZE (1,000
     * changes and a tenth of its rows since the last) or VACUUM (10,000 dead row versions
     * and a fifth of its live ones), by the table's own statistics counters.
     */
    upkeepDue: `
SELECT locked,
  locked AND coalesce(s.n_mod_since_analyze > greatest(1000, s.n_live_tup / 10), false) AS analyze,
  locked AND coalesce(s.n_dead_tup > greatest(10000, s.n_live_tup / 5), false) AS vacuum
FROM (SELECT pg_try_advisory_lock(('x' || left(md5('kiln:upkeep:' || '${schema}'), 16))::bit(64)::bigint) AS locked) l
LEFT JOIN pg_stat_user_tables s ON s.schemaname = '${schema}' AND s.relname = 'jobs'`,
    upkeepDone: `SELECT pg_advisory_unlock(('x' || left(md5('kiln:upkeep:' || '${schema}'), 16))::bit(64)::bigint)`,
    analyze: `ANALYZE ${s}.jobs`,
    vacuum: `VACUUM (ANALYZE, SKIP_LOCKED) ${s}.jobs`,

    schedules: `SELECT * FROM ${s}.schedules ORDER BY name`,
    schedule: `SELECT * FROM ${s}.schedules WHERE name = $1`,
    /** The schedule's row, locked: the compare-and-set of a tick reads and writes it under this lock. */
    lockSchedule: `SELECT * FROM ${s}.schedules WHERE name = $1 FOR UPDATE`,
    /** Create, or replace the definition (keeping created_at, last_run_at, last_job_id); `created` says which. */
    putSchedule: `
INSERT INTO ${s}.schedules AS t (name, cron, timezone, job, overlap, catch_up, paused, next_run_at, created_at,
  updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, timezone = excluded.timezone, job = excluded.job,
  overlap = excluded.overlap, catch_up = excluded.catch_up, paused = excluded.paused,
  next_run_at = excluded.next_run_at, updated_at = excluded.updated_at
RETURNING t.*, (xmax = 0) AS created`,
    removeSchedule: `DELETE FROM ${s}.schedules WHERE name = $1`,
    advanceSchedule: `UPDATE ${s}.schedules SET next_run_at = $2 WHERE name = $1 RETURNING *`,
    recordScheduleRun: `UPDATE ${s}.schedules SET last_run_at = $2, last_job_id = $3 WHERE name = $1 RETURNING *`,
    /**
     * Callback deliveries: lease up to $3 due ones that no live owner holds ($1 for $2 ms),
     * skipping rows another server is leasing this moment.
     */
    claimDeliveries: `
WITH due AS MATERIALIZED (
  SELECT id FROM ${s}.callback_deliveries
  WHERE status = 'pending' AND next_at <= ${now} AND (lease_expires_at IS NULL OR lease_expires_at <= ${now})
  ORDER BY next_at LIMIT $3
  FOR UPDATE SKIP LOCKED),
leased AS (
  UPDATE ${s}.callback_deliveries d SET lease_owner = $1, lease_expires_at = ${now} + $2
  FROM due WHERE d.id = due.id
  RETURNING d.id, d.job_id, d.event, d.attempts, d.body)
SELECT l.id::text AS id, l.job_id::text AS job_id, l.event, l.attempts, l.body, j.callback
FROM leased l LEFT JOIN ${s}.jobs j ON j.id = l.job_id`,
    /** An attempt of delivery $1 (attempt $2, owner $3), fenced; $5: the delivery's status after it. */
    recordDelivery: `
WITH d AS (
  UPDATE ${s}.callback_deliveries SET status = $5, attempts = $2,
    next_at = CASE WHEN $5 = 'pending' THEN ${now} + $8 END, body = $4, lease_owner = NULL, lease_expires_at = NULL
  WHERE id = $1 AND status = 'pending' AND attempts = $2 - 1 AND lease_owner = $3
  RETURNING id)
INSERT INTO ${s}.callback_attempts (delivery_id, attempt, status, http_status, error, at)
SELECT id, $2, $9, $6, $7, ${now} FROM d RETURNING attempt`,
    nextDelivery: `SELECT min(greatest(next_at, coalesce(lease_expires_at, 0))) AS at FROM ${s}.callback_deliveries
      WHERE status = 'pending'`,
    deliveriesOf: `
SELECT d.id::text AS id, d.event, d.status, d.attempts, d.next_at, a.attempt, a.status AS attempt_status,
  a.http_status, a.error, a.at
FROM ${s}.callback_deliveries d LEFT JOIN ${s}.callback_attempts a ON a.delivery_id = d.id
WHERE d.job_id = $1 ORDER BY d.seq, a.attempt`,

    list: (where: string[], limitParam: number) =>
      `SELECT ${SUMMARY_COLUMNS} FROM ${s}.jobs ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
ORDER BY id DESC LIMIT $${limitParam}`,
  };
}

export type Statements = ReturnType<typeof statements>;
