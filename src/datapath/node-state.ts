/**
 * Read-only queries of a node's eBPF state, for CHECK, GC's listing, `status`,
 * `endpoints` and the agent's metrics: no lock taken, nothing changed. The changes
 * themselves, all under the node lock, are fastpath.ts's.
 */
import * as fs from "node:fs";
import {
  type Counters,
  DIRECT_TABLE_SIZE,
  type Drops,
  ENDPOINT_PINS,
  EndpointMap,
  type EndpointMaps,
  endpointPin,
  endpointsRoot,
  type FlowStats,
  flowTableSize,
  INGRESS_LIMIT_PIN,
  nodeMapsPinned,
  openNodeMaps,
  type PodLimits,
  podLimits,
  readCounters,
  readDrops,
  readFlowStats,
} from "../bpf/index";
import type { DeviceKind } from "./types";

/** Runs `fn` with the pinned maps, or returns undefined when the node has none yet. */
export function withNodeMaps<T>(root: string, fn: (maps: EndpointMaps) => T): T | undefined {
  if (!nodeMapsPinned(root)) return undefined;
  const maps = openNodeMaps(root);
  try {
    return fn(maps);
  } finally {
    maps.close();
  }
}

/** Which endpoint pins exist (for CHECK and GC): the pod's program, its ingress limit. */
export function endpointState(root: string, hostDevice: string): { pinned: boolean; ingressLimit: boolean } {
  return {
    pinned: ENDPOINT_PINS.every((p) => fs.existsSync(endpointPin(root, hostDevice, p))),
    ingressLimit: fs.existsSync(endpointPin(root, hostDevice, INGRESS_LIMIT_PIN)),
  };
}

/** The pod's rate limits as the programs see them; undefined: none (or no map yet). */
export function limitsOf(root: string, hostIfindex: number): PodLimits | undefined {
  return withNodeMaps(root, (maps) => (maps.bandwidth ? podLimits(maps.bandwidth, hostIfindex) : undefined));
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
  return withNodeMaps(root, (maps) => (maps.drops ? readDrops(maps.drops, ifindex) : undefined));
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
    if (!maps.flows || !maps.flowStats) return undefined;
    const entries = flowTableSize(maps.flows, hostIfindex);
    if (entries === undefined) return undefined;
    const stats = readFlowStats(maps.flowStats, hostIfindex);
    const evicted = stats.remembered - stats.forgotten - BigInt(entries);
    return { ...stats, entries, capacity: DIRECT_TABLE_SIZE, evicted: evicted > 0n ? evicted : 0n };
  });
}
