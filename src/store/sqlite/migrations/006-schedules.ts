/**
 * Schedules (API.md "Schedules"), and the name of the schedule that made each job, by
 * which jobs are listed (`GET /v1/jobs?schedule=`).
 */
export default `
ALTER TABLE jobs ADD COLUMN schedule TEXT;
CREATE INDEX jobs_schedule_id ON jobs (schedule, id) WHERE schedule IS NOT NULL;
CREATE TABLE schedules (
  name TEXT PRIMARY KEY NOT NULL,
  cron TEXT NOT NULL,
  timezone TEXT NOT NULL,
  job TEXT NOT NULL,
  overlap TEXT NOT NULL,
  catch_up TEXT NOT NULL,
  paused INTEGER NOT NULL,
  next_run_at INTEGER,
  last_run_at INTEGER,
  last_job_id TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;
`;
