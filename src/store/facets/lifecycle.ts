/** The store's clock, whether it can write now, and its end. */
export interface StoreLifecycle {
  /** The store's clock, ms since the epoch. */
  now(): number;

  /** Whether writes can be stored now (false while the store thread or database is down). */
  readonly available: boolean;

  close(): Promise<void>;
}
