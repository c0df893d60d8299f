/**
 * Dedupe: the key of a job's work. At most one unfinished job holds a key (a unique
 * index on unfinished jobs only, which concurrent inserts on any server respect);
 * completed jobs are found by key and finish time for result reuse.
 */
export default `
ALTER TABLE {{schema}}.jobs ADD COLUMN dedupe_key text;
CREATE UNIQUE INDEX jobs_dedupe_live ON {{schema}}.jobs (dedupe_key)
  WHERE dedupe_key IS NOT NULL AND status NOT IN ('completed', 'failed', 'cancelled');
CREATE INDEX jobs_dedupe_done ON {{schema}}.jobs (dedupe_key, finished_at)
  WHERE dedupe_key IS NOT NULL AND status = 'completed';
`;
