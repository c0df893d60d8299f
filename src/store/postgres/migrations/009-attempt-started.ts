/**
 * Whether the running attempt's handler started (`attempt_started`, written when the
 * dispatcher sees its thread start it), and the job's `started_at` from before the claim
 * (`prior_started_at`), so that a rescued attempt that never started gives its attempt back
 * and leaves the job as it was. Attempts running at the upgrade count as started, as they
 * always did. Adds columns only: no function is replaced.
 */
export default `
ALTER TABLE {{schema}}.jobs ADD COLUMN attempt_started boolean NOT NULL DEFAULT false;
ALTER TABLE {{schema}}.jobs ADD COLUMN prior_started_at bigint;
UPDATE {{schema}}.jobs SET attempt_started = true WHERE status = 'running';
`;
