import { functionOf, rewritten } from './step-text.js';
import finishedJobs from './021-finished-jobs.js';

/**
 * A partition of `jobs_done` is attached with its parent locked first, so no statement
 * keeps a plan that cannot see it.
 *
 * `ALTER TABLE … ATTACH PARTITION` takes only a SHARE UPDATE EXCLUSIVE lock on the parent:
 * statements that read the parent go on meanwhile. One planned in that moment reads the
 * parent's partitions as they were, then waits for its lock on the default partition
 * (which the ATTACH holds), and takes in the ATTACH's invalidation while it still plans:
 * its plan is kept as current, without the new partition, and PostgreSQL runs it as if
 * that partition were pruned away. A statement prepared on a connection of its own (the
 * reads by id, PgConnection.readByIds) then missed every job finished into the new
 * partition, on every read, until something else changed the table. Locked first in
 * ACCESS EXCLUSIVE mode, the parent makes a statement that plans against it wait before
 * it reads the partitions, and read them once they are attached.
 *
 * The lock is taken only when a partition is to be made (at a server's start, and once a
 * partition's span), and waited for at most the function's lock_timeout of 200 ms: a lock
 * not granted in time leaves the partitions for the next round, as before. Once granted it
 * is held until the partitions are attached, and each ATTACH reads the whole default
 * partition (no row of it may belong to the new span): reads and finishes of that status
 * wait for it. The default partition is small unless the database was upgraded from a
 * version before step 21, whose finished jobs it holds until their retention deletes
 * them (300,000 of them held a finish 0.3 s).
 *
 * Replaces prepare_done_partitions with the same signature.
 */
export default rewritten(
  '023',
  functionOf(
    '023',
    finishedJobs,
    'CREATE FUNCTION {{schema}}.prepare_done_partitions(p_parent text, p_width_h int, p_ahead_h int)',
    'END $$;\n',
  ),
  [
    ['CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION'],
    [
      '  WHILE next_h <= now_h + p_ahead_h LOOP\n',
      `  IF next_h > now_h + p_ahead_h THEN RETURN 0; END IF;
  BEGIN
    EXECUTE format('LOCK TABLE ONLY {{schema}}.%I IN ACCESS EXCLUSIVE MODE', p_parent);
  EXCEPTION WHEN lock_not_available THEN
    RETURN 0;
  END;
  WHILE next_h <= now_h + p_ahead_h LOOP
`,
    ],
  ],
);
