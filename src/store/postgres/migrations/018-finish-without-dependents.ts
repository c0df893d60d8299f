import { functionOf, rewritten } from './step-text.js';
import interruptions from './016-interruptions.js';

/**
 * The finish function calls `release_dependents` and `fail_dependents` only when a job it
 * finished has dependents. Both are planned again on every call (a set-returning SQL
 * function is, and the PL/pgSQL one plans its loop's statements once per session but is
 * entered each time), which cost a finish of noop jobs about 1 ms, 13 µs a job, to find
 * nothing; the finish's own check of `job_deps` is a cached plan and one index probe a job.
 *
 * Replaces the finish function with the same signature and result.
 */
const finish = rewritten('018', functionOf('018', interruptions, 'CREATE OR REPLACE FUNCTION {{schema}}.finish('), [
  [
    `IF cardinality(completed_ids) > 0 THEN`,
    `IF cardinality(completed_ids) > 0
     AND EXISTS (SELECT 1 FROM {{schema}}.job_deps d WHERE d.parent = ANY(completed_ids)) THEN`,
  ],
  [
    `IF cardinality(failed_ids) > 0 THEN`,
    `IF cardinality(failed_ids) > 0
     AND EXISTS (SELECT 1 FROM {{schema}}.job_deps d WHERE d.parent = ANY(failed_ids)) THEN`,
  ],
]);

export default finish;
