/**
 * Each level of a type's line (its queued jobs at one priority), group by group, in line
 * order: how a claim passes over a group held back by its limits without reading its
 * backlog (held-groups.ts). The groups of a level are found by skipping from one to the
 * next, and each group's first jobs are the start of its range; the jobs without a group
 * are the range of NULL. Queued jobs only, as every claim index.
 */
export default `
CREATE INDEX jobs_type_group ON {{schema}}.jobs (type, priority, group_key, round, ready_at, ready_seq)
  WHERE status = 'queued';
`;
