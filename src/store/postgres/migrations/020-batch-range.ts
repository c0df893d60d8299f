/**
 * A batch's jobs found by their ids, not by an index of their own. `jobs_batch`
 * (batch, status) took an entry at every write of a batch job that is not a HOT update:
 * its insert, its claim and its finish, three of the twelve index entries a job submitted
 * by `POST /v1/jobs/batch` wrote, about 270 of its 1,900 bytes of WAL (bench/README.md,
 * "A batch's jobs by their ids"). A batch's jobs are made by one insert statement and
 * their ids are UUIDv7s, made in time order, so they lie in one range of the primary key
 * with few other jobs between them: those submitted at the same moment. The batch's row
 * keeps the range (`first_job_id`, `last_job_id`: its jobs' lowest and highest ids), and
 * its counts and the list of its jobs walk the primary key over that range. Lists by
 * group and by type walk the primary key the same way (migration 004).
 *
 * An existing database's batches get their range from their jobs here. A batch row
 * written without one (by a server of the version before, while both run) is read over
 * every id: correct, and as slow as a scan of the table.
 */
export default `
ALTER TABLE {{schema}}.batches ADD COLUMN first_job_id uuid, ADD COLUMN last_job_id uuid;
UPDATE {{schema}}.batches b SET first_job_id = r.first_id, last_job_id = r.last_id
FROM (SELECT batch, (array_agg(id ORDER BY id))[1] AS first_id, (array_agg(id ORDER BY id DESC))[1] AS last_id
      FROM {{schema}}.jobs WHERE batch IS NOT NULL GROUP BY batch) r
WHERE b.id = r.batch;
DROP INDEX {{schema}}.jobs_batch;
`;
