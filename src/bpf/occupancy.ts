/**
 * How full the node-wide pinned maps are (for `status`): each map the programs use, by
 * its kind and size as the kernel reports them (bpf_map_info) and the keys it holds now.
 * Read-only. A map not pinned (no pod yet, no socket bypass or translation asked for) is
 * left out, and so is socket storage (nkc_svc_sock), which belongs to the sockets, not to
 * the node.
 * The flow tables inside nkc_flow_tables are not here (fastpath/direct.ts reads those); that map
 * counts the pool's filled slots, and nkc_flow_owner the endpoints that hold one.
 */

import * as fs from "node:fs";
import { BpfError } from "../sys/bpf-syscall";
import { BPF_MAP_TYPE } from "../sys/bpf-uapi";
import { MAP_NAMES } from "./fastpath/abi";
import { filledSlots } from "./fastpath/direct";
import { mapPin } from "./loader/layout";
import { BpfMap, mapKind } from "./loader/maps";
import { SOCK_MAP_NAMES } from "./sock/abi";
import { SVC_MAP_NAMES } from "./svc/abi";

export interface MapOccupancy {
  name: string;
  /** The map type as bpftool names it: "hash", "lru_hash", "lpm_trie", "sockhash", ... */
  kind: string;
  /** Keys held now (per-CPU maps: keys, not per-CPU values). */
  entries: number;
  /** max_entries. */
  capacity: number;
}

/** The node's maps, then the socket bypass's, then Service translation's, in a fixed order. */
const NAMES = [...Object.values(MAP_NAMES), ...Object.values(SOCK_MAP_NAMES), ...Object.values(SVC_MAP_NAMES)];

export function pinnedMapOccupancy(bpffsRoot: string): MapOccupancy[] {
  const all: MapOccupancy[] = [];
  for (const name of NAMES) {
    const pin = mapPin(bpffsRoot, name);
    if (!fs.existsSync(pin)) continue;
    let map: BpfMap;
    try {
      map = BpfMap.openPinned(pin);
    } catch (e) {
      if (e instanceof BpfError && e.code === "ENOENT") continue; // unpinned meanwhile
      throw e;
    }
    try {
      // Socket storage lives with each socket: no entries to count, no capacity to fill.
      if (map.spec.type === BPF_MAP_TYPE.SK_STORAGE) continue;
      all.push({
        name,
        kind: mapKind(map.spec.type),
        entries: entriesOf(bpffsRoot, name, map),
        capacity: map.spec.maxEntries,
      });
    } finally {
      map.close();
    }
  }
  return all;
}

/**
 * Keys held now. An array has every key from its creation, so walking it says nothing
 * (and nkc_flow_tables would take 16384 calls): the pool's bookkeeping says how many of
 * its slots hold a table, and a plain array counts as full.
 */
function entriesOf(bpffsRoot: string, name: string, map: BpfMap): number {
  if (name === MAP_NAMES.flowTables) return filledSlotsPinned(bpffsRoot);
  if (map.spec.type === BPF_MAP_TYPE.ARRAY) return map.spec.maxEntries;
  return map.countKeys();
}

function filledSlotsPinned(bpffsRoot: string): number {
  const pin = mapPin(bpffsRoot, MAP_NAMES.flowPool);
  if (!fs.existsSync(pin)) return 0;
  const pool = BpfMap.openPinned(pin);
  try {
    return filledSlots(pool);
  } finally {
    pool.close();
  }
}
