/**
 * Dedupe: the key of a job's work. At most one unfinished job holds a key (a unique
 * index on unfinished jobs only); completed jobs are found by key and finish time for
 * result reuse.
 */
export default `
ALTER TABLE jobs ADD COLUMN dedupe_key TEXT;
CREATE UNIQUE INDEX jobs_dedupe_live ON jobs (dedupe_key)
  WHERE dedupe_key IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled');
CREATE INDEX jobs_dedupe_done ON jobs (dedupe_key, finished_at) WHERE dedupe_key IS NOT NULL AND status = 'completed';
`;
