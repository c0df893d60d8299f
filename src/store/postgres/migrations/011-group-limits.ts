/**
 * Group limits across the cluster: `rate_starts` keeps the starts of rate-limited groups
 * beside those of rate-limited types, told apart by `kind` ('type' or 'group'; `type`
 * holds the type or the group). Running attempts of a group are counted from the running
 * jobs (`jobs_running_type` lists them all; they are as many as the cluster's threads).
 */
export default `
ALTER TABLE {{schema}}.rate_starts ADD COLUMN kind text NOT NULL DEFAULT 'type';
DROP INDEX {{schema}}.rate_starts_type_at;
CREATE INDEX rate_starts_kind_type_at ON {{schema}}.rate_starts (kind, type, at);
`;
