import { functionOf, rewritten } from './step-text.js';
import batches from './012-batches.js';

/**
 * The trigger that keeps each batch's `remaining` (step 12) counts it per batch as the
 * statement's non-terminal jobs after it less those before it, each transition table
 * grouped on its own. It joined the old rows to the new ones by id, and PL/pgSQL keeps
 * the plan it makes for its first calls, when a statement writes a few rows: a nested
 * loop over two tuple stores, which no statistics describe. A finish of 800 jobs of one
 * batch then took 100 ms in that join alone, and a young schema's noop runs fell from
 * 11,000 to 2,000-7,000 jobs a second. Grouping each side alone has no such plan.
 *
 * A batch's `finished_at` is the latest `finished_at` among its jobs the statement wrote
 * (those that moved were finished by it, so they are the latest).
 *
 * Replaces a function with the same signature.
 */
const TERMINAL = `('completed', 'failed', 'cancelled')`;

export default rewritten(
  '019',
  functionOf('019', batches, 'CREATE FUNCTION {{schema}}.batch_jobs_moved()', 'END $$;\n'),
  [
    ['CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION'],
    [
      `  moved uuid[];
`,
      `  moved uuid[];
  deltas int[];
  ats bigint[];
`,
    ],
    [
      `  SELECT array_agg(DISTINCT n.batch ORDER BY n.batch) INTO moved
  FROM new_rows n JOIN old_rows o ON o.id = n.id
  WHERE n.batch IS NOT NULL AND (o.status IN ${TERMINAL}) <> (n.status IN ${TERMINAL});`,
      `  SELECT array_agg(d.batch ORDER BY d.batch), array_agg(d.delta ORDER BY d.batch), array_agg(d.at ORDER BY d.batch)
  INTO moved, deltas, ats
  FROM (
    SELECT x.batch, sum(x.open)::int AS delta, max(x.at) AS at FROM (
      SELECT n.batch, CASE WHEN n.status IN ${TERMINAL} THEN 0 ELSE 1 END AS open, n.finished_at AS at
      FROM new_rows n WHERE n.batch IS NOT NULL
      UNION ALL
      SELECT o.batch, CASE WHEN o.status IN ${TERMINAL} THEN 0 ELSE -1 END, NULL
      FROM old_rows o WHERE o.batch IS NOT NULL) x
    GROUP BY x.batch HAVING sum(x.open) <> 0) d;`,
    ],
    [
      `  FROM (
    SELECT n.batch, sum(CASE WHEN n.status IN ${TERMINAL} THEN -1 ELSE 1 END) AS delta, max(n.finished_at) AS at
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.batch IS NOT NULL AND (o.status IN ${TERMINAL}) <> (n.status IN ${TERMINAL})
    GROUP BY n.batch) d
  WHERE b.id = d.batch AND d.delta <> 0;`,
      `  FROM unnest(moved, deltas, ats) AS d(batch, delta, at)
  WHERE b.id = d.batch;`,
    ],
  ],
);
