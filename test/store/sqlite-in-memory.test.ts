import { SqliteStore } from '../../src/store/sqlite/store.js';
import { runStoreConformance } from './conformance/index.js';

// KILN_STORE=memory: the same SQLite store, on a private in-memory database.
runStoreConformance('sqlite store (in-memory database)', (options) => SqliteStore.open(':memory:', options));
