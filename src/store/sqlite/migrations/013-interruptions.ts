/**
 * How many times a rescue took an attempt of the job from a server that died or stalled
 * (`interruptions`, counted or given back), and the servers those attempts ran on
 * (`interrupted_by`, a JSON array of lease owners), so that a job which keeps taking its
 * server down is stopped after KILN_MAX_INTERRUPTIONS. Adds columns only.
 */
export default `
ALTER TABLE jobs ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN interrupted_by TEXT;
`;
