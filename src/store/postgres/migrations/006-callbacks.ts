/**
 * Callbacks (API.md "Callbacks"): the callback a job was given, and its deliveries.
 *
 * Row triggers on `jobs` make a `pending` delivery in the same transaction as the write
 * that makes a job with a callback terminal, whatever that write is (the finish
 * function, a cancel, fail_dependents, an insert that fails at once), when the callback
 * lists that status among its events, and announce it on the schema's channel at commit
 * (`{"n":"db","k":1}`), so idle delivery services wake on every server. Their WHEN clause
 * keeps jobs without a callback from paying more than a null test. Another trigger takes
 * the deliveries (and, by cascade, their attempts) away with the job's record.
 */
const wanted = `NEW.callback IS NOT NULL AND NEW.status IN ('completed', 'failed', 'cancelled')
  AND (NEW.callback::jsonb -> 'events' IS NULL OR NEW.callback::jsonb -> 'events' ? NEW.status)`;

export default `
ALTER TABLE {{schema}}.jobs ADD COLUMN callback text;

CREATE TABLE {{schema}}.callback_deliveries (
  id uuid PRIMARY KEY,
  job_id uuid NOT NULL,
  event text NOT NULL CHECK (event IN ('completed', 'failed', 'cancelled')),
  status text NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
  attempts int NOT NULL,
  next_at bigint,
  body text,
  lease_owner text,
  lease_expires_at bigint,
  created_at bigint NOT NULL,
  seq bigserial NOT NULL
);
CREATE INDEX callback_deliveries_due ON {{schema}}.callback_deliveries (next_at) WHERE status = 'pending';
CREATE INDEX callback_deliveries_job ON {{schema}}.callback_deliveries (job_id);

CREATE TABLE {{schema}}.callback_attempts (
  delivery_id uuid NOT NULL REFERENCES {{schema}}.callback_deliveries (id) ON DELETE CASCADE,
  attempt int NOT NULL,
  status text NOT NULL,
  http_status int,
  error text,
  at bigint NOT NULL,
  PRIMARY KEY (delivery_id, attempt)
);

CREATE FUNCTION {{schema}}.callback_delivery() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {{schema}}.callback_deliveries (id, job_id, event, status, attempts, next_at, created_at)
  VALUES (gen_random_uuid(), NEW.id, NEW.status, 'pending', 0,
          coalesce(NEW.finished_at, {{schema}}.now_ms()), coalesce(NEW.finished_at, {{schema}}.now_ms()));
  -- One notification per transaction: PostgreSQL folds identical ones.
  PERFORM pg_notify(TG_TABLE_SCHEMA || '_events', '{"n":"db","k":1}');
  RETURN NULL;
END $$;

CREATE TRIGGER jobs_callback_on_update AFTER UPDATE OF status ON {{schema}}.jobs FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status AND ${wanted})
  EXECUTE FUNCTION {{schema}}.callback_delivery();
CREATE TRIGGER jobs_callback_on_insert AFTER INSERT ON {{schema}}.jobs FOR EACH ROW
  WHEN (${wanted})
  EXECUTE FUNCTION {{schema}}.callback_delivery();

CREATE FUNCTION {{schema}}.callback_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM {{schema}}.callback_deliveries WHERE job_id = OLD.id;
  RETURN NULL;
END $$;
CREATE TRIGGER jobs_callback_on_delete AFTER DELETE ON {{schema}}.jobs FOR EACH ROW
  WHEN (OLD.callback IS NOT NULL)
  EXECUTE FUNCTION {{schema}}.callback_forget();
`;
