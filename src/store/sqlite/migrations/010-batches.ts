/**
 * Batches (API.md "Batches"): one row per `POST /v1/jobs/batch`, and each job's `batch`.
 *
 * `remaining` counts the batch's jobs that are not terminal. Triggers on `jobs` keep it in
 * the same transaction as the write that moves a batch job into or out of a terminal
 * status, whatever that write is (a finish, a cancel, a dependency that failed, a retry),
 * and set `finished_at` when it reaches zero; their WHEN clause keeps jobs without a
 * batch from paying more than a null test. Counts by status are read from the jobs by
 * the `jobs_batch` index. `callback` is the batch's own callback as JSON text, or null.
 */
const TERMINAL = `('completed', 'failed', 'cancelled')`;

export default `
ALTER TABLE jobs ADD COLUMN batch TEXT;
CREATE INDEX jobs_batch ON jobs (batch, status) WHERE batch IS NOT NULL;
CREATE TABLE batches (
  id TEXT PRIMARY KEY,
  total INTEGER NOT NULL,
  remaining INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  finished_at INTEGER,
  callback TEXT
) WITHOUT ROWID;
CREATE TRIGGER jobs_batch_ended AFTER UPDATE OF status ON jobs
WHEN NEW.batch IS NOT NULL AND OLD.status NOT IN ${TERMINAL} AND NEW.status IN ${TERMINAL}
BEGIN
  UPDATE batches SET remaining = remaining - 1,
    finished_at = CASE WHEN remaining = 1 THEN NEW.finished_at ELSE finished_at END
  WHERE id = NEW.batch;
END;
CREATE TRIGGER jobs_batch_reopened AFTER UPDATE OF status ON jobs
WHEN NEW.batch IS NOT NULL AND OLD.status IN ${TERMINAL} AND NEW.status NOT IN ${TERMINAL}
BEGIN
  UPDATE batches SET remaining = remaining + 1, finished_at = NULL WHERE id = NEW.batch;
END;
`;
