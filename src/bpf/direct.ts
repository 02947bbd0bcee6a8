/**
 * The per-endpoint direct-flow tables behind nkc_direct (bpf/lib/direct.h): each pod's
 * own LRU table of flows proven direct, created at ADD and dropped at DEL, so one pod's
 * flows can only ever evict its own. The programs own the tables' contents; userspace
 * creates, removes and reads them, never writes an entry.
 */
import { mapGetFdById } from "../sys/bpf-syscall";
import { BPF_MAP_TYPE } from "../sys/bpf-uapi";
import {
  DIRECT_FLOW_SIZE,
  DIRECT_TABLE_SIZE,
  type DirectStats,
  decodeFlowKey,
  FLOW_KEY_SIZE,
  type FlowKey,
  ifindexKey,
} from "./abi";
import type { MapSpec } from "./elf";
import { BpfMap } from "./maps";

/** What every endpoint's table looks like; also the outer map's inner-map template. */
export const DIRECT_TABLE_SPEC: MapSpec = {
  name: "nkc_ep_flows",
  type: BPF_MAP_TYPE.LRU_HASH,
  keySize: FLOW_KEY_SIZE,
  valueSize: DIRECT_FLOW_SIZE,
  maxEntries: DIRECT_TABLE_SIZE,
  flags: 0,
};

/**
 * Gives the endpoint a new, empty table: never one a previous holder of the ifindex
 * (a pod whose DEL never came) filled.
 */
export function createEndpointTable(outer: BpfMap, hostIfindex: number): void {
  const table = BpfMap.create(DIRECT_TABLE_SPEC);
  try {
    const fd = Buffer.alloc(4);
    fd.writeUInt32LE(table.fd);
    outer.update(ifindexKey(hostIfindex), fd);
  } finally {
    table.close(); // the outer map holds the reference now
  }
}

/** Drops the endpoint's table (its memory goes once no program runs with it). */
export function removeEndpointTable(outer: BpfMap, hostIfindex: number): boolean {
  return outer.delete(ifindexKey(hostIfindex));
}

/** Host ifindexes that have a table. */
export function endpointTableOwners(outer: BpfMap): number[] {
  return [...outer.keys()].map((k) => k.readUInt32LE(0));
}

export interface RememberedFlow extends FlowKey {
  /** bpf_ktime_get_ns() of the flow's last opening packet. */
  openedNs: bigint;
}

/** The flows in the endpoint's table, or undefined when it has none. */
export function listEndpointFlows(outer: BpfMap, hostIfindex: number): RememberedFlow[] | undefined {
  return withTable(outer, hostIfindex, (table) => {
    const flows: RememberedFlow[] = [];
    for (const key of [...table.keys()]) {
      const value = table.lookup(key);
      if (value) flows.push({ ...decodeFlowKey(key), openedNs: value.readBigUInt64LE(0) });
    }
    return flows;
  });
}

/** How many flows the endpoint's table holds, or undefined when it has none. */
export function endpointTableSize(outer: BpfMap, hostIfindex: number): number | undefined {
  return withTable(outer, hostIfindex, (table) => table.countKeys());
}

/** Empties the endpoint's table (tests, and an admin resetting the memory). */
export function clearEndpointTable(outer: BpfMap, hostIfindex: number): void {
  withTable(outer, hostIfindex, (table) => {
    for (const key of [...table.keys()]) table.delete(key);
  });
}

/** Runs `fn` on the endpoint's table; a lookup in a map of maps gives the inner map's id. */
function withTable<T>(outer: BpfMap, hostIfindex: number, fn: (table: BpfMap) => T): T | undefined {
  const id = outer.lookup(ifindexKey(hostIfindex));
  if (!id) return undefined;
  let fd: number;
  try {
    fd = mapGetFdById(id.readUInt32LE(0));
  } catch {
    return undefined; // removed meanwhile
  }
  const table = new BpfMap(fd, DIRECT_TABLE_SPEC);
  try {
    return fn(table);
  } finally {
    table.close();
  }
}

/** nkc_direct_stats of one endpoint, summed over CPUs (zero when it has none). */
export function readDirectStats(stats: BpfMap, hostIfindex: number): DirectStats {
  const sum: DirectStats = { remembered: 0n, forgotten: 0n };
  for (const cpu of stats.lookupPerCpu(ifindexKey(hostIfindex)) ?? []) {
    sum.remembered += cpu.readBigUInt64LE(0);
    sum.forgotten += cpu.readBigUInt64LE(8);
  }
  return sum;
}

export function deleteDirectStats(stats: BpfMap, hostIfindex: number): void {
  stats.delete(ifindexKey(hostIfindex));
}
