/**
 * Groups: who a job is for. The claim order across groups (round-robin within a
 * priority) lives in the ready index in memory; the file keeps the group, and an index
 * serves lists filtered by group, newest first.
 */
export default `
ALTER TABLE jobs ADD COLUMN group_key TEXT;
CREATE INDEX jobs_group_id ON jobs (group_key, id) WHERE group_key IS NOT NULL;
`;
