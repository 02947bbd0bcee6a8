/**
 * The node maps that hold one pod's state keyed by its host device's ifindex: the one
 * list that DEL and GC go through to forget a pod, and that GC lists to find the state of
 * devices that are gone. A new per-pod map is its C definition, its ABI name (abi.ts) and
 * one entry here; whatever sets it at ADD is the feature's own.
 *
 * The socket bypass's per-pod records (nkc_sock_pods, nkc_sock_stats) are not here: they
 * exist only where the bypass runs, and must go in an order of their own (the record
 * before the sockets, datapath/fastpath.ts forgetSockets).
 */
import { ifindexKey, MAP_NAMES } from "./abi";
import type { BpfMap } from "./maps";
import { POLICY_MAP_NAMES } from "./policy-abi";

export const POD_MAP_NAMES = [
  MAP_NAMES.counters, // packets by path
  MAP_NAMES.drops, // refusals by reason
  MAP_NAMES.flowOwner, // which slot of the flow-table pool is the pod's (its table is then free)
  MAP_NAMES.flowStats, // what its flow table remembered and forgot
  MAP_NAMES.bandwidth, // its rate limits
  POLICY_MAP_NAMES.endpoints, // the pod key its NetworkPolicy is found by
  POLICY_MAP_NAMES.ctOwner, // which slot of the policy's flow-table pool is the pod's
  POLICY_MAP_NAMES.stats, // the flows its policy allowed and denied
] as const;

/** The ifindexes that hold state in any of `maps` (keys are u32 ifindexes). */
export function podStateHolders(maps: readonly BpfMap[]): number[] {
  const holders = new Set<number>();
  for (const map of maps) for (const key of map.keys()) holders.add(key.readUInt32LE(0));
  return [...holders];
}

/** Removes the state of the pod behind `hostIfindex` from every one of `maps`. */
export function forgetPodState(maps: readonly BpfMap[], hostIfindex: number): void {
  const key = ifindexKey(hostIfindex);
  for (const map of maps) map.delete(key);
}
