/**
 * The cluster's pod CIDRs (nkc_cluster LPM trie): destinations the programs may forward
 * by FIB lookup. Configuration, written only from here.
 */
import { cidrKey, decodeCidrKey } from "./abi";
import type { BpfMap } from "./maps";

/** Makes the map hold exactly `cidrs` (adds missing, removes others). */
export function syncClusterCidrs(map: BpfMap, cidrs: readonly string[]): void {
  const want = new Map(cidrs.map((c) => [cidrKey(c).toString("hex"), cidrKey(c)]));
  for (const key of [...map.keys()]) {
    if (!want.has(key.toString("hex"))) map.delete(key);
  }
  const present = Buffer.alloc(4);
  present.writeUInt32LE(1);
  for (const key of want.values()) map.update(key, present);
}

export function listClusterCidrs(map: BpfMap): string[] {
  return [...map.keys()].map(decodeCidrKey);
}
