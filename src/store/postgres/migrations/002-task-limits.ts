/**
 * Task limits across the cluster: a claim that must pass over a limited type's backlog
 * reads the queue type by type (`jobs_claim_type`), counts the type's running attempts
 * (`jobs_running_type`), and keeps the start of each attempt of a rate-limited type in
 * `rate_starts` while it is inside the type's window.
 */
export default `
CREATE INDEX jobs_claim_type ON {{schema}}.jobs (type, priority DESC, ready_at, ready_seq) WHERE status = 'queued';
CREATE INDEX jobs_running_type ON {{schema}}.jobs (type) WHERE status = 'running';
CREATE TABLE {{schema}}.rate_starts (type text NOT NULL, at bigint NOT NULL);
CREATE INDEX rate_starts_type_at ON {{schema}}.rate_starts (type, at);
`;
