import type { FaultLogger } from '../fault-log.js';
import { StoreError } from './errors.js';
import { PostgresStore } from './postgres/store.js';
import { SqliteStore } from './sqlite/store.js';
import type { JobStore } from './store.js';

export interface OpenStoreOptions {
  /** Pending jobs admitted at most (KILN_MAX_QUEUED). */
  capacity: number;
  /** PRAGMA synchronous of the sqlite store (KILN_SQLITE_SYNC); ignored by the others. */
  sqliteSync: 'full' | 'normal';
  /** Page cache of the sqlite store's connection, MiB (KILN_SQLITE_CACHE_MB); ignored by the others. */
  sqliteCacheMb?: number;
  /** The PostgreSQL store's pool size and schema (KILN_PG_POOL_SIZE, KILN_PG_SCHEMA). */
  pgPoolSize?: number;
  pgSchema?: string;
  /** This server's worker threads and lease length, reported to the other servers. */
  threads?: number;
  leaseMs?: number;
  /** KILN_NODE_LEASE_MS: how long this server's beat keeps it alive for the others. */
  nodeLeaseMs?: number;
  version?: string;
  /** KILN_PRIORITY_AGING_MS (0 or absent: off). */
  priorityAgingMs?: number;
  /** Where the sqlite store logs a store thread that died and its restarts. */
  log?: FaultLogger;
}

/**
 * Opens the store a KILN_STORE value names: `sqlite:<path>` (also `sqlite://<path>`),
 * `memory` (the SQLite store on a private in-memory database: the same implementation,
 * nothing written to disk, gone when the process exits), or `postgres://…` (many servers on one database).
 */
export async function openStore(url: string, options: OpenStoreOptions): Promise<JobStore> {
  const aging = options.priorityAgingMs ? { priorityAgingMs: options.priorityAgingMs } : {};
  const log = options.log === undefined ? {} : { log: options.log };
  if (url === 'memory')
    return SqliteStore.open(':memory:', { capacity: options.capacity, synchronous: 'normal', ...aging, ...log });
  if (url.startsWith('sqlite:')) {
    let path = url.slice('sqlite:'.length);
    if (path.startsWith('//')) path = path.slice(2);
    if (path.length === 0) {
      throw new StoreError('invalid_store_url', 'KILN_STORE sqlite: needs a file path, e.g. sqlite:./data/kiln.db');
    }
    const cache = options.sqliteCacheMb === undefined ? {} : { cacheMb: options.sqliteCacheMb };
    return SqliteStore.open(path, {
      capacity: options.capacity,
      synchronous: options.sqliteSync,
      ...cache,
      ...aging,
      ...log,
    });
  }
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    return PostgresStore.open({
      url,
      capacity: options.capacity,
      schema: options.pgSchema ?? 'kiln',
      poolSize: options.pgPoolSize ?? 10,
      ...(options.threads === undefined ? {} : { threads: options.threads }),
      ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
      ...(options.nodeLeaseMs === undefined ? {} : { nodeLeaseMs: options.nodeLeaseMs }),
      ...(options.version === undefined ? {} : { version: options.version }),
      ...aging,
    });
  }
  throw new StoreError(
    'invalid_store_url',
    `KILN_STORE must be memory, sqlite:<path> or postgres://…, got "${url.length > 80 ? `${url.slice(0, 80)}…` : url}"`,
  );
}
