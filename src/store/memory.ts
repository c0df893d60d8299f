import { SqliteStore } from './sqlite.js';
import type { StoreOptions } from './store.js';

/**
 * The `memory` store (KILN_STORE=memory): the SQLite store on a private in-memory
 * database. One implementation of the state machine serves both, so `memory` behaves
 * exactly like `sqlite` except that nothing is written to disk and everything is gone
 * when the process exits. For tests and throwaway runs.
 */
export function createMemoryStore(options: StoreOptions): SqliteStore {
  return SqliteStore.open(':memory:', { ...options, synchronous: 'normal' });
}
