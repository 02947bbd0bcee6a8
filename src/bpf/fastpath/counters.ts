/**
 * Reading the per-endpoint counters (per CPU, keyed by host ifindex): what happened to
 * packets (nkc_counters) and why refused ones were refused (nkc_drops). The programs
 * increment; userspace only reads and deletes.
 */

import type { BpfMap } from "../loader/maps";
import { addCounters, addDrops, type Counters, type Drops, ifindexKey, zeroCounters, zeroDrops } from "./abi";

/** The device's counters summed over CPUs (zeros when it has none yet). */
export function readCounters(map: BpfMap, hostIfindex: number): Counters {
  const perCpu = map.lookupPerCpu(ifindexKey(hostIfindex)) ?? [];
  return perCpu.reduce(addCounters, zeroCounters());
}

/** The device's refusals by reason, summed over CPUs (zeros when it has none). */
export function readDrops(map: BpfMap, ifindex: number): Drops {
  const perCpu = map.lookupPerCpu(ifindexKey(ifindex)) ?? [];
  return perCpu.reduce(addDrops, zeroDrops());
}
