/**
 * Whether the running attempt's handler started (`attempt_started`, written when the
 * dispatcher sees its thread start it), and the job's `started_at` from before the claim
 * (`prior_started_at`), so that a rescued attempt that never started gives its attempt back
 * and leaves the job as it was. Attempts running when the file was last closed count as
 * started, as they always did.
 */
export default `
ALTER TABLE jobs ADD COLUMN attempt_started INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN prior_started_at INTEGER;
UPDATE jobs SET attempt_started = 1 WHERE status = 'running';
`;
