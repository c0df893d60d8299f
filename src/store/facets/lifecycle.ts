/** The store's clock, whether it can write now, and its end. */
export interface StoreLifecycle {
  /** The store's clock, ms since the epoch. */
  now(): number;

  /** Whether writes can be stored now (false while the store thread or database is down). */
  readonly available: boolean;

  /**
   * A shared store: whether it is unavailable because the database itself is down (it
   * refuses connections, or is starting up or shutting down), so that no server can reach
   * it and none can take over this one's attempts meanwhile. Absent: a store of one process.
   */
  readonly databaseDown?: boolean;

  close(): Promise<void>;
}
