/**
 * The byte layouts of our map keys and values and the names our objects use, mirroring
 * bpf/include/nkc_abi.h (whose _Static_asserts pin the sizes used here). Pure encoding
 * and decoding: no kernel calls.
 */
import { AF_INET, AF_INET6, type Family, familyOf, ipBytes, ipString, parseCidr } from "../../cni/address";

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
export const FLOW_KEY_SIZE = 40;
export const DIRECT_FLOW_SIZE = 16;
/** struct nkc_flow_owner and struct nkc_flow_pool. */
export const FLOW_OWNER_SIZE = 16;
export const FLOW_POOL_SIZE = 16;

export const EP_FLAG_NETKIT = 1;
/** NKC_EP_F_SOCK_BYPASS: the pod's network has "sockBypass": true. */
export const EP_FLAG_SOCK_BYPASS = 2;
/** NKC_EP_F_NO_ARP: the pod's device resolves no neighbours (netkit L3): its ARP is refused. */
export const EP_FLAG_NO_ARP = 4;

/** A u32 map key, in the host's (little-endian) order. */
export function u32Key(n: number): Buffer {
  const key = Buffer.alloc(4);
  key.writeUInt32LE(n);
  return key;
}

/** The u32 host ifindex that keys nkc_counters, nkc_flow_owner, nkc_direct_stats and nkc_bandwidth. */
export const ifindexKey = (hostIfindex: number): Buffer => u32Key(hostIfindex);

/** struct nkc_endpoint_key: u32 family, u8 addr[16]. */
export function endpointKey(ip: string): Buffer {
  const key = Buffer.alloc(20);
  key.writeUInt32LE(familyOf(ip), 0);
  ipBytes(ip).copy(key, 4);
  return key;
}

export function decodeEndpointKey(key: Buffer): string {
  const family = key.readUInt32LE(0);
  return ipString(Buffer.from(key.subarray(4, family === AF_INET ? 8 : 20)));
}

export interface EndpointValue {
  hostIfindex: number;
  flags: number;
}

/** struct nkc_endpoint: u32 host_ifindex, u32 flags. */
export function endpointValue(v: EndpointValue): Buffer {
  const value = Buffer.alloc(8);
  value.writeUInt32LE(v.hostIfindex, 0);
  value.writeUInt32LE(v.flags, 4);
  return value;
}

export function decodeEndpointValue(value: Buffer): EndpointValue {
  return { hostIfindex: value.readUInt32LE(0), flags: value.readUInt32LE(4) };
}

/** struct nkc_cidr_key: u32 prefixlen (8 + prefix, the family byte leads), u8 family, u8 addr[16], pad. */
export function cidrKey(cidr: string): Buffer {
  const { family, address, prefixLength: length } = parseCidr(cidr);
  const addr = ipBytes(address);
  // Clear host bits: the trie would ignore them on lookup, but two spellings of one
  // prefix must give one key.
  for (let bit = length; bit < addr.length * 8; bit++) addr[bit >> 3] = (addr[bit >> 3] ?? 0) & ~(0x80 >> (bit & 7));
  const key = Buffer.alloc(24);
  key.writeUInt32LE(8 + length, 0);
  key.writeUInt8(family, 4);
  addr.copy(key, 5);
  return key;
}

export function decodeCidrKey(key: Buffer): string {
  const family = key.readUInt8(4);
  const bytes = Buffer.from(key.subarray(5, family === AF_INET ? 9 : 21));
  return `${ipString(bytes)}/${key.readUInt32LE(0) - 8}`;
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

/** Adds one CPU's struct nkc_counters (u64 v[8]) into `into`. */
export function addCounters(into: Counters, value: Buffer): Counters {
  COUNTER_NAMES.forEach((name, i) => {
    into[name] += value.readBigUInt64LE(i * 8);
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

/** Adds one CPU's struct nkc_drops (u64 v[8], a slot per reason) into `into`. */
export function addDrops(into: Drops, value: Buffer): Drops {
  DROP_REASONS.forEach((reason, i) => {
    into[reason] += value.readBigUInt64LE(i * 8);
  });
  return into;
}

export interface FlowKey {
  family: Family;
  proto: number;
  a: { ip: string; port: number };
  b: { ip: string; port: number };
}

/** struct nkc_flow_key (40 bytes). */
export function decodeFlowKey(key: Buffer): FlowKey {
  const family = key.readUInt8(36) === AF_INET ? AF_INET : AF_INET6;
  const addr = (o: number) => ipString(Buffer.from(key.subarray(o, o + (family === AF_INET ? 4 : 16))));
  return {
    family,
    proto: key.readUInt8(37),
    a: { ip: addr(0), port: key.readUInt16BE(32) },
    b: { ip: addr(16), port: key.readUInt16BE(34) },
  };
}

/** struct nkc_direct_stats, summed over CPUs. */
export interface FlowStats {
  remembered: bigint;
  forgotten: bigint;
}
