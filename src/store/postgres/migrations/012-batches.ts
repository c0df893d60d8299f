/**
 * Batches (API.md "Batches"): one row per `POST /v1/jobs/batch`, and each job's `batch`.
 *
 * `remaining` counts the batch's jobs that are not terminal. A row trigger on `jobs`
 * keeps it in the same transaction as the write that moves a batch job into or out of a
 * terminal status, whatever that write is (the finish function, a cancel,
 * fail_dependents, a retry), and sets `finished_at` when it reaches zero; its WHEN clause
 * keeps jobs without a batch from paying more than a null test. Counts by status are read
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

CREATE FUNCTION {{schema}}.batch_job_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status IN ${TERMINAL} THEN
    UPDATE {{schema}}.batches SET remaining = remaining - 1,
      finished_at = CASE WHEN remaining = 1 THEN coalesce(NEW.finished_at, {{schema}}.now_ms()) ELSE finished_at END
    WHERE id = NEW.batch;
  ELSE
    UPDATE {{schema}}.batches SET remaining = remaining + 1, finished_at = NULL WHERE id = NEW.batch;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_batch_on_update AFTER UPDATE OF status ON {{schema}}.jobs FOR EACH ROW
  WHEN (NEW.batch IS NOT NULL AND (OLD.status IN ${TERMINAL}) <> (NEW.status IN ${TERMINAL}))
  EXECUTE FUNCTION {{schema}}.batch_job_moved();

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
