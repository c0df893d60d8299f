/**
 * Schedules (API.md "Schedules"), and the name of the schedule that made each job, by
 * which jobs are listed (`GET /v1/jobs?schedule=`). A tick is fired by one server: the
 * one whose compare-and-set of `next_run_at` (under the row's lock) succeeds.
 */
export default `
ALTER TABLE {{schema}}.jobs ADD COLUMN schedule text;
CREATE INDEX jobs_schedule ON {{schema}}.jobs (schedule, id) WHERE schedule IS NOT NULL;
CREATE TABLE {{schema}}.schedules (
  name text PRIMARY KEY,
  cron text NOT NULL,
  timezone text NOT NULL,
  job text NOT NULL,
  overlap text NOT NULL CHECK (overlap IN ('allow', 'skip')),
  catch_up text NOT NULL CHECK (catch_up IN ('none', 'last')),
  paused boolean NOT NULL,
  next_run_at bigint,
  last_run_at bigint,
  last_job_id text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL
);
`;
