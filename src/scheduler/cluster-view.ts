import { hostname } from 'node:os';
import type { Dispatcher } from './dispatch/dispatcher.js';
import type { JobStore } from '../store/store.js';
import type { NodeInfo } from '../contract/node.js';
import type { WorkerPool } from '../workers/pool.js';
import { KILN_VERSION } from '../version.js';
import { unavailable } from './errors.js';

export interface ClusterViewOptions {
  store: JobStore;
  pool: WorkerPool;
  dispatcher: Dispatcher;
  /** KILN_THREADS of this server. */
  threads: number;
  /** When this server started, by the store's clock. */
  startedAt: number;
}

/** The servers sharing the store as this one sees them; this one alone without a shared store. */
export class ClusterView {
  readonly #options: ClusterViewOptions;

  constructor(options: ClusterViewOptions) {
    this.#options = options;
  }

  /** Threads of every live server sharing the store, or of this one. */
  async threads(): Promise<{ size: number; busy: number }> {
    const { store, pool, dispatcher } = this.#options;
    const here = { size: pool.liveThreads, busy: dispatcher.busyThreads };
    if (store.cluster === null) return here;
    const nodes = await store.cluster.nodes().catch(unavailable);
    let size = here.size;
    let busy = here.busy;
    for (const node of nodes) {
      if (node.id === dispatcher.owner) continue;
      size += node.threads;
      busy += node.busy;
    }
    return { size, busy };
  }

  /** The servers sharing the store (GET /v1/nodes); this one alone without a shared store. */
  async nodes(): Promise<NodeInfo[]> {
    const { store, dispatcher } = this.#options;
    const self: NodeInfo = {
      id: dispatcher.owner,
      host: hostname(),
      pid: process.pid,
      version: KILN_VERSION,
      threads: this.#options.threads,
      busy: dispatcher.busyThreads,
      startedAt: this.#options.startedAt,
      lastSeenAt: store.now(),
    };
    if (store.cluster === null) return [self];
    const nodes = await store.cluster.nodes().catch(unavailable);
    return nodes.map((node) => (node.id === self.id ? { ...node, busy: self.busy } : node));
  }
}
