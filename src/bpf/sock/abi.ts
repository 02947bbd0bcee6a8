/**
 * The socket bypass's names and byte layouts (bpf/bpf_sock.c), mirroring
 * bpf/include/nkc_abi.h (whose _Static_asserts pin the sizes used here). Pure encoding
 * and decoding: no kernel calls.
 */
import { AF_INET, ipString } from "../../cni/address";

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
