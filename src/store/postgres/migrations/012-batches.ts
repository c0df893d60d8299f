/**
 * Batches (API.md "Batches"): one row per `POST /v1/jobs/batch`, and each job's `batch`.
 *
 * `remaining` counts the batch's jobs that are not terminal. A statement trigger on
 * `jobs` keeps it in the same transaction as the write that moves batch jobs into or out
 * of a terminal status, whatever that write is (the finish function, a cancel,
 * fail_dependents, a retry), and sets `finished_at` when it reaches zero. It runs once a
 * statement, after every job the statement wrote is locked, and locks the batches' rows
 * in id order: two finishes whose jobs belong to the same two batches in interleaved id
 * order (a batch's jobs need not have consecutive ids when several servers submit at
 * once) would otherwise lock those rows in opposite orders and deadlock. A statement
 * that writes no batch job pays one scan of its new rows. Counts by status are read
 * from the jobs by the `jobs_batch` index. `callback` is the batch's own callback as JSON
 * text, or null.
 *
 * A batch with a callback gets one `pending` delivery (`job_id` the batch's id, event
 * `batch.finished`) in the same transaction as the write that ends its last job, or as
 * its insert when none of its jobs is left to run, announced like a job's; a batch opened
 * again by a retry and finished again gets no second one. The row lock of the batch
 * orders the servers finishing its jobs, so exactly one sees `remaining` reach zero.
 * Adds columns, a table, triggers and a wider check of deliveries' events: no function
 * is replaced.
 */
const TERMINAL = `('completed', 'failed', 'cancelled')`;

export default `
ALTER TABLE {{schema}}.jobs ADD COLUMN batch uuid;
CREATE INDEX jobs_batch ON {{schema}}.jobs (batch, status) WHERE batch IS NOT NULL;
CREATE TABLE {{schema}}.batches (
  id uuid PRIMARY KEY,
  total int NOT NULL,
  remaining int NOT NULL,
  created_at bigint NOT NULL,
  finished_at bigint,
  callback text
);

CREATE FUNCTION {{schema}}.batch_jobs_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  moved uuid[];
BEGIN
  IF NOT EXISTS (SELECT 1 FROM new_rows WHERE batch IS NOT NULL) THEN RETURN NULL; END IF;
  SELECT array_agg(DISTINCT n.batch ORDER BY n.batch) INTO moved
  FROM new_rows n JOIN old_rows o ON o.id = n.id
  WHERE n.batch IS NOT NULL AND (o.status IN ${TERMINAL}) <> (n.status IN ${TERMINAL});
  IF moved IS NULL THEN RETURN NULL; END IF;
  -- The batches' rows in id order, after every job of the statement is locked and written.
  PERFORM 1 FROM {{schema}}.batches WHERE id = ANY (moved) ORDER BY id FOR UPDATE;
  UPDATE {{schema}}.batches b SET remaining = b.remaining + d.delta,
    finished_at = CASE WHEN b.remaining + d.delta <> 0 THEN NULL
                       WHEN b.remaining = 0 THEN b.finished_at
                       ELSE coalesce(d.at, {{schema}}.now_ms()) END
  FROM (
    SELECT n.batch, sum(CASE WHEN n.status IN ${TERMINAL} THEN -1 ELSE 1 END) AS delta, max(n.finished_at) AS at
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.batch IS NOT NULL AND (o.status IN ${TERMINAL}) <> (n.status IN ${TERMINAL})
    GROUP BY n.batch) d
  WHERE b.id = d.batch AND d.delta <> 0;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_batch_on_update AFTER UPDATE ON {{schema}}.jobs
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
  EXECUTE FUNCTION {{schema}}.batch_jobs_moved();

ALTER TABLE {{schema}}.callback_deliveries DROP CONSTRAINT callback_deliveries_event_check;
ALTER TABLE {{schema}}.callback_deliveries ADD CONSTRAINT callback_deliveries_event_check
  CHECK (event IN ('completed', 'failed', 'cancelled', 'batch.finished'));

CREATE FUNCTION {{schema}}.batch_callback_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.callback_deliveries (id, job_id, event, status, attempts, next_at, created_at)
  SELECT gen_random_uuid(), NEW.id, 'batch.finished', 'pending', 0,
         coalesce(NEW.finished_at, {{schema}}.now_ms()), coalesce(NEW.finished_at, {{schema}}.now_ms())
  WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.callback_deliveries WHERE job_id = NEW.id);
  PERFORM pg_notify(TG_TABLE_SCHEMA || '_events', '{"n":"db","k":1}');
  RETURN NULL;
END $$;

CREATE TRIGGER batches_finished AFTER UPDATE OF remaining ON {{schema}}.batches FOR EACH ROW
  WHEN (NEW.remaining = 0 AND OLD.remaining <> 0 AND NEW.callback IS NOT NULL)
  EXECUTE FUNCTION {{schema}}.batch_callback_delivery();
CREATE TRIGGER batches_finished_at_once AFTER INSERT ON {{schema}}.batches FOR EACH ROW
  WHEN (NEW.remaining = 0 AND NEW.callback IS NOT NULL)
  EXECUTE FUNCTION {{schema}}.batch_callback_delivery();
`;
