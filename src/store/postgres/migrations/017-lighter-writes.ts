/**
 * Fewer writes per job (bench/README.md, "What a job costs the database").
 *
 * - `jobs` pages are filled to half by inserts (`fillfactor`): a claim, a start, a beat or a
 *   finish then writes the row's new version on its own page where it can. A version that
 *   must move to another page costs a lock record in the WAL besides the update (the old
 *   version is marked while the new page is found), and an update that stays on its page
 *   and changes no indexed column is a HOT update, which writes no index entry at all.
 *   Pages filled before this step keep their fill; new ones get it.
 * - `jobs_lease` goes: a running job's lease (`lease_expires_at`) is in no index any more,
 *   so a heartbeat that renews it is a HOT update, and a claim writes one index entry fewer.
 *   The running jobs are as many as the cluster's threads; the rescue finds the expired
 *   ones among them through `jobs_running_type`, which lists them all.
 */
export default `
ALTER TABLE {{schema}}.jobs SET (fillfactor = 50);
DROP INDEX {{schema}}.jobs_lease;
`;
