/**
 * Service translation's names and byte layouts, mirroring bpf/include/nkc_svc_abi.h
 * (whose _Static_asserts pin the sizes used here). Pure encoding and decoding: no
 * kernel calls. Addresses are text ("10.96.0.10", "fd00::a"), ports numbers, protocols
 * "TCP" or "UDP", as a Service spells them.
 */
import { AF_INET, familyOf, ipBytes, ipString } from "../../cni/address";

export const SVC_MAP_NAMES = {
  services: "nkc_svc_services",
  slots: "nkc_svc_slots",
  backends: "nkc_svc_backends",
  netns: "nkc_svc_netns",
  pods: "nkc_svc_pods",
  clients: "nkc_svc_clients",
  sockets: "nkc_svc_sock",
  stats: "nkc_svc_stats",
} as const;

/** The programs by the hook each serves (bpf/bpf_svc.c). */
export const SVC_PROGRAM_NAMES = {
  connect4: "nkc_svc_connect4",
  connect6: "nkc_svc_connect6",
  sendmsg4: "nkc_svc_sendmsg4",
  sendmsg6: "nkc_svc_sendmsg6",
  recvmsg4: "nkc_svc_recvmsg4",
  recvmsg6: "nkc_svc_recvmsg6",
  getpeername4: "nkc_svc_getpeername4",
  getpeername6: "nkc_svc_getpeername6",
} as const;
export type SvcHook = keyof typeof SVC_PROGRAM_NAMES;

/** NKC_SVC_* bounds of nkc_svc_abi.h. */
export const SVC_MAX = 16384;
export const SVC_BACKENDS_MAX = 65536;
/** Services one socket is shown back (its storage's entries). */
export const SVC_SOCK_SLOTS = 4;
/** Services one pod is held to by ClientIP affinity at once. */
export const SVC_POD_AFFINITY = 32;

export type SvcProtocol = "TCP" | "UDP";
const IPPROTO: Record<SvcProtocol, number> = { TCP: 6, UDP: 17 };

/** A Service's front end: what a pod's socket names. */
export interface SvcFrontend {
  ip: string;
  port: number;
  protocol: SvcProtocol;
}

export interface SvcBackend {
  ip: string;
  port: number;
}

/** Address bytes as the programs hold them: IPv4 in the first 4 of 16. */
function addr16(ip: string): Buffer {
  const out = Buffer.alloc(16);
  ipBytes(ip).copy(out);
  return out;
}

function ipOf(family: number, addr: Buffer): string {
  return ipString(Buffer.from(addr.subarray(0, family === AF_INET ? 4 : 16)));
}

/** struct nkc_svc_key: u32 family, u8 addr[16], be16 port, u8 proto, pad. */
export function svcKey(f: SvcFrontend): Buffer {
  const key = Buffer.alloc(24);
  key.writeUInt32LE(familyOf(f.ip), 0);
  addr16(f.ip).copy(key, 4);
  key.writeUInt16BE(f.port, 20);
  key.writeUInt8(IPPROTO[f.protocol], 22);
  return key;
}

export function decodeSvcKey(key: Buffer): SvcFrontend {
  const proto = key.readUInt8(22);
  return {
    ip: ipOf(key.readUInt32LE(0), key.subarray(4, 20)),
    port: key.readUInt16BE(20),
    protocol: proto === IPPROTO.UDP ? "UDP" : "TCP",
  };
}

export const SVC_F_AFFINITY = 1;

export interface SvcValue {
  id: number;
  backends: number;
  /** ClientIP affinity's timeout in seconds; absent: no affinity. */
  affinitySeconds?: number;
}

/** struct nkc_svc: u32 id, u16 backends, u8 flags, pad, u32 affinity_secs, pad. */
export function svcValue(v: SvcValue): Buffer {
  const value = Buffer.alloc(16);
  value.writeUInt32LE(v.id, 0);
  value.writeUInt16LE(v.backends, 4);
  value.writeUInt8(v.affinitySeconds === undefined ? 0 : SVC_F_AFFINITY, 6);
  value.writeUInt32LE(v.affinitySeconds ?? 0, 8);
  return value;
}

export function decodeSvcValue(value: Buffer): SvcValue {
  const affine = (value.readUInt8(6) & SVC_F_AFFINITY) !== 0;
  return {
    id: value.readUInt32LE(0),
    backends: value.readUInt16LE(4),
    ...(affine ? { affinitySeconds: value.readUInt32LE(8) } : {}),
  };
}

/** struct nkc_svc_slot_key: u32 svc_id, u32 slot. */
export function slotKey(svcId: number, slot: number): Buffer {
  const key = Buffer.alloc(8);
  key.writeUInt32LE(svcId, 0);
  key.writeUInt32LE(slot, 4);
  return key;
}

export function decodeSlotKey(key: Buffer): { svcId: number; slot: number } {
  return { svcId: key.readUInt32LE(0), slot: key.readUInt32LE(4) };
}

/** A u32 id (backend ids key nkc_svc_backends and are nkc_svc_slots' values). */
export function idBytes(id: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(id);
  return b;
}

export interface SvcBackendValue extends SvcBackend {
  svcId: number;
}

/** struct nkc_svc_backend: u32 svc_id, u32 family, u8 addr[16], be16 port, pad. */
export function backendValue(v: SvcBackendValue): Buffer {
  const value = Buffer.alloc(28);
  value.writeUInt32LE(v.svcId, 0);
  value.writeUInt32LE(familyOf(v.ip), 4);
  addr16(v.ip).copy(value, 8);
  value.writeUInt16BE(v.port, 24);
  return value;
}

export function decodeBackendValue(value: Buffer): SvcBackendValue {
  return {
    svcId: value.readUInt32LE(0),
    ip: ipOf(value.readUInt32LE(4), value.subarray(8, 24)),
    port: value.readUInt16BE(24),
  };
}

/** The u64 netns cookie that keys nkc_svc_netns (and is nkc_svc_pods' value). */
export function cookieBytes(cookie: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(cookie);
  return b;
}

export const SVC_COUNTER_NAMES = ["translated", "refused", "reversed", "unsure"] as const;
export type SvcCounters = Record<(typeof SVC_COUNTER_NAMES)[number], bigint>;

/** Sums the per-CPU struct nkc_svc_stats values (u64 v[4]). */
export function sumSvcCounters(perCpu: readonly Buffer[]): SvcCounters {
  const sum = Object.fromEntries(SVC_COUNTER_NAMES.map((n) => [n, 0n])) as SvcCounters;
  for (const value of perCpu) {
    SVC_COUNTER_NAMES.forEach((name, i) => {
      sum[name] += value.readBigUInt64LE(i * 8);
    });
  }
  return sum;
}

/** struct nkc_svc_peer: u32 family, u8 addr[16], be16 port, pad. */
function peerBytes(b: SvcBackend): Buffer {
  const out = Buffer.alloc(24);
  out.writeUInt32LE(familyOf(b.ip), 0);
  addr16(b.ip).copy(out, 4);
  out.writeUInt16BE(b.port, 20);
  return out;
}

/** struct nkc_svc_pair: a Service's front end (its nkc_svc_services key) and one backend,
 * as a translated socket's storage holds them: the key of the withdrawn pairs. */
export function pairKey(frontend: SvcFrontend, backend: SvcBackend): Buffer {
  return Buffer.concat([svcKey(frontend), peerBytes(backend)]);
}

const CLIENT_SIZE = 32 + 16 * SVC_POD_AFFINITY;

/** A zeroed struct nkc_svc_client: a pod that holds nothing and was refused nothing. */
export const emptyClient = (): Buffer => Buffer.alloc(CLIENT_SIZE);

/** What a pod's struct nkc_svc_client says. */
export interface SvcClient {
  /** Sockets left to the stack because the kernel gave them no socket storage. */
  noSocketState: bigint;
  /** A socket's least recently used Service given up for another (its own). */
  socketReplaced: bigint;
  /** A Service the pod was held to by affinity given up for another (its own). */
  affinityReplaced: bigint;
  /** Services the pod is held to now (of SVC_POD_AFFINITY). */
  affinityHeld: number;
}

/** Decodes struct nkc_svc_client; `nowNs` (CLOCK_MONOTONIC, as bpf_ktime_get_ns) tells
 * held entries from expired ones. */
export function decodeClient(value: Buffer, nowNs: bigint): SvcClient {
  let held = 0;
  for (let i = 0; i < SVC_POD_AFFINITY; i++) {
    if (value.readBigUInt64LE(32 + i * 16 + 8) > nowNs) held += 1;
  }
  return {
    noSocketState: value.readBigUInt64LE(0),
    socketReplaced: value.readBigUInt64LE(8),
    affinityReplaced: value.readBigUInt64LE(16),
    affinityHeld: held,
  };
}
