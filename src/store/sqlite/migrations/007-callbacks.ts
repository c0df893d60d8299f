/**
 * Callbacks (API.md "Callbacks"): the callback a job was given, and its deliveries.
 *
 * Triggers on `jobs` make a `pending` delivery in the same transaction as the write that
 * makes a job with a callback terminal, whatever that write is (a finish, a cancel, a
 * dependency that failed, an insert that fails at once), when the callback lists that
 * status among its events; another takes the deliveries and their attempts away with
 * the job's record. `seq` only grows (AUTOINCREMENT), so the store thread notices new
 * deliveries by its maximum. A delivery's id is a random UUID (version 4).
 */
const TERMINAL = `('completed', 'failed', 'cancelled')`;

const wanted = (row: 'NEW') =>
  `${row}.callback IS NOT NULL AND ${row}.status IN ${TERMINAL}
   AND (json_type(${row}.callback, '$.events') IS NULL
        OR EXISTS (SELECT 1 FROM json_each(${row}.callback, '$.events') WHERE value = ${row}.status))`;

const newDelivery = `
  INSERT INTO callback_deliveries (id, job_id, event, status, attempts, next_at, created_at)
  VALUES (
    lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-'
      || substr('89ab', 1 + (abs(random()) % 4), 1) || substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))),
    NEW.id, NEW.status, 'pending', 0, NEW.finished_at, NEW.finished_at);`;

export default `
ALTER TABLE jobs ADD COLUMN callback TEXT;
CREATE TABLE callback_deliveries (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  job_id TEXT NOT NULL,
  event TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  next_at INTEGER,
  body TEXT,
  lease_owner TEXT,
  lease_expires_at INTEGER,
  created_at INTEGER NOT NULL
);
CREATE INDEX callback_deliveries_due ON callback_deliveries (next_at) WHERE status = 'pending';
CREATE INDEX callback_deliveries_job ON callback_deliveries (job_id);
CREATE TABLE callback_attempts (
  delivery_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  status TEXT NOT NULL,
  http_status INTEGER,
  error TEXT,
  at INTEGER NOT NULL,
  PRIMARY KEY (delivery_id, attempt)
) WITHOUT ROWID;
CREATE TRIGGER jobs_callback_on_update AFTER UPDATE OF status ON jobs
WHEN OLD.status <> NEW.status AND ${wanted('NEW')}
BEGIN${newDelivery}
END;
CREATE TRIGGER jobs_callback_on_insert AFTER INSERT ON jobs
WHEN ${wanted('NEW')}
BEGIN${newDelivery}
END;
CREATE TRIGGER jobs_callback_on_delete AFTER DELETE ON jobs
WHEN OLD.callback IS NOT NULL
BEGIN
  DELETE FROM callback_attempts WHERE delivery_id IN (SELECT id FROM callback_deliveries WHERE job_id = OLD.id);
  DELETE FROM callback_deliveries WHERE job_id = OLD.id;
END;
`;
