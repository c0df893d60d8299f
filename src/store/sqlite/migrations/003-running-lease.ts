/** The rescuer's query: running jobs by lease expiry. */
export default `CREATE INDEX jobs_running_lease ON jobs (lease_expires_at) WHERE status = 'running';`;
