/**
 * The socket bypass's maps and programs by name (bpf/bpf_sock.c) and its structs of
 * bpf/include/nkc_abi.h, each declared once as a field table (loader/struct.ts), with
 * the encodings callers use. Pure: no kernel calls.
 */
import { MAP_DEF } from "../loader/elf";
import { addressText, array, bytes, type StructLayout, struct, u16, u32, u64, u64Key } from "../loader/struct";

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

/** nkc_sock_hash's and nkc_sock_admitted's key: one TCP socket seen from its own side,
 * ports in host order. */
export const SOCK_KEY = struct("nkc_sock_key", {
  local: bytes(16),
  remote: bytes(16),
  localPort: u16,
  remotePort: u16,
  family: u32,
});
/** nkc_sock_stats' value (per CPU): a count per SOCK_COUNTER_NAMES. */
export const SOCK_STATS = struct("nkc_sock_stats", { v: array(u64, 4) });
/** nkc_sock_pods' value: a pod's recorded namespace and what the programs counted for it. */
export const SOCK_POD = struct("nkc_sock_pod", {
  netnsCookie: u64,
  sockets: u32,
  pad: u32,
  refusedBound: u64,
  refusedNetns: u64,
});
/** nkc_sock_admitted's value: a socket in the sockhash, whose count holds it, its state. */
export const SOCK_ADMITTED = struct("nkc_sock_admitted", {
  socketCookie: u64,
  netnsCookie: u64,
  hostIfindex: u32,
  state: u32,
});

/** What bpf_sock.o shares with user space: its map definitions and the bypass's structs. */
export const SOCK_OBJECT = "bpf_sock.o";
export const SOCK_STRUCTS: readonly StructLayout[] = [MAP_DEF, SOCK_KEY, SOCK_STATS, SOCK_POD, SOCK_ADMITTED];

/** One TCP socket of the bypass, from its own side. */
export interface SockKey {
  local: { ip: string; port: number };
  remote: { ip: string; port: number };
}

export function decodeSockKey(key: Buffer): SockKey {
  const k = SOCK_KEY.decode(key);
  return {
    local: { ip: addressText(k.family, k.local), port: k.localPort },
    remote: { ip: addressText(k.family, k.remote), port: k.remotePort },
  };
}

export const SOCK_COUNTER_NAMES = ["added", "redirectedMsgs", "redirectedBytes", "passedMsgs"] as const;
export type SockCounterName = (typeof SOCK_COUNTER_NAMES)[number];
export type SockCounters = Record<SockCounterName, bigint>;

/** Sums the per-CPU struct nkc_sock_stats values. */
export function sumSockCounters(perCpu: Buffer[]): SockCounters {
  const sum = Object.fromEntries(SOCK_COUNTER_NAMES.map((n) => [n, 0n])) as SockCounters;
  for (const value of perCpu) {
    const { v } = SOCK_STATS.decode(value);
    SOCK_COUNTER_NAMES.forEach((name, i) => {
      sum[name] += v[i] ?? 0n;
    });
  }
  return sum;
}

// ---- Socket bypass: namespaces and per-pod bound (nkc_abi.h's block of the same name) ----

/** NKC_SOCK_PER_POD: sockets one pod may hold in the sockhash (NKC_SOCK_MAX / 16). */
export const SOCK_PER_POD = 4096;

/** A pod's recorded namespace and what the programs counted for it (struct nkc_sock_pod). */
export interface SockPod {
  netnsCookie: bigint;
  /** Its sockets in the sockhash now. */
  sockets: number;
  /** Sockets not admitted because it held SOCK_PER_POD. */
  refusedBound: bigint;
  /** Sockets on its address made in another network namespace. */
  refusedNetns: bigint;
}

export const sockPodValue = (v: SockPod): Buffer => SOCK_POD.encode(v);

export function decodeSockPod(value: Buffer): SockPod {
  const { netnsCookie, sockets, refusedBound, refusedNetns } = SOCK_POD.decode(value);
  return { netnsCookie, sockets, refusedBound, refusedNetns };
}

/** A socket in the sockhash, whose count holds it, its state (struct nkc_sock_admitted). */
export interface SockAdmitted {
  socketCookie: bigint;
  netnsCookie: bigint;
  hostIfindex: number;
  state: number;
}

export const decodeSockAdmitted = (value: Buffer): SockAdmitted => SOCK_ADMITTED.decode(value);

/** The u64 socket cookie that keys nkc_sock_cookies. */
export const socketCookieKey = (cookie: bigint): Buffer => u64Key(cookie);

// ---- end of socket bypass: namespaces and per-pod bound ----
