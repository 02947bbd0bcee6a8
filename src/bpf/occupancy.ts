/**
 * How full the node-wide pinned maps are (for `status`): each map the programs use, by
 * its kind and size as the kernel reports them (bpf_map_info) and the keys it holds now.
 * Read-only. A map not pinned (an older build's node, no socket bypass yet) is left out.
 * The per-endpoint flow tables inside nkc_direct are not here: direct.ts reads those.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { BpfError } from "../sys/bpf-syscall";
import { MAP_NAMES, SOCK_MAP_NAMES } from "./abi";
import { BpfMap, mapKind } from "./maps";
import { mapsDir } from "./node";

export interface MapOccupancy {
  name: string;
  /** The map type as bpftool names it: "hash", "lru_hash", "lpm_trie", "sockhash", ... */
  kind: string;
  /** Keys held now (per-CPU maps: keys, not per-CPU values). */
  entries: number;
  /** max_entries. */
  capacity: number;
}

/** The node's maps, then the socket bypass's, in a fixed order. */
const NAMES = [...Object.values(MAP_NAMES), ...Object.values(SOCK_MAP_NAMES)];

export function pinnedMapOccupancy(bpffsRoot: string): MapOccupancy[] {
  const all: MapOccupancy[] = [];
  for (const name of NAMES) {
    const pin = path.join(mapsDir(bpffsRoot), name);
    if (!fs.existsSync(pin)) continue;
    let map: BpfMap;
    try {
      map = BpfMap.openPinned(pin);
    } catch (e) {
      if (e instanceof BpfError && e.code === "ENOENT") continue; // unpinned meanwhile
      throw e;
    }
    try {
      all.push({ name, kind: mapKind(map.spec.type), entries: map.countKeys(), capacity: map.spec.maxEntries });
    } finally {
      map.close();
    }
  }
  return all;
}
