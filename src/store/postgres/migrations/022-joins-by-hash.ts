import { functionOf, rewritten } from './step-text.js';
import { statusIs } from '../sql.js';
import jobs from './001-jobs.js';
import fenceById from './015-fence-by-id.js';
import batchCounts from './019-batch-counts.js';
import finishedJobs, { finish } from './021-finished-jobs.js';

/**
 * The finish and the writes of dependents join what they write to `jobs` by a hash or a
 * merge, whatever the statistics say (docs/postgres-store.md, "Plans that do not trust
 * the row count").
 *
 * Since finished jobs move out (step 21), `jobs` is often empty when ANALYZE or VACUUM
 * looks at it (a queue that ran dry), and the planner then takes it for a table of one
 * row until the next ANALYZE, seconds later in the best case. A join of the finish's
 * items to a table of one row is cheapest, by that count, as a nested loop that reads
 * `jobs` once and the items once a row: but the table holds the new backlog, and each
 * of its rows is compared with every item (a finish of 3,000 jobs took 5 s). The finish's
 * UPDATE and DELETE now find their rows by the items' ids as an array (one probe of the
 * primary key each, in any plan) and run with nested loops off, so the items are joined
 * by a hash or a merge, whose cost grows with the rows, never with their product. The
 * lookups that lock each item's row stay nested loops (LATERAL has no other plan); with
 * nested loops off their cost counts as huge, which would compile the statement to
 * machine code (JIT) on every plan: JIT is off for it too. Both settings go back as they
 * were before the dependents are released or failed, whose statements want their loops.
 *
 * The dependents of finished jobs are written the same way. release_dependents finds the
 * children to release by lookups first (nested loops) and works out their turns in the
 * same pass, then writes them, by their ids as an array, with nested loops off (it
 * becomes PL/pgSQL for that); fail_dependents writes each generation of failed children
 * so.
 *
 * The batch triggers run inside these statements, so under their settings: their UPDATE
 * of `batches` names its rows by the ids as an array too, or it would hash a scan of
 * every batch ever made.
 *
 * Replaces five functions with the same signatures.
 */
/** Nested loops and JIT off for the transaction (sql.ts, HASH_JOINS); HASH_JOINS_OFF puts them back as they were. */
const HASH_JOINS_ON = `  saved_nestloop := current_setting('enable_nestloop');
  saved_jit := current_setting('jit');
  PERFORM set_config('enable_nestloop', 'off', true), set_config('jit', 'off', true);`;
const HASH_JOINS_OFF = `PERFORM set_config('enable_nestloop', saved_nestloop, true), set_config('jit', saved_jit, true);`;
const SAVED = `  saved_nestloop text;
  saved_jit text;
`;
const BATCHES_BY_ID = [
  `  FROM unnest(moved, deltas, ats) AS d(batch, delta, at)
  WHERE b.id = d.batch;`,
  `  FROM unnest(moved, deltas, ats) AS d(batch, delta, at)
  WHERE b.id = ANY (moved) AND b.id = d.batch;`,
] as [string, string];

const BY_ITEM_IDS = 'j.id = ANY (ARRAY(SELECT id FROM t))';

const finishByHash = rewritten('022', finish, [
  [
    `  WITH i AS (
    SELECT * FROM unnest(`,
    `${HASH_JOINS_ON}
  WITH i AS (
    SELECT * FROM unnest(`,
  ],
  [
    `  INTO done_ids, done_status, done_run_at, done_finished FROM x;
`,
    `  INTO done_ids, done_status, done_run_at, done_finished FROM x;
  ${HASH_JOINS_OFF}
`,
  ],
  [`  failed_ids uuid[];\n`, `  failed_ids uuid[];\n${SAVED}`],
  // The UPDATE's and the DELETE's fence: the item's row found by the items' ids as an array.
  [`    FROM t\n    WHERE j.id = t.id AND `, `    FROM t\n    WHERE ${BY_ITEM_IDS} AND j.id = t.id AND `],
  [`USING t\n    WHERE j.id = t.id AND `, `USING t\n    WHERE ${BY_ITEM_IDS} AND j.id = t.id AND `],
]);

/**
 * The children to release, each with its turn, then written by their ids as an array with
 * nested loops off.
 */
const releaseDependents = rewritten(
  '022',
  functionOf('022', fenceById, 'CREATE OR REPLACE FUNCTION {{schema}}.release_dependents(', '\n$$;\n'),
  [
    [
      `RETURNS SETOF {{schema}}.jobs LANGUAGE sql AS $$
  WITH ready AS (`,
      `RETURNS SETOF {{schema}}.jobs LANGUAGE plpgsql AS $$
DECLARE
  ready_ids uuid[];
  ready_later boolean[];
  ready_round bigint[];
${SAVED}BEGIN
  WITH ready AS (`,
    ],
    // Every child with its turn (none for one that waits for its runAt), in one pass: a join
    // of the children to their turns was a nested loop over both on a small estimate.
    [
      `  turns AS MATERIALIZED (
    SELECT r.id, {{schema}}.round_base(r.priority, r.group_key)
      + row_number() OVER (PARTITION BY r.priority, r.group_key ORDER BY r.id) - 1 AS round
    FROM ready r WHERE NOT coalesce(r.later, false))`,
      `  turns AS MATERIALIZED (
    SELECT r.id, coalesce(r.later, false) AS later,
      CASE WHEN NOT coalesce(r.later, false) THEN {{schema}}.round_base(r.priority, r.group_key)
        + row_number() OVER (PARTITION BY r.priority, r.group_key, coalesce(r.later, false) ORDER BY r.id) - 1 END
        AS round
    FROM ready r)`,
    ],
    [
      `  UPDATE {{schema}}.jobs c
  SET status = CASE WHEN coalesce(ready.later, false) THEN 'scheduled' ELSE 'queued' END,
      ready_at = CASE WHEN coalesce(ready.later, false) THEN NULL ELSE {{schema}}.now_ms() END,
      ready_seq = CASE WHEN coalesce(ready.later, false) THEN NULL ELSE nextval('{{schema}}.ready_order') END,
      run_at = CASE WHEN coalesce(ready.later, false) THEN c.run_at ELSE NULL END,
      round = coalesce(turns.round, c.round)
  FROM ready LEFT JOIN turns ON turns.id = ready.id
  WHERE c.id = ANY (ARRAY(SELECT id FROM ready)) AND c.id = ready.id AND ${statusIs('c', 'waiting')}
  RETURNING c.*
$$;`,
      `  SELECT array_agg(t.id ORDER BY t.id), array_agg(t.later ORDER BY t.id), array_agg(t.round ORDER BY t.id)
  INTO ready_ids, ready_later, ready_round
  FROM turns t;
  IF ready_ids IS NULL THEN RETURN; END IF;
${HASH_JOINS_ON}
  RETURN QUERY WITH released AS (
    UPDATE {{schema}}.jobs c
    SET status = CASE WHEN r.later THEN 'scheduled' ELSE 'queued' END,
        ready_at = CASE WHEN r.later THEN NULL ELSE {{schema}}.now_ms() END,
        ready_seq = CASE WHEN r.later THEN NULL ELSE nextval('{{schema}}.ready_order') END,
        run_at = CASE WHEN r.later THEN c.run_at ELSE NULL END,
        round = coalesce(r.round, c.round)
    FROM unnest(ready_ids, ready_later, ready_round) AS r(id, later, round)
    WHERE c.id = ANY (ready_ids) AND c.id = r.id AND ${statusIs('c', 'waiting')}
    RETURNING c.*)
  SELECT * FROM released;
  ${HASH_JOINS_OFF}
END $$;`,
    ],
  ],
);

/** Each generation of failed children written by their ids as an array, with nested loops off. */
const failDependents = rewritten(
  '022',
  functionOf('022', jobs, 'CREATE FUNCTION {{schema}}.fail_dependents(', 'END $$;\n'),
  [
    ['CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION'],
    [`  next_ids uuid[];\n`, `  next_ids uuid[];\n${SAVED}`],
    [`BEGIN\n  LOOP\n`, `BEGIN\n${HASH_JOINS_ON}\n  LOOP\n`],
    [
      `      FROM children WHERE c.id = children.child AND`,
      `      FROM children WHERE c.id = ANY (ARRAY(SELECT child FROM children)) AND c.id = children.child AND`,
    ],
    [`  END LOOP;\nEND $$;`, `  END LOOP;\n  ${HASH_JOINS_OFF}\nEND $$;`],
  ],
);

export default `
${finishByHash}
${releaseDependents}
${failDependents}
${rewritten('022', batchCounts, [BATCHES_BY_ID])}
${rewritten('022', functionOf('022', finishedJobs, 'CREATE FUNCTION {{schema}}.batch_jobs_done()', 'END $$;\n'), [
  ['CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION'],
  BATCHES_BY_ID,
])}`;
