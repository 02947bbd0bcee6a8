/**
 * A pinned map shared by whoever needs it first: opened when its pin exists and its layout
 * is this version's, else created and pinned. Node maps (node.ts), the socket bypass's
 * (sock/objects.ts) and the networks' CIDR records (fastpath/cluster.ts) are all made this way.
 */
import * as fs from "node:fs";
import { BpfError } from "../../sys/bpf-syscall";
import type { MapSpec } from "./elf";
import { BpfMap, specMismatches } from "./maps";
import { pinObject } from "./pins";

/**
 * The pinned map at `pinPath` if its layout matches `spec`, else a new map pinned there.
 * Two ADDs racing on a fresh node: the loser's pin fails with EEXIST and it opens the
 * winner's map instead.
 */
export function openOrCreatePinnedMap(spec: MapSpec, pinPath: string): BpfMap {
  if (fs.existsSync(pinPath)) return openCompatible(spec, pinPath);
  const map = BpfMap.create(spec);
  try {
    pinObject(map.fd, pinPath);
    return map;
  } catch (e) {
    map.close();
    if (e instanceof BpfError && e.code === "EEXIST") return openCompatible(spec, pinPath);
    throw e;
  }
}

function openCompatible(spec: MapSpec, pinPath: string): BpfMap {
  const map = BpfMap.openPinned(pinPath);
  const problems = specMismatches(spec, map.spec);
  if (problems.length > 0) {
    map.close();
    // Replacing it would silently drop every endpoint on the node; an upgrade that
    // changes a layout must migrate or remove the pin deliberately.
    throw new Error(`pinned map ${pinPath} does not match this version: ${problems.join(", ")}`);
  }
  return map;
}
