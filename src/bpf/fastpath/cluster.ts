/**
 * The cluster's pod CIDRs (nkc_cluster LPM trie): destinations the programs may forward
 * by FIB lookup. Configuration, written only from here.
 *
 * Every netkit-cni network on a node shares its bpffs root, and so one trie and one set
 * of programs (which look up nothing per network). The trie holds the union of the
 * networks' `clusterCIDRs`: each ADD records its own network's list in nkc_net_cidrs, a
 * hash map no program uses, pinned with the others under `<bpffsRoot>/maps/` (so it lives
 * and goes with the node's other state), and then sets the trie to the union of every
 * recorded list. A network's list is replaced at its next ADD; one no longer configured
 * keeps its CIDRs until the root goes (a node reboot), which at worst sends its
 * destinations by FIB lookup like any other pod's. Callers hold the node lock.
 */

import { invalidConfig } from "../../cni/errors";
import { BPF_MAP_TYPE } from "../../sys/bpf-uapi";
import { sha256 } from "../../sys/sha256";
import type { MapSpec } from "../loader/elf";
import { mapPin } from "../loader/layout";
import type { BpfMap } from "../loader/maps";
import { openOrCreatePinnedMap } from "../loader/pinned-map";
import { CIDR_KEY, cidrKey, decodeCidrKey } from "./abi";

const NETWORK_ID_BYTES = 8;

/** Key: sha256(network name)[0..8) ++ the trie's key for one CIDR. Value: u32 1. */
export const NETWORK_CIDRS_SPEC: MapSpec = {
  name: "nkc_net_cidrs",
  type: BPF_MAP_TYPE.HASH,
  keySize: NETWORK_ID_BYTES + CIDR_KEY.size,
  valueSize: 4,
  maxEntries: 1024,
  flags: 0,
};

const PRESENT = Buffer.from([1, 0, 0, 0]);

export interface NetworkCidrs {
  /** The network's name; callers naming none (tools, tests) share one unnamed list. */
  network?: string;
  clusterCidrs: readonly string[];
}

/**
 * Records `clusterCidrs` as the network's list (replacing what it had) and makes the trie
 * hold the union of every network's list. A union larger than the trie is refused before
 * anything changes.
 */
export function setNetworkClusterCidrs(bpffsRoot: string, trie: BpfMap, { network = "", clusterCidrs }: NetworkCidrs) {
  const records = openOrCreatePinnedMap(NETWORK_CIDRS_SPEC, mapPin(bpffsRoot, NETWORK_CIDRS_SPEC.name));
  try {
    const id = networkId(network);
    const mine = keyed(clusterCidrs.map(cidrKey));
    const union = new Map([...recordedExcept(records, id), ...mine]);
    if (union.size > trie.spec.maxEntries) {
      const all = [...union.values()].map(decodeCidrKey).join(", ");
      throw invalidConfig(
        `"clusterCIDRs": the networks on this node have ${union.size} (${all}); the node's trie holds ${trie.spec.maxEntries}`,
      );
    }
    recordNetworkCidrs(records, id, mine);
    syncTrie(trie, union);
  } finally {
    records.close();
  }
}

const networkId = (network: string) => sha256(network).subarray(0, NETWORK_ID_BYTES);

/** Keys by their hex, so equal keys count once. */
const keyed = (keys: Buffer[]) => new Map(keys.map((k) => [k.toString("hex"), k]));

/** The CIDR keys recorded for every network but `id`. */
function recordedExcept(records: BpfMap, id: Buffer): Map<string, Buffer> {
  const others: Buffer[] = [];
  for (const key of records.keys()) {
    if (!key.subarray(0, NETWORK_ID_BYTES).equals(id)) others.push(Buffer.from(key.subarray(NETWORK_ID_BYTES)));
  }
  return keyed(others);
}

function recordNetworkCidrs(records: BpfMap, id: Buffer, cidrs: ReadonlyMap<string, Buffer>): void {
  const want = keyed([...cidrs.values()].map((cidr) => Buffer.concat([id, cidr])));
  for (const key of [...records.keys()]) {
    if (key.subarray(0, NETWORK_ID_BYTES).equals(id) && !want.has(key.toString("hex"))) records.delete(key);
  }
  for (const key of want.values()) records.update(key, PRESENT);
}

/** Makes the trie hold exactly `want` (adds missing, removes others). */
function syncTrie(map: BpfMap, want: ReadonlyMap<string, Buffer>): void {
  for (const key of [...map.keys()]) {
    if (!want.has(key.toString("hex"))) map.delete(key);
  }
  for (const key of want.values()) map.update(key, PRESENT);
}
