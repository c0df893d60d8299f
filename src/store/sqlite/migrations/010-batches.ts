/**
 * Batches (API.md "Batches"): one row per `POST /v1/jobs/batch`, and each job's `batch`.
 *
 * `remaining` counts the batch's jobs that are not terminal. Triggers on `jobs` keep it in
 * the same transaction as the write that moves a batch job into or out of a terminal
 * status, whatever that write is (a finish, a cancel, a dependency that failed, a retry),
 * and set `finished_at` when it reaches zero; their WHEN clause keeps jobs without a
 * batch from paying more than a null test. Counts by status are read from the jobs by
 * the `jobs_batch` index. `callback` is the batch's own callback as JSON text, or null.
 *
 * A batch with a callback gets one `pending` delivery (`job_id` the batch's id, event
 * `batch.finished`) in the same transaction as the write that ends its last job, or as
 * its insert when none of its jobs is left to run; a batch opened again by a retry and
 * finished again gets no second one.
 */
const TERMINAL = `('completed', 'failed', 'cancelled')`;

const newDelivery = `
  INSERT INTO callback_deliveries (id, job_id, event, status, attempts, next_at, created_at)
  VALUES (
    lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-'
      || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))),
    NEW.id, 'batch.finished', 'pending', 0, NEW.finished_at, NEW.finished_at);`;

export default `
ALTER TABLE jobs ADD COLUMN batch TEXT;
CREATE INDEX jobs_batch ON jobs (batch) WHERE batch IS NOT NULL;
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
CREATE TRIGGER batches_finished AFTER UPDATE OF remaining ON batches
WHEN NEW.remaining = 0 AND OLD.remaining <> 0 AND NEW.callback IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM callback_deliveries WHERE job_id = NEW.id)
BEGIN${newDelivery}
END;
CREATE TRIGGER batches_finished_at_once AFTER INSERT ON batches
WHEN NEW.remaining = 0 AND NEW.callback IS NOT NULL
BEGIN${newDelivery}
END;
`;
