/**
 * NetworkPolicy's map layouts and names, mirroring bpf/include/nkc_policy_abi.h (whose
 * _Static_asserts pin the sizes used here). Pure encoding and decoding.
 */
import { AF_INET, type Family, ipBytes, ipString } from "../../cni/address";

export const POLICY_MAP_NAMES = {
  endpoints: "nkc_pol_ep",
  pods: "nkc_pol_pods",
  peers: "nkc_pol_peers",
  ports: "nkc_pol_ports",
  vips: "nkc_pol_vips",
  ctTables: "nkc_pol_ct_tables",
  ctOwner: "nkc_pol_ct_owner",
  ctPool: "nkc_pol_ct_pool",
  stats: "nkc_pol_stats",
  events: "nkc_pol_events",
  /** The judgment's per-CPU scratch (programs only). */
  scratch: "nkc_pol_scratch",
} as const;

export const POLICY_RULES = 64;
export const POLICY_CT_SIZE = 2048;
export const POLICY_CT_VALUE_SIZE = 32;

export type PolicyDir = "egress" | "ingress";
export const DIR_CODE: Record<PolicyDir, number> = { egress: 0, ingress: 1 };

export const POL_F_ISOLATED_IN = 1;
export const POL_F_ISOLATED_OUT = 2;
export const POL_F_PENDING = 4;
/** The agent could not write the pod's policy in full: its isolated directions deny everything. */
export const POL_F_INCOMPLETE = 8;

/** IPPROTO_* for the protocols a rule's port names; NONE for packets without ports. */
export const POLICY_PROTO = { NONE: 0, TCP: 6, UDP: 17, SCTP: 132 } as const;
export type PolicyProto = keyof typeof POLICY_PROTO;

export const PEER_FIXED_BITS = 64;
export const PORT_FIXED_BITS = 48;

/** struct nkc_pol_ep: the pod's key. */
export function policyEndpointValue(podKey: bigint): Buffer {
  const v = Buffer.alloc(8);
  v.writeBigUInt64LE(podKey);
  return v;
}

export const podKeyBytes = (podKey: bigint): Buffer => policyEndpointValue(podKey);

/** struct nkc_pol_pod: its slot, flags, and the stamp of the rules it is judged by. */
export function policyPodValue(slot: number, flags: number, stamp: bigint): Buffer {
  const v = Buffer.alloc(16);
  v.writeUInt32LE(slot, 0);
  v.writeUInt32LE(flags, 4);
  v.writeBigUInt64LE(stamp, 8);
  return v;
}

export interface PolicyPodEntry {
  slot: number;
  flags: number;
  stamp: bigint;
}

export function decodePolicyPod(v: Buffer): PolicyPodEntry {
  return { slot: v.readUInt32LE(0), flags: v.readUInt32LE(4), stamp: v.readBigUInt64LE(8) };
}

/** A prefix of one family: its address bytes (4 or 16) and length. */
export interface AddressPrefix {
  family: Family;
  bytes: Buffer;
  length: number;
}

/** struct nkc_pol_peer_key for `prefix` of `slot`, direction `dir`. */
export function peerKey(slot: number, dir: PolicyDir, prefix: AddressPrefix): Buffer {
  const k = Buffer.alloc(28);
  k.writeUInt32LE(PEER_FIXED_BITS + prefix.length, 0);
  k.writeUInt32LE(slot, 4);
  k.writeUInt8(DIR_CODE[dir], 8);
  k.writeUInt8(prefix.family, 9);
  prefix.bytes.copy(k, 12);
  return k;
}

export function decodePeerKey(k: Buffer): { slot: number; dir: PolicyDir; prefix: string } {
  const family = k.readUInt8(9) as Family;
  const length = k.readUInt32LE(0) - PEER_FIXED_BITS;
  const bytes = Buffer.from(k.subarray(12, family === AF_INET ? 16 : 28));
  return {
    slot: k.readUInt32LE(4),
    dir: k.readUInt8(8) === 0 ? "egress" : "ingress",
    prefix: `${ipString(bytes)}/${length}`,
  };
}

/** struct nkc_pol_port_key: `port` the first port of a prefix of `length` bits. */
export function portKey(slot: number, dir: PolicyDir, proto: PolicyProto, port: number, length: number): Buffer {
  const k = Buffer.alloc(12);
  k.writeUInt32LE(PORT_FIXED_BITS + length, 0);
  k.writeUInt32LE(slot, 4);
  k.writeUInt8(DIR_CODE[dir], 8);
  k.writeUInt8(POLICY_PROTO[proto], 9);
  k.writeUInt16BE(port, 10);
  return k;
}

export function decodePortKey(k: Buffer): {
  slot: number;
  dir: PolicyDir;
  proto: number;
  port: number;
  length: number;
} {
  return {
    slot: k.readUInt32LE(4),
    dir: k.readUInt8(8) === 0 ? "egress" : "ingress",
    proto: k.readUInt8(9),
    port: k.readUInt16BE(10),
    length: k.readUInt32LE(0) - PORT_FIXED_BITS,
  };
}

/** A rule bitmask value (u64). */
export function ruleBits(bits: bigint): Buffer {
  const v = Buffer.alloc(8);
  v.writeBigUInt64LE(bits);
  return v;
}

/** struct nkc_endpoint_key of a Service ClusterIP (nkc_pol_vips' key). */
export function vipKey(ip: string, family: Family): Buffer {
  const k = Buffer.alloc(20);
  k.writeUInt32LE(family, 0);
  ipBytes(ip).copy(k, 4);
  return k;
}

/** struct nkc_pol_stats summed over CPUs. */
export interface PolicyStats {
  allowed: { egress: bigint; ingress: bigint };
  denied: { egress: bigint; ingress: bigint };
}

export function sumPolicyStats(perCpu: readonly Buffer[]): PolicyStats {
  const s: PolicyStats = { allowed: { egress: 0n, ingress: 0n }, denied: { egress: 0n, ingress: 0n } };
  for (const v of perCpu) {
    s.allowed.egress += v.readBigUInt64LE(0);
    s.allowed.ingress += v.readBigUInt64LE(8);
    s.denied.egress += v.readBigUInt64LE(16);
    s.denied.ingress += v.readBigUInt64LE(24);
  }
  return s;
}

export const POLICY_EVENT_SIZE = 56;
export const POLICY_REASONS = {
  1: "denied",
  2: "pending",
  3: "opaque",
  4: "incomplete",
  5: "fragment",
  6: "revoked",
} as const;

/** struct nkc_pol_event, as the ring buffer hands it over. */
export interface PolicyEvent {
  timeNs: bigint;
  ifindex: number;
  slot: number;
  dir: PolicyDir;
  family: Family;
  proto: number;
  reason: string;
  sport: number;
  dport: number;
  src: string;
  dst: string;
}

export function decodePolicyEvent(b: Buffer): PolicyEvent {
  const family = b.readUInt8(17) as Family;
  const len = family === AF_INET ? 4 : 16;
  return {
    timeNs: b.readBigUInt64LE(0),
    ifindex: b.readUInt32LE(8),
    slot: b.readUInt32LE(12),
    dir: b.readUInt8(16) === 0 ? "egress" : "ingress",
    family,
    proto: b.readUInt8(18),
    reason: POLICY_REASONS[b.readUInt8(19) as keyof typeof POLICY_REASONS] ?? `reason ${b.readUInt8(19)}`,
    sport: b.readUInt16BE(20),
    dport: b.readUInt16BE(22),
    src: ipString(Buffer.from(b.subarray(24, 24 + len))),
    dst: ipString(Buffer.from(b.subarray(40, 40 + len))),
  };
}
