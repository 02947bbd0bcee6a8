/**
 * The node's maps and programs by name, and the fast path's structs of
 * bpf/include/nkc_abi.h, each declared once as a field table (loader/struct.ts), with
 * the encodings callers use. Pure: no kernel calls.
 */
import { AF_INET, AF_INET6, type Family, familyOf, ipBytes, parseCidr } from "../../cni/address";
import {
  addressText,
  array,
  be16,
  bytes,
  type StructLayout,
  struct,
  u8,
  u16,
  u32,
  u32Key,
  u64,
} from "../loader/struct";

export const MAP_NAMES = {
  endpoints: "nkc_endpoints",
  cluster: "nkc_cluster",
  counters: "nkc_counters",
  drops: "nkc_drops",
  flowTables: "nkc_flow_tables",
  flowOwner: "nkc_flow_owner",
  flowPool: "nkc_flow_pool",
  flowStats: "nkc_direct_stats",
  bandwidth: "nkc_bandwidth",
} as const;

export const PROGRAM_NAMES = {
  fromPod: "nkc_from_pod",
  sourceCheck: "nkc_src_check",
  hostIn: "nkc_host_in",
  hostOut: "nkc_host_out",
  podIngress: "nkc_pod_ingress",
  podPolicy: "nkc_pod_policy",
  wgIn: "nkc_wg_in",
  wgOut: "nkc_wg_out",
} as const;

/** NKC_MAX_ENDPOINTS and NKC_DIRECT_TABLE_SIZE of nkc_abi.h. */
export const MAX_ENDPOINTS = 16384;
export const DIRECT_TABLE_SIZE = 1024;

export const EP_FLAG_NETKIT = 1;
/** NKC_EP_F_SOCK_BYPASS: the pod's network has "sockBypass": true. */
export const EP_FLAG_SOCK_BYPASS = 2;
/** NKC_EP_F_NO_ARP: the pod's device resolves no neighbours (netkit L3): its ARP is refused. */
export const EP_FLAG_NO_ARP = 4;

/** The u32 host ifindex that keys nkc_counters, nkc_flow_owner, nkc_direct_stats and nkc_bandwidth. */
export const ifindexKey = (hostIfindex: number): Buffer => u32Key(hostIfindex);

/** nkc_endpoints' key: one pod address. */
export const ENDPOINT_KEY = struct("nkc_endpoint_key", { family: u32, addr: bytes(16) });
/** nkc_endpoints' value: the pod's host device and NKC_EP_F_* flags. */
export const ENDPOINT = struct("nkc_endpoint", { hostIfindex: u32, flags: u32 });
/** nkc_cluster's key (LPM trie): prefixlen counts the family byte too (8 + the prefix). */
export const CIDR_KEY = struct("nkc_cidr_key", { prefixlen: u32, family: u8, addr: bytes(16), pad: bytes(3) });
/** A flow normalised so that both directions give one key (the lower (addr, port) in a). */
export const FLOW_KEY = struct("nkc_flow_key", {
  addrA: bytes(16),
  addrB: bytes(16),
  portA: be16,
  portB: be16,
  family: u8,
  proto: u8,
  pad: u16,
});
/** A direct-flow table's value: when the flow last opened, under which generation. */
export const DIRECT_FLOW = struct("nkc_direct_flow", { openedNs: u64, gen: u64 });
/** nkc_flow_owner's value: which slot of the pool holds the endpoint's table, its generation. */
export const FLOW_OWNER = struct("nkc_flow_owner", { slot: u32, pad: u32, gen: u64 });
/** nkc_flow_pool's one value: slots holding a table, the last generation handed out. */
export const FLOW_POOL = struct("nkc_flow_pool", { tables: u32, pad: u32, lastGen: u64 });
/** nkc_direct_stats' value (per CPU). */
export const DIRECT_STATS = struct("nkc_direct_stats", { remembered: u64, forgotten: u64 });
/** nkc_counters' value (per CPU): a count per COUNTER_NAMES. */
export const COUNTERS = struct("nkc_counters", { v: array(u64, 8) });
/** nkc_drops' value (per CPU): a slot per DROP_REASONS, room for 8. */
export const DROPS = struct("nkc_drops", { v: array(u64, 8) });

/** The fast path's structs, which the node's objects (bpf_lxc.o, bpf_host.o) lay out. */
export const FASTPATH_STRUCTS: readonly StructLayout[] = [
  ENDPOINT_KEY,
  ENDPOINT,
  CIDR_KEY,
  FLOW_KEY,
  DIRECT_FLOW,
  FLOW_OWNER,
  FLOW_POOL,
  DIRECT_STATS,
  COUNTERS,
  DROPS,
];

export function endpointKey(ip: string): Buffer {
  return ENDPOINT_KEY.encode({ family: familyOf(ip), addr: ipBytes(ip) });
}

export function decodeEndpointKey(key: Buffer): string {
  const { family, addr } = ENDPOINT_KEY.decode(key);
  return addressText(family, addr);
}

export interface EndpointValue {
  hostIfindex: number;
  flags: number;
}

export const endpointValue = (v: EndpointValue): Buffer => ENDPOINT.encode(v);

export const decodeEndpointValue = (value: Buffer): EndpointValue => ENDPOINT.decode(value);

export function cidrKey(cidr: string): Buffer {
  const { family, address, prefixLength: length } = parseCidr(cidr);
  const addr = ipBytes(address);
  // Clear host bits: the trie would ignore them on lookup, but two spellings of one
  // prefix must give one key.
  for (let bit = length; bit < addr.length * 8; bit++) addr[bit >> 3] = (addr[bit >> 3] ?? 0) & ~(0x80 >> (bit & 7));
  return CIDR_KEY.encode({ prefixlen: 8 + length, family, addr });
}

export function decodeCidrKey(key: Buffer): string {
  const { prefixlen, family, addr } = CIDR_KEY.decode(key);
  return `${addressText(family, addr)}/${prefixlen - 8}`;
}

export const COUNTER_NAMES = [
  "redirectedLocal",
  "redirectedFib",
  "redirectedNeigh",
  "redirectedPeer",
  "passedStack",
  "passedStackUnproven",
  "droppedSpoofed",
  "droppedOther",
] as const;
export type CounterName = (typeof COUNTER_NAMES)[number];
export type Counters = Record<CounterName, bigint>;

export function zeroCounters(): Counters {
  return Object.fromEntries(COUNTER_NAMES.map((n) => [n, 0n])) as Counters;
}

/** Adds one CPU's struct nkc_counters into `into`. */
export function addCounters(into: Counters, value: Buffer): Counters {
  const { v } = COUNTERS.decode(value);
  COUNTER_NAMES.forEach((name, i) => {
    into[name] += v[i] ?? 0n;
  });
  return into;
}

/** enum nkc_drop_reason, in order: why the programs refused packets (nkc_drops). */
export const DROP_REASONS = ["spoofed", "tagged", "ethertype", "unparsable", "limit", "rewrite", "policy"] as const;
export type DropReason = (typeof DROP_REASONS)[number];
export type Drops = Record<DropReason, bigint>;

export function zeroDrops(): Drops {
  return Object.fromEntries(DROP_REASONS.map((n) => [n, 0n])) as Drops;
}

/** Adds one CPU's struct nkc_drops into `into`. */
export function addDrops(into: Drops, value: Buffer): Drops {
  const { v } = DROPS.decode(value);
  DROP_REASONS.forEach((reason, i) => {
    into[reason] += v[i] ?? 0n;
  });
  return into;
}

export interface FlowKey {
  family: Family;
  proto: number;
  a: { ip: string; port: number };
  b: { ip: string; port: number };
}

export function decodeFlowKey(key: Buffer): FlowKey {
  const k = FLOW_KEY.decode(key);
  const family = k.family === AF_INET ? AF_INET : AF_INET6;
  return {
    family,
    proto: k.proto,
    a: { ip: addressText(family, k.addrA), port: k.portA },
    b: { ip: addressText(family, k.addrB), port: k.portB },
  };
}

/** struct nkc_direct_stats, summed over CPUs. */
export interface FlowStats {
  remembered: bigint;
  forgotten: bigint;
}
