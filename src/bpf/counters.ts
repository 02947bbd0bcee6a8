/**
 * Reading the per-endpoint counters (nkc_counters, per CPU, keyed by host ifindex).
 * The programs increment; userspace only reads and deletes.
 */
import { addCounters, type Counters, ifindexKey, zeroCounters } from "./abi";
import type { BpfMap } from "./maps";

/** The device's counters summed over CPUs (zeros when it has none yet). */
export function readCounters(map: BpfMap, hostIfindex: number): Counters {
  const perCpu = map.lookupPerCpu(ifindexKey(hostIfindex)) ?? [];
  return perCpu.reduce(addCounters, zeroCounters());
}

/** Drops a device's counters (on DEL: ifindexes are reused). */
export function deleteCounters(map: BpfMap, hostIfindex: number): boolean {
  return map.delete(ifindexKey(hostIfindex));
}
