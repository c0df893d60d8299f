/**
 * Node leases: each server's row says how long its last beat keeps it alive (`lease_ms`,
 * KILN_NODE_LEASE_MS). A server not heard of for that long is dead: the rescuer of any
 * server cuts the job leases it held, so its running attempts are taken over within a
 * node lease instead of a job lease, while the job leases themselves are renewed as
 * rarely as before. Rows of servers written before this step have no node lease and are
 * judged by their job leases alone.
 */
export default `
ALTER TABLE {{schema}}.nodes ADD COLUMN lease_ms bigint;
`;
