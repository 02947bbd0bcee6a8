/**
 * Read-only queries of a node's eBPF state, for CHECK, GC's listing, `status`,
 * `endpoints` and the agent's metrics: no lock taken, nothing changed. The changes
 * themselves, all under the node lock, are node-datapath.ts's and fastpath.ts's.
 */
import * as fs from "node:fs";
import {
  type Counters,
  DIRECT_TABLE_SIZE,
  type Drops,
  ENDPOINT_PINS,
  EndpointMap,
  endpointPin,
  endpointsRoot,
  type FlowStats,
  flowTableSize,
  INGRESS_LIMIT_PIN,
  type NodeMaps,
  nodeMapsPinned,
  openNodeMaps,
  POLICY_PIN,
  type PodLimits,
  type PodSpec,
  type PodStateMaps,
  podLimits,
  podStateHolders,
  podStateMismatches,
  readCounters,
  readDrops,
  readFlowStats,
  withPodStateMaps,
} from "../bpf/index";
import type { DeviceKind } from "./types";

/** Runs `fn` with the pinned maps, or returns undefined when the node has none yet. */
function withNodeMaps<T>(root: string, fn: (maps: NodeMaps) => T): T | undefined {
  if (!nodeMapsPinned(root)) return undefined;
  const maps = openNodeMaps(root);
  try {
    return fn(maps);
  } finally {
    maps.close();
  }
}

/** Runs `fn` with every map that can hold a pod's state (bpf/pod-state.ts), or returns
 * undefined when the node has no maps yet. */
export function withPodState<T>(root: string, fn: (maps: PodStateMaps) => T): T | undefined {
  return withNodeMaps(root, (node) => withPodStateMaps(root, node, fn));
}

/** Which endpoint pins exist (for CHECK and GC): the pod's program, its ingress limit. */
export function endpointState(
  root: string,
  hostDevice: string,
): { pinned: boolean; ingressLimit: boolean; policy: boolean } {
  return {
    pinned: ENDPOINT_PINS.every((p) => fs.existsSync(endpointPin(root, hostDevice, p))),
    ingressLimit: fs.existsSync(endpointPin(root, hostDevice, INGRESS_LIMIT_PIN)),
    policy: fs.existsSync(endpointPin(root, hostDevice, POLICY_PIN)),
  };
}

/** What differs between the pod's state in the maps and `pod` (CHECK); nothing without maps. */
export function podStateMismatchesOf(root: string, pod: PodSpec): string[] {
  return withPodState(root, (maps) => podStateMismatches(maps, pod)) ?? [];
}

/** Each ifindex holding state of a pod, with the maps that hold it (status). */
export function podStateHoldersOf(root: string): Map<number, string[]> {
  return withPodState(root, podStateHolders) ?? new Map();
}

/** The pod's rate limits as the programs see them; undefined: none (or no map yet). */
export function limitsOf(root: string, hostIfindex: number): PodLimits | undefined {
  return withNodeMaps(root, (maps) => podLimits(maps.bandwidth, hostIfindex));
}

export function endpointMapEntries(root: string): Map<string, { hostIfindex: number; datapath: DeviceKind }> {
  return withNodeMaps(root, (maps) => new EndpointMap(maps.endpoints).list()) ?? new Map();
}

export function pinnedEndpointDevices(root: string): string[] {
  const dir = endpointsRoot(root);
  return fs.existsSync(dir) ? fs.readdirSync(dir) : [];
}

export function countersOf(root: string, hostIfindex: number): Counters | undefined {
  return withNodeMaps(root, (maps) => readCounters(maps.counters, hostIfindex));
}

/** Why the programs refused packets of this device (a pod's, or the uplink's own). */
export function dropsOf(root: string, ifindex: number): Drops | undefined {
  return withNodeMaps(root, (maps) => readDrops(maps.drops, ifindex));
}

/** An endpoint's direct-flow table: how full it is and what went in and out. */
export interface FlowTableUsage extends FlowStats {
  entries: number;
  capacity: number;
  /** Taken out by the LRU to make room: remembered, minus forgotten, minus still held. */
  evicted: bigint;
}

export function flowTableOf(root: string, hostIfindex: number): FlowTableUsage | undefined {
  return withNodeMaps(root, (maps) => {
    const entries = flowTableSize(maps.flows, hostIfindex);
    if (entries === undefined) return undefined;
    const stats = readFlowStats(maps.flowStats, hostIfindex);
    const evicted = stats.remembered - stats.forgotten - BigInt(entries);
    return { ...stats, entries, capacity: DIRECT_TABLE_SIZE, evicted: evicted > 0n ? evicted : 0n };
  });
}
