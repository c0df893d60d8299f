/** A server of a shared store (GET /v1/nodes). */
export interface NodeInfo {
  id: string;
  host: string;
  pid: number;
  version: string;
  threads: number;
  busy: number;
  startedAt: number;
  lastSeenAt: number;
}
