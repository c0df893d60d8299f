import type { NodeInfo } from '../../contract/node.js';

/**
 * What only a store shared by several servers has: the servers themselves. A store of one
 * process has none (`JobStore.cluster` is null), and callers read that as "not shared".
 */
export interface ClusterFacet {
  /** The servers sharing this store, seen within the last three lease periods. */
  nodes(): Promise<NodeInfo[]>;
}
