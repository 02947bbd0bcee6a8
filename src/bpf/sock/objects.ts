/**
 * The same-node socket bypass's objects (bpf/bpf_sock.c): its maps, pinned with the
 * node's under `<bpffsRoot>/maps/` (nkc_sock_hash, nkc_sock_stats, and the admitted
 * sockets with their states, their cookies and each pod's namespace and count: see
 * SOCK_MAP_NAMES), and its three programs, loaded against them and the node's endpoint
 * map and pinned per build under `<bpffsRoot>/sock/programs/<epoch>-<hash>/`. Loaded only
 * when a network asks for the bypass, apart from the node's other programs: a kernel
 * without sockmap support must not cost a node its fast path. Never attaches
 * (datapath/sockbypass.ts does). Each pod's record is pods.ts's.
 *
 * Builds are ordered by epoch (loader/program-set.ts): a newer build's pinned programs are used,
 * never replaced; an older build's pins go once this build's are pinned.
 */

import { readObject } from "../loader/elf";
import { mapPin, sockProgramsRoot } from "../loader/layout";
import { BpfMap } from "../loader/maps";
import { openOrCreatePinnedMap } from "../loader/pinned-map";
import { pinExists } from "../loader/pins";
import { loadProgramSet } from "../loader/program-set";
import type { BpfProgram } from "../loader/programs";
import { u32Key } from "../loader/struct";
import { checkStructs } from "../loader/struct-btf";
import {
  decodeSockAdmitted,
  decodeSockKey,
  SOCK_MAP_NAMES,
  SOCK_OBJECT,
  SOCK_PROGRAM_NAMES,
  SOCK_STRUCTS,
  type SockCounters,
  socketCookieKey,
  sumSockCounters,
} from "./abi";

export interface SockMaps {
  hash: BpfMap;
  stats: BpfMap;
  /** Each pod's namespace (written at ADD) and its count (bpf/include/nkc_abi.h). */
  pods: BpfMap;
  /** The sockets the programs put in the sockhash, with their states. */
  admitted: BpfMap;
  /** Socket cookie -> key of an admitted socket (for the release hook). */
  cookies: BpfMap;
}

export interface SockPrograms {
  maps: SockMaps;
  programs: { sockOps: BpfProgram; skMsg: BpfProgram; release: BpfProgram };
  /** `<epoch>-<hash>` of the programs in use. */
  build: string;
  /** True when this call loaded and pinned them. */
  loaded: boolean;
  /** True when they are a newer build's: this build must not switch links. */
  superseded: boolean;
  close(): void;
}

/**
 * The bypass's maps and programs: the newest pinned build's, or this build's, loaded and
 * pinned now. `endpoints` is the node's endpoint map (the programs read it). Throws what
 * the kernel said when it cannot (no sockhash, no sock_ops or sk_msg programs).
 */
export function loadSockPrograms(bpffsRoot: string, object: Buffer, epoch: number, endpoints: BpfMap): SockPrograms {
  const opened: { close(): void }[] = [];
  try {
    checkStructs(object, SOCK_STRUCTS, SOCK_OBJECT);
    const spec = readObject(object);
    const byName = new Map<string, BpfMap>([[endpoints.spec.name, endpoints]]);
    for (const mapSpec of spec.maps) {
      if (byName.has(mapSpec.name)) continue;
      const map = openOrCreatePinnedMap(mapSpec, mapPin(bpffsRoot, mapSpec.name));
      opened.push(map);
      byName.set(mapSpec.name, map);
    }
    const maps: SockMaps = {
      hash: required(byName, SOCK_MAP_NAMES.hash),
      stats: required(byName, SOCK_MAP_NAMES.stats),
      pods: required(byName, SOCK_MAP_NAMES.pods),
      admitted: required(byName, SOCK_MAP_NAMES.admitted),
      cookies: required(byName, SOCK_MAP_NAMES.cookies),
    };
    const set = loadProgramSet({
      setsDir: sockProgramsRoot(bpffsRoot),
      object,
      spec,
      epoch,
      names: Object.values(SOCK_PROGRAM_NAMES),
      maps: byName,
    });
    opened.push(set);
    const program = (name: string) => set.programs.get(name) as BpfProgram;
    return {
      maps,
      programs: {
        sockOps: program(SOCK_PROGRAM_NAMES.sockOps),
        skMsg: program(SOCK_PROGRAM_NAMES.skMsg),
        release: program(SOCK_PROGRAM_NAMES.release),
      },
      build: set.build,
      loaded: set.loaded,
      superseded: set.superseded,
      close: () => {
        for (const o of opened) o.close();
      },
    };
  } catch (e) {
    for (const o of opened) o.close();
    throw e;
  }
}

function required(byName: ReadonlyMap<string, BpfMap>, name: string): BpfMap {
  const map = byName.get(name);
  if (!map) throw new Error(`map ${name} missing from ${SOCK_OBJECT}`);
  return map;
}

/** The pinned bypass maps, or undefined where no network ever asked for the bypass. */
export function openSockMaps(bpffsRoot: string): (SockMaps & { close(): void }) | undefined {
  const pin = (name: string) => mapPin(bpffsRoot, name);
  if (!Object.values(SOCK_MAP_NAMES).every((name) => pinExists(pin(name)))) return undefined;
  const opened: BpfMap[] = [];
  const close = () => {
    for (const m of opened) m.close();
  };
  const open = (name: string) => {
    const map = BpfMap.openPinned(pin(name));
    opened.push(map);
    return map;
  };
  try {
    return {
      hash: open(SOCK_MAP_NAMES.hash),
      stats: open(SOCK_MAP_NAMES.stats),
      pods: open(SOCK_MAP_NAMES.pods),
      admitted: open(SOCK_MAP_NAMES.admitted),
      cookies: open(SOCK_MAP_NAMES.cookies),
      close,
    };
  } catch (e) {
    close();
    throw e;
  }
}

/** A bypassed socket as the sockhash holds it. */
export interface BypassedSocket {
  local: { ip: string; port: number };
  remote: { ip: string; port: number };
}

export function listBypassedSockets(maps: Pick<SockMaps, "hash">): BypassedSocket[] {
  return [...maps.hash.keys()].map(decodeSockKey);
}

/**
 * Takes the sockets of a pod (local address one of `ips`) out of the sockhash, and
 * their states and cookies with them (DEL: no socket of a deleted pod stays spliced).
 * Their peers' sockets stay: removing a socket from the sockhash drops what was
 * redirected into it and not yet read, and a live peer may still read what the pod sent
 * before it went. Those peers send through the stack from their next message on
 * (nkc_sk_msg finds the pod's endpoint gone). The pod's count goes with its record
 * (pods.ts). Returns how many sockets were taken out.
 */
export function forgetSocketsOf(
  maps: Pick<SockMaps, "hash" | "admitted" | "cookies">,
  ips: ReadonlySet<string>,
): number {
  const ours = (key: Buffer) => ips.has(decodeSockKey(key).local.ip);
  let removed = 0;
  for (const key of [...maps.hash.keys()]) if (ours(key) && maps.hash.delete(key)) removed += 1;
  const { admitted, cookies } = maps;
  for (const key of [...admitted.keys()]) {
    if (!ours(key)) continue;
    const value = admitted.lookup(key);
    if (value) cookies.delete(socketCookieKey(decodeSockAdmitted(value).socketCookie));
    admitted.delete(key);
  }
  return removed;
}

export function readSockCounters(stats: BpfMap, hostIfindex: number): SockCounters | undefined {
  const perCpu = stats.lookupPerCpu(u32Key(hostIfindex));
  return perCpu ? sumSockCounters(perCpu) : undefined;
}
