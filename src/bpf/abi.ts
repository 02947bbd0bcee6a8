/**
 * The byte layouts of our map keys and values and the names our objects use, mirroring
 * bpf/include/nkc_abi.h (whose _Static_asserts pin the sizes used here). Pure encoding
 * and decoding: no kernel calls.
 */
import { AF_INET, AF_INET6, type Family, familyOf, ipBytes, ipString, parseCidr } from "../cni/address";

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

/** The socket bypass's maps and programs (bpf/bpf_sock.c), loaded only where a network asks for it. */
export const SOCK_MAP_NAMES = {
  hash: "nkc_sock_hash",
  stats: "nkc_sock_stats",
  pods: "nkc_sock_pods",
  admitted: "nkc_sock_admitted",
  cookies: "nkc_sock_cookies",
} as const;
export const SOCK_PROGRAM_NAMES = {
  sockOps: "nkc_sockops",
  skMsg: "nkc_sk_msg",
  release: "nkc_sock_release",
} as const;

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

/** struct nkc_sock_key: one TCP socket of the bypass, from its own side. */
export interface SockKey {
  local: { ip: string; port: number };
  remote: { ip: string; port: number };
}

export function decodeSockKey(key: Buffer): SockKey {
  const len = key.readUInt32LE(36) === AF_INET ? 4 : 16;
  const ip = (o: number) => ipString(Buffer.from(key.subarray(o, o + len)));
  return {
    local: { ip: ip(0), port: key.readUInt16LE(32) },
    remote: { ip: ip(16), port: key.readUInt16LE(34) },
  };
}

export const SOCK_COUNTER_NAMES = ["added", "redirectedMsgs", "redirectedBytes", "passedMsgs"] as const;
export type SockCounterName = (typeof SOCK_COUNTER_NAMES)[number];
export type SockCounters = Record<SockCounterName, bigint>;

/** Sums the per-CPU struct nkc_sock_stats values. */
export function sumSockCounters(perCpu: Buffer[]): SockCounters {
  const sum = Object.fromEntries(SOCK_COUNTER_NAMES.map((n) => [n, 0n])) as SockCounters;
  for (const value of perCpu) {
    SOCK_COUNTER_NAMES.forEach((name, i) => {
      sum[name] += value.readBigUInt64LE(i * 8);
    });
  }
  return sum;
}

// ---- Socket bypass: namespaces and per-pod bound (nkc_abi.h's block of the same name) ----

/** NKC_SOCK_PER_POD: sockets one pod may hold in the sockhash (NKC_SOCK_MAX / 16). */
export const SOCK_PER_POD = 4096;

/** struct nkc_sock_pod: a pod's recorded namespace and what the programs counted for it. */
export interface SockPod {
  netnsCookie: bigint;
  /** Its sockets in the sockhash now. */
  sockets: number;
  /** Sockets not admitted because it held SOCK_PER_POD. */
  refusedBound: bigint;
  /** Sockets on its address made in another network namespace. */
  refusedNetns: bigint;
}

export const SOCK_POD_SIZE = 32;

/** struct nkc_sock_pod: u64 netns_cookie, u32 sockets, u32 pad, u64 refused_bound, u64 refused_netns. */
export function sockPodValue(v: SockPod): Buffer {
  const value = Buffer.alloc(SOCK_POD_SIZE);
  value.writeBigUInt64LE(v.netnsCookie, 0);
  value.writeUInt32LE(v.sockets, 8);
  value.writeBigUInt64LE(v.refusedBound, 16);
  value.writeBigUInt64LE(v.refusedNetns, 24);
  return value;
}

export function decodeSockPod(value: Buffer): SockPod {
  return {
    netnsCookie: value.readBigUInt64LE(0),
    sockets: value.readUInt32LE(8),
    refusedBound: value.readBigUInt64LE(16),
    refusedNetns: value.readBigUInt64LE(24),
  };
}

/** struct nkc_sock_admitted: a socket in the sockhash, whose count holds it, its state. */
export interface SockAdmitted {
  socketCookie: bigint;
  netnsCookie: bigint;
  hostIfindex: number;
  state: number;
}

export function decodeSockAdmitted(value: Buffer): SockAdmitted {
  return {
    socketCookie: value.readBigUInt64LE(0),
    netnsCookie: value.readBigUInt64LE(8),
    hostIfindex: value.readUInt32LE(16),
    state: value.readUInt32LE(20),
  };
}

/** The u64 socket cookie that keys nkc_sock_cookies. */
export function socketCookieKey(cookie: bigint): Buffer {
  const key = Buffer.alloc(8);
  key.writeBigUInt64LE(cookie);
  return key;
}

// ---- end of socket bypass: namespaces and per-pod bound ----

/** NKC_BW_MODE_*: how a pod's egress limit is enforced: policing (a token bucket that
 * drops), or EDT (departure times an fq qdisc on the uplink honours). */
export const BW_MODES = { police: 1, edt: 2 } as const;
export type BandwidthMode = keyof typeof BW_MODES;

/** NKC_BW_IN_*: how a pod's ingress limit is enforced: policing, EDT (departure times the
 * fq on the pod's host device honours), or the host device's shaping qdisc alone. */
export const BW_INGRESS_MODES = { police: 0, edt: 1, qdisc: 2 } as const;
export type IngressMode = keyof typeof BW_INGRESS_MODES;

/** One direction of struct nkc_bandwidth (struct nkc_bw_bucket, 40 bytes). */
export interface BucketValue {
  /** Bits per second; 0: not limited. */
  rate: bigint;
  /** Bits. */
  burst: bigint;
  burstNs: bigint;
  clockNs: bigint;
  dropped: bigint;
}

export interface BandwidthValue {
  egress: BucketValue;
  ingress: BucketValue;
  /** Egress. */
  mode: BandwidthMode | undefined;
  ingressMode: IngressMode | undefined;
  /** EDT: the uplink whose fq releases the departures; 0 otherwise. */
  pacedIfindex: number;
}

export const BANDWIDTH_VALUE_SIZE = 88;
const BUCKET_SIZE = 40;
const MAX_U64 = (1n << 64n) - 1n;

/** The burst as time at `rate`: how far a bucket's clock may run ahead of now. */
export function burstNs(rate: bigint, burst: bigint): bigint {
  if (rate === 0n) return 0n;
  const ns = (burst * 1_000_000_000n) / rate;
  return ns > MAX_U64 ? MAX_U64 : ns;
}

/** struct nkc_bandwidth: egress bucket, ingress bucket, u16 mode, u16 ingress_mode, u32
 * paced_ifindex. */
export function bandwidthValue(v: BandwidthValue): Buffer {
  const value = Buffer.alloc(BANDWIDTH_VALUE_SIZE);
  [v.egress, v.ingress].forEach((b, i) => {
    const o = i * BUCKET_SIZE;
    value.writeBigUInt64LE(b.rate, o);
    value.writeBigUInt64LE(b.burst, o + 8);
    value.writeBigUInt64LE(b.burstNs, o + 16);
    value.writeBigUInt64LE(b.clockNs, o + 24);
    value.writeBigUInt64LE(b.dropped, o + 32);
  });
  value.writeUInt16LE(v.mode ? BW_MODES[v.mode] : 0, 2 * BUCKET_SIZE);
  value.writeUInt16LE(BW_INGRESS_MODES[v.ingressMode ?? "police"], 2 * BUCKET_SIZE + 2);
  value.writeUInt32LE(v.pacedIfindex, 2 * BUCKET_SIZE + 4);
  return value;
}

export function decodeBandwidthValue(value: Buffer): BandwidthValue {
  const bucket = (o: number): BucketValue => ({
    rate: value.readBigUInt64LE(o),
    burst: value.readBigUInt64LE(o + 8),
    burstNs: value.readBigUInt64LE(o + 16),
    clockNs: value.readBigUInt64LE(o + 24),
    dropped: value.readBigUInt64LE(o + 32),
  });
  const mode = value.readUInt16LE(2 * BUCKET_SIZE);
  const ingressMode = value.readUInt16LE(2 * BUCKET_SIZE + 2);
  return {
    egress: bucket(0),
    ingress: bucket(BUCKET_SIZE),
    mode: (Object.keys(BW_MODES) as BandwidthMode[]).find((m) => BW_MODES[m] === mode),
    ingressMode: (Object.keys(BW_INGRESS_MODES) as IngressMode[]).find((m) => BW_INGRESS_MODES[m] === ingressMode),
    pacedIfindex: value.readUInt32LE(2 * BUCKET_SIZE + 4),
  };
}
