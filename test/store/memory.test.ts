import { createMemoryStore } from '../../src/store/memory.js';
import { runStoreConformance } from './conformance.js';

runStoreConformance('memory', async (options) => createMemoryStore(options));
