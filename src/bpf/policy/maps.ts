/**
 * NetworkPolicy's maps (bpf/lib/policy.h) as the plugin and the agent use them: the
 * plugin records a pod's key at ADD (nkc_pol_ep) and gives it a flow table; the agent
 * writes each pod's slot and flags (nkc_pol_pods), the slots' tables (nkc_pol_peers,
 * nkc_pol_ports), how a slot's rule bits are read where a ClusterNetworkPolicy applies
 * (nkc_pol_tiers) and the Service ClusterIPs (nkc_pol_vips). The programs write only the
 * flow tables and the counters.
 */
import * as fs from "node:fs";
import { BPF_MAP_TYPE } from "../../sys/bpf-uapi";
import { sha256 } from "../../sys/sha256";
import { ifindexKey } from "../fastpath/abi";
import type { FlowTableMaps } from "../fastpath/direct";
import { type MapSpec, readObject } from "../loader/elf";
import { mapPin } from "../loader/layout";
import { BpfMap } from "../loader/maps";
import { openOrCreatePinnedMap } from "../loader/pinned-map";
import { checkStructs } from "../loader/struct-btf";
import {
  decodePolicyPod,
  decodeTierKey,
  decodeTierValue,
  POL_PEER_KEY,
  POL_PORT_KEY,
  POL_TIER_KEY,
  POLICY_MAP_NAMES,
  POLICY_STRUCTS,
  type PolicyDir,
  type PolicyPodEntry,
  type PolicyStats,
  type PolicyVerdictCount,
  podKeyBytes,
  policyEndpointValue,
  policyPodValue,
  sumPolicyStats,
  sumPolicyVerdicts,
  type TierValue,
  tierKey,
  tierValue,
} from "./abi";
import { POLICY_CT_SPEC } from "./ct";
import type { TableWrite } from "./tables";

export type PolicyMaps = Record<keyof typeof POLICY_MAP_NAMES, BpfMap> & { close(): void };

/** A pod's key: the first 8 bytes of sha256("namespace/name"), read little endian. */
export const podKey = (namespace: string, name: string): bigint => sha256(`${namespace}/${name}`).readBigUInt64LE(0);

/** A namespace's key in nkc_pol_ns: as a pod's, with an empty name (no pod has one). */
export const namespaceKey = (namespace: string): bigint => podKey(namespace, "");

/**
 * nkc_pol_ns, userspace's only (the programs never read it): the namespaces that have a
 * NetworkPolicy, by key. The agent keeps it; an ADD reads it to tell whether a pod the
 * agent has not judged yet must wait (PENDING) or is simply not isolated.
 */
export const POLICY_NAMESPACES_SPEC: MapSpec = {
  name: "nkc_pol_ns",
  type: BPF_MAP_TYPE.HASH,
  keySize: 8,
  valueSize: 4,
  maxEntries: 16384,
  flags: 0,
};

export function openOrCreatePolicyNamespaces(bpffsRoot: string): BpfMap {
  return openOrCreatePinnedMap(POLICY_NAMESPACES_SPEC, mapPin(bpffsRoot, POLICY_NAMESPACES_SPEC.name));
}

/** Has `namespace` a NetworkPolicy, as far as the agent told? False where it never said. */
export function namespaceHasPolicies(bpffsRoot: string, namespace: string): boolean {
  const pin = mapPin(bpffsRoot, POLICY_NAMESPACES_SPEC.name);
  if (!fs.existsSync(pin)) return false;
  const map = BpfMap.openPinned(pin);
  try {
    return map.lookup(podKeyBytes(namespaceKey(namespace))) !== undefined;
  } finally {
    map.close();
  }
}

function byRole(open: (name: string) => BpfMap): PolicyMaps {
  const opened: BpfMap[] = [];
  const close = () => {
    for (const m of opened) m.close();
  };
  try {
    const maps = Object.fromEntries(
      Object.entries(POLICY_MAP_NAMES).map(([role, name]) => {
        const map = open(name);
        opened.push(map);
        return [role, map];
      }),
    ) as Record<keyof typeof POLICY_MAP_NAMES, BpfMap>;
    return { ...maps, close };
  } catch (e) {
    close();
    throw e;
  }
}

/** The pinned maps, or undefined where no ADD or agent made them yet. */
export function openPolicyMaps(bpffsRoot: string): PolicyMaps | undefined {
  if (!Object.values(POLICY_MAP_NAMES).every((name) => fs.existsSync(mapPin(bpffsRoot, name)))) return undefined;
  return byRole((name) => BpfMap.openPinned(mapPin(bpffsRoot, name)));
}

/** The pinned maps, made from the pod object's specs where nothing made them yet (the
 * agent writes policies before the first pod of the node arrives). Loads no program. */
export function openOrCreatePolicyMaps(bpffsRoot: string, lxcObject: Buffer): PolicyMaps {
  checkStructs(lxcObject, POLICY_STRUCTS, "bpf_lxc.o");
  const specs = new Map(readObject(lxcObject).maps.map((spec) => [spec.name, spec]));
  return byRole((name) => {
    const spec = specs.get(name);
    if (!spec) throw new Error(`map ${name} missing from bpf_lxc.o`);
    const withInner = name === POLICY_MAP_NAMES.ctTables ? { ...spec, inner: POLICY_CT_SPEC } : spec;
    return openOrCreatePinnedMap(withInner, mapPin(bpffsRoot, name));
  });
}

/** The pool of the pods' flow tables, as fastpath/direct.ts hands tables out. */
export const policyFlowTables = (maps: Pick<PolicyMaps, "ctTables" | "ctOwner" | "ctPool">): FlowTableMaps => ({
  tables: maps.ctTables,
  owners: maps.ctOwner,
  pool: maps.ctPool,
  spec: POLICY_CT_SPEC,
});

/** ADD: the pod behind `hostIfindex` is found by `key` from now on. */
export function recordPolicyEndpoint(maps: Pick<PolicyMaps, "endpoints">, hostIfindex: number, key: bigint): void {
  maps.endpoints.update(ifindexKey(hostIfindex), policyEndpointValue(key));
}

export function readPolicyPod(maps: Pick<PolicyMaps, "pods">, key: bigint): PolicyPodEntry | undefined {
  const v = maps.pods.lookup(podKeyBytes(key));
  return v ? decodePolicyPod(v) : undefined;
}

export function writePolicyPod(
  maps: Pick<PolicyMaps, "pods">,
  key: bigint,
  slot: number,
  flags: number,
  stamp: bigint,
): void {
  maps.pods.update(podKeyBytes(key), policyPodValue(slot, flags, stamp));
}

/** Marks a pod wired before its policy was judged; false when the agent has judged it already. */
export function markPolicyPending(maps: Pick<PolicyMaps, "pods">, key: bigint, pendingFlag: number): boolean {
  try {
    maps.pods.update(podKeyBytes(key), policyPodValue(0, pendingFlag, 0n), "create-only");
    return true;
  } catch (e) {
    if ((e as { code?: string }).code === "EEXIST") return false;
    throw e;
  }
}

export function deletePolicyPod(maps: Pick<PolicyMaps, "pods">, key: bigint): boolean {
  return maps.pods.delete(podKeyBytes(key));
}

/**
 * How slot `slot` reads its rule bits in direction `dir` where a ClusterNetworkPolicy
 * applies (nkc_pol_tiers). Write it before a pod's entry points at the slot (without it
 * the direction is NetworkPolicy alone: nothing matching denies), and give the slot's
 * pods a new stamp when it changes under them: the bits' meaning changed.
 */
export function writeTier(maps: Pick<PolicyMaps, "tiers">, slot: number, dir: PolicyDir, value: TierValue): void {
  maps.tiers.update(tierKey(slot, dir), tierValue(value));
}

/** Slot `slot`'s direction `dir` back to NetworkPolicy alone; false when it had no entry. */
export function deleteTier(maps: Pick<PolicyMaps, "tiers">, slot: number, dir: PolicyDir): boolean {
  return maps.tiers.delete(tierKey(slot, dir));
}

export function readTier(maps: Pick<PolicyMaps, "tiers">, slot: number, dir: PolicyDir): TierValue | undefined {
  const v = maps.tiers.lookup(tierKey(slot, dir));
  return v ? decodeTierValue(v) : undefined;
}

/** Every (slot, direction) nkc_pol_tiers has an entry for. */
export function policyTierKeys(maps: Pick<PolicyMaps, "tiers">): { slot: number; dir: PolicyDir }[] {
  return [...maps.tiers.keys()].map(decodeTierKey);
}

/** nkc_pol_peers, nkc_pol_ports and nkc_pol_tiers, each with the slot of one of its keys. */
const slotTables = (maps: Pick<PolicyMaps, "peers" | "ports" | "tiers">) =>
  [
    [maps.peers, (key: Buffer) => POL_PEER_KEY.decode(key).slot],
    [maps.ports, (key: Buffer) => POL_PORT_KEY.decode(key).slot],
    [maps.tiers, (key: Buffer) => POL_TIER_KEY.decode(key).slot],
  ] as const;

/** The slot ids nkc_pol_peers, nkc_pol_ports and nkc_pol_tiers hold keys of. */
export function policyTableSlots(maps: Pick<PolicyMaps, "peers" | "ports" | "tiers">): Set<number> {
  const slots = new Set<number>();
  for (const [map, slotOf] of slotTables(maps)) for (const key of map.keys()) slots.add(slotOf(key));
  return slots;
}

/**
 * Deletes every key of nkc_pol_peers, nkc_pol_ports and nkc_pol_tiers whose slot `keep`
 * lacks: how many keys, of how many slots. The keys are listed first (an LPM trie's walk
 * restarts when its current key goes).
 */
export function sweepPolicySlots(
  maps: Pick<PolicyMaps, "peers" | "ports" | "tiers">,
  keep: ReadonlySet<number>,
): { slots: number; keys: number } {
  const slots = new Set<number>();
  let keys = 0;
  for (const [map, slotOf] of slotTables(maps)) {
    for (const key of [...map.keys()]) {
      const slot = slotOf(key);
      if (keep.has(slot)) continue;
      if (map.delete(key)) keys += 1;
      slots.add(slot);
    }
  }
  return { slots: slots.size, keys };
}

/** Makes `map`'s keys exactly `wanted` (values as `value` gives them): how many were added and removed. */
export function reconcileKeys(
  map: BpfMap,
  wanted: readonly Buffer[],
  value: Buffer,
): { added: number; removed: number } {
  const want = new Set(wanted.map((k) => k.toString("hex")));
  const have = new Set<string>();
  let removed = 0;
  for (const key of [...map.keys()]) {
    const hex = key.toString("hex");
    if (want.has(hex)) have.add(hex);
    else if (map.delete(key)) removed += 1;
  }
  let added = 0;
  for (const key of wanted) {
    if (have.has(key.toString("hex"))) continue;
    map.update(key, value);
    added += 1;
  }
  return { added, removed };
}

/** Applies a slot's writes in the order given (tables.ts orders them). */
export function applyTableWrites(
  maps: Pick<PolicyMaps, "peers" | "ports">,
  writes: { peers: TableWrite[]; ports: TableWrite[] },
): void {
  for (const [map, list] of [
    [maps.ports, writes.ports],
    [maps.peers, writes.peers],
  ] as const) {
    for (const w of list) {
      if (w.value) map.update(w.key, w.value);
      else map.delete(w.key);
    }
  }
}

/** The node's new flows the rules judged, by direction, deciding tier and verdict. */
export function readPolicyVerdicts(maps: Pick<PolicyMaps, "verdicts">): PolicyVerdictCount[] {
  const key = Buffer.alloc(4);
  return sumPolicyVerdicts((index) => {
    key.writeUInt32LE(index, 0);
    return maps.verdicts.lookupPerCpu(key);
  });
}

/** Flow records on or off: the programs push them onto nkc_flows only while on. */
export function setFlowRecording(maps: Pick<PolicyMaps, "flowSwitch">, on: boolean): void {
  const value = Buffer.alloc(4);
  value.writeUInt32LE(on ? 1 : 0, 0);
  maps.flowSwitch.update(Buffer.alloc(4), value);
}

/** Up to `max` records off nkc_flows, oldest first, undecoded. */
export function takeFlowEvents(maps: Pick<PolicyMaps, "flows">, max: number): Buffer[] {
  const out: Buffer[] = [];
  while (out.length < max) {
    const raw = maps.flows.pop();
    if (!raw) break;
    out.push(raw);
  }
  return out;
}

/** Flow records the programs found no room for, since the map was made (every CPU's). */
export function readFlowRecordsLost(maps: Pick<PolicyMaps, "flowLost">): bigint {
  return (maps.flowLost.lookupPerCpu(Buffer.alloc(4)) ?? []).reduce((n, b) => n + b.readBigUInt64LE(0), 0n);
}

export function readPolicyStats(maps: Pick<PolicyMaps, "stats">, hostIfindex: number): PolicyStats {
  return sumPolicyStats(maps.stats.lookupPerCpu(ifindexKey(hostIfindex)) ?? []);
}

/**
 * NetworkPolicy turned off on a node: every pod's isolation, every namespace's mark and
 * every slot's tables go, so the pods that still carry the policy programs are judged
 * by nothing (no entry: not isolated) and no ADD waits for an agent that will not come.
 * What the programs keep per pod (flow tables, counters) goes with each pod's DEL.
 * Returns how many pods were isolated or pending; 0 where the maps were never made.
 */
export function forgetPolicies(bpffsRoot: string): number {
  let pods = 0;
  const namespacesPin = mapPin(bpffsRoot, POLICY_NAMESPACES_SPEC.name);
  if (fs.existsSync(namespacesPin)) {
    const namespaces = BpfMap.openPinned(namespacesPin);
    try {
      for (const key of [...namespaces.keys()]) namespaces.delete(key);
    } finally {
      namespaces.close();
    }
  }
  const maps = openPolicyMaps(bpffsRoot);
  if (!maps) return 0;
  try {
    // The pods first: a slot's tables are read only through a pod's entry.
    for (const key of [...maps.pods.keys()]) if (maps.pods.delete(key)) pods += 1;
    for (const map of [maps.peers, maps.ports, maps.tiers, maps.vips]) {
      for (const key of [...map.keys()]) map.delete(key);
    }
  } finally {
    maps.close();
  }
  return pods;
}
