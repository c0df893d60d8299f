import type { JobWire } from '../core/rows.js';
import type { StoreOptions } from '../store.js';
import type { PgConnection } from './connection.js';
import type { DueJobs } from './due.js';
import type { StoreNews } from './notify.js';
import type { SharedStatements } from './sql.js';

export interface PostgresStoreOptions extends StoreOptions {
  url: string;
  schema: string;
  /** Connections of the pool (the listener has one more of its own). */
  poolSize: number;
  /** Worker threads of this server (reported in GET /v1/nodes). */
  threads?: number;
  /** Job lease length (rows of servers without a node lease are listed for three). */
  leaseMs?: number;
  /** How long a beat of this server keeps it alive for the others (KILN_NODE_LEASE_MS). */
  nodeLeaseMs?: number;
  version?: string;
  /** How often an idle server claims anyway, in case a notification was lost. */
  pollMs?: number;
}

/** A job this process runs: what a finish or a progress event is built from. */
export interface Running {
  wire: JobWire;
  owner: string;
  previousStart: number | null;
}

/** What every facet of the PostgreSQL store takes. */
export interface StoreContext {
  readonly options: PostgresStoreOptions;
  readonly db: PgConnection;
  readonly news: StoreNews;
  readonly due: DueJobs;
  /** Statements that several facets run. */
  readonly shared: SharedStatements;
  /** The attempts this process runs, by job id. */
  readonly running: Map<string, Running>;
}
