/**
 * Service translation's maps and programs by name and its structs of
 * bpf/include/nkc_svc_abi.h, each declared once as a field table (loader/struct.ts),
 * with the encodings callers use. Pure: no kernel calls. Addresses are text
 * ("10.96.0.10", "fd00::a"), ports numbers, protocols "TCP" or "UDP", as a Service
 * spells them.
 */
import { familyOf, ipBytes } from "../../cni/address";
import { MAP_DEF } from "../loader/elf";
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
  u64Key,
} from "../loader/struct";

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

/** nkc_svc_services' key: a Service's front end. C declares the port __u16, in network order. */
export const SVC_KEY = struct("nkc_svc_key", { family: u32, addr: bytes(16), port: be16, proto: u8, pad: u8 });
/** nkc_svc_services' value: the Service's id, how many slots it uses, its affinity. */
export const SVC = struct("nkc_svc", { id: u32, backends: u16, flags: u8, pad: u8, affinitySecs: u32, pad2: u32 });
/** nkc_svc_slots' key: a slot of a Service. */
export const SVC_SLOT_KEY = struct("nkc_svc_slot_key", { svcId: u32, slot: u32 });
/** nkc_svc_backends' value (keyed by a u32 backend id): whose backend, where. */
export const SVC_BACKEND = struct("nkc_svc_backend", {
  svcId: u32,
  family: u32,
  addr: bytes(16),
  port: be16,
  pad: u16,
});
/** A backend's address as a socket sees it. */
export const SVC_PEER = struct("nkc_svc_peer", { family: u32, addr: bytes(16), port: be16, pad: u16 });
/** What a socket was translated from and to; nkc_svc_withdrawn's key (bpf_svc_destroy.c). */
export const SVC_PAIR = struct("nkc_svc_pair", { frontend: SVC_KEY, backend: SVC_PEER });
/** A Service a pod is held to by ClientIP affinity (ids: the Service's low, the backend's high). */
export const SVC_HELD = struct("nkc_svc_held", { ids: u64, expiresNs: u64 });
/** nkc_svc_clients' value (keyed by a pod's netns cookie): what is the pod's own. */
export const SVC_CLIENT = struct("nkc_svc_client", {
  noSocketState: u64,
  socketReplaced: u64,
  affinityReplaced: u64,
  pad: u64,
  held: array(SVC_HELD, SVC_POD_AFFINITY),
});
/** nkc_svc_stats' value (per CPU, one slot): a count per SVC_COUNTER_NAMES. */
export const SVC_STATS = struct("nkc_svc_stats", { v: array(u64, 4) });

/** What bpf_svc.o shares with user space: its map definitions and translation's structs. */
export const SVC_OBJECT = "bpf_svc.o";
export const SVC_STRUCTS: readonly StructLayout[] = [
  MAP_DEF,
  SVC_KEY,
  SVC,
  SVC_SLOT_KEY,
  SVC_BACKEND,
  SVC_PEER,
  SVC_PAIR,
  SVC_HELD,
  SVC_CLIENT,
  SVC_STATS,
];
/** What bpf_svc_destroy.o shares: the withdrawn pairs' key. */
export const SVC_DESTROY_OBJECT = "bpf_svc_destroy.o";
export const SVC_DESTROY_STRUCTS: readonly StructLayout[] = [MAP_DEF, SVC_KEY, SVC_PEER, SVC_PAIR];

/** A front end as the programs hold it: IPv4 in the first 4 of 16 bytes. */
const frontendKey = (f: SvcFrontend) => ({
  family: familyOf(f.ip),
  addr: ipBytes(f.ip),
  port: f.port,
  proto: IPPROTO[f.protocol],
});

export const svcKey = (f: SvcFrontend): Buffer => SVC_KEY.encode(frontendKey(f));

export function decodeSvcKey(key: Buffer): SvcFrontend {
  const k = SVC_KEY.decode(key);
  return { ip: addressText(k.family, k.addr), port: k.port, protocol: k.proto === IPPROTO.UDP ? "UDP" : "TCP" };
}

export const SVC_F_AFFINITY = 1;

export interface SvcValue {
  id: number;
  backends: number;
  /** ClientIP affinity's timeout in seconds; absent: no affinity. */
  affinitySeconds?: number;
}

export function svcValue(v: SvcValue): Buffer {
  return SVC.encode({
    id: v.id,
    backends: v.backends,
    flags: v.affinitySeconds === undefined ? 0 : SVC_F_AFFINITY,
    affinitySecs: v.affinitySeconds ?? 0,
  });
}

export function decodeSvcValue(value: Buffer): SvcValue {
  const v = SVC.decode(value);
  const affine = (v.flags & SVC_F_AFFINITY) !== 0;
  return { id: v.id, backends: v.backends, ...(affine ? { affinitySeconds: v.affinitySecs } : {}) };
}

export const slotKey = (svcId: number, slot: number): Buffer => SVC_SLOT_KEY.encode({ svcId, slot });

export function decodeSlotKey(key: Buffer): { svcId: number; slot: number } {
  const { svcId, slot } = SVC_SLOT_KEY.decode(key);
  return { svcId, slot };
}

/** A u32 id (backend ids key nkc_svc_backends and are nkc_svc_slots' values). */
export const idBytes = (id: number): Buffer => u32Key(id);

export interface SvcBackendValue extends SvcBackend {
  svcId: number;
}

export function backendValue(v: SvcBackendValue): Buffer {
  return SVC_BACKEND.encode({ svcId: v.svcId, family: familyOf(v.ip), addr: ipBytes(v.ip), port: v.port });
}

export function decodeBackendValue(value: Buffer): SvcBackendValue {
  const v = SVC_BACKEND.decode(value);
  return { svcId: v.svcId, ip: addressText(v.family, v.addr), port: v.port };
}

/** The u64 netns cookie that keys nkc_svc_netns (and is nkc_svc_pods' value). */
export const cookieBytes = (cookie: bigint): Buffer => u64Key(cookie);

export const SVC_COUNTER_NAMES = ["translated", "refused", "reversed", "unsure"] as const;
export type SvcCounters = Record<(typeof SVC_COUNTER_NAMES)[number], bigint>;

/** Sums the per-CPU struct nkc_svc_stats values (u64 v[4]). */
export function sumSvcCounters(perCpu: readonly Buffer[]): SvcCounters {
  const sum = Object.fromEntries(SVC_COUNTER_NAMES.map((n) => [n, 0n])) as SvcCounters;
  for (const value of perCpu) {
    const { v } = SVC_STATS.decode(value);
    SVC_COUNTER_NAMES.forEach((name, i) => {
      sum[name] += v[i] ?? 0n;
    });
  }
  return sum;
}

/** A Service's front end (its nkc_svc_services key) and one backend, as a translated
 * socket's storage holds them: the key of the withdrawn pairs. */
export function pairKey(frontend: SvcFrontend, backend: SvcBackend): Buffer {
  return SVC_PAIR.encode({
    frontend: frontendKey(frontend),
    backend: { family: familyOf(backend.ip), addr: ipBytes(backend.ip), port: backend.port },
  });
}

/** A zeroed struct nkc_svc_client: a pod that holds nothing and was refused nothing. */
export const emptyClient = (): Buffer => SVC_CLIENT.encode({});

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
  const c = SVC_CLIENT.decode(value);
  return {
    noSocketState: c.noSocketState,
    socketReplaced: c.socketReplaced,
    affinityReplaced: c.affinityReplaced,
    affinityHeld: c.held.filter((h) => h.expiresNs > nowNs).length,
  };
}
