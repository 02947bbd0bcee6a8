/**
 * The same-node socket bypass's objects (bpf/bpf_sock.c): its maps, pinned with the
 * node's under `<bpffsRoot>/maps/` (nkc_sock_hash, nkc_sock_state, nkc_sock_stats), and
 * its two programs, loaded against them and the node's endpoint map and pinned per build
 * under `<bpffsRoot>/sock/programs/<epoch>-<hash>/`. Loaded only when a network asks for
 * the bypass, apart from the node's other programs: a kernel without sockmap support
 * must not cost a node its fast path. Never attaches (datapath/sockbypass.ts does).
 *
 * Builds are ordered by epoch as in node.ts: a newer build's pinned programs are used,
 * never replaced; an older build's pins go once this build's are pinned.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import { sha256Hex } from "../sys/sha256";
import {
  decodeSockKey,
  ifindexKey,
  SOCK_MAP_NAMES,
  SOCK_PROGRAM_NAMES,
  type SockCounters,
  sumSockCounters,
} from "./abi";
import { readObject } from "./elf";
import { BpfMap } from "./maps";
import { mapsDir, openOrCreatePinnedMap } from "./node";
import { openPin, pinObject, unpin } from "./pins";
import { BpfProgram, loadProgram } from "./programs";

export interface SockMaps {
  hash: BpfMap;
  state: BpfMap;
  stats: BpfMap;
}

export interface SockPrograms {
  maps: SockMaps;
  programs: { sockOps: BpfProgram; skMsg: BpfProgram };
  /** `<epoch>-<hash>` of the programs in use. */
  build: string;
  /** True when this call loaded and pinned them. */
  loaded: boolean;
  /** True when they are a newer build's: this build must not switch links. */
  superseded: boolean;
  close(): void;
}

export const sockRoot = (bpffsRoot: string) => path.join(bpffsRoot, "sock");
const sockProgramsRoot = (bpffsRoot: string) => path.join(sockRoot(bpffsRoot), "programs");

export function sockBuildName(object: Buffer, epoch: number): string {
  return `${epoch}-${sha256Hex([object], 16)}`;
}

interface SockSet {
  dir: string;
  epoch: number;
  build: string;
}

const SET_NAME = /^(\d+)-[0-9a-f]+$/;

export function pinnedSockSets(bpffsRoot: string): SockSet[] {
  const root = sockProgramsRoot(bpffsRoot);
  if (!fs.existsSync(root)) return [];
  return fs.readdirSync(root).map((build) => {
    const m = SET_NAME.exec(build);
    return { dir: path.join(root, build), epoch: m ? Number(m[1]) : -1, build };
  });
}

const complete = (set: SockSet) =>
  Object.values(SOCK_PROGRAM_NAMES).every((name) => fs.existsSync(path.join(set.dir, name)));

/**
 * The bypass's maps and programs: the newest pinned build's, or this build's, loaded and
 * pinned now. `endpoints` is the node's endpoint map (the programs read it). Throws what
 * the kernel said when it cannot (no sockhash, no sock_ops or sk_msg programs).
 */
export function loadSockPrograms(bpffsRoot: string, object: Buffer, epoch: number, endpoints: BpfMap): SockPrograms {
  const build = sockBuildName(object, epoch);
  const sets = pinnedSockSets(bpffsRoot).filter(complete);
  const newer = sets.filter((s) => s.epoch > epoch);
  const own = sets.find((s) => s.build === build);
  const opened: { close(): void }[] = [];
  try {
    const spec = readObject(object);
    const byName = new Map<string, BpfMap>([[endpoints.spec.name, endpoints]]);
    for (const mapSpec of spec.maps) {
      if (byName.has(mapSpec.name)) continue;
      const map = openOrCreatePinnedMap(mapSpec, path.join(mapsDir(bpffsRoot), mapSpec.name));
      opened.push(map);
      byName.set(mapSpec.name, map);
    }
    const maps: SockMaps = {
      hash: required(byName, SOCK_MAP_NAMES.hash),
      state: required(byName, SOCK_MAP_NAMES.state),
      stats: required(byName, SOCK_MAP_NAMES.stats),
    };
    const use = newer.length > 0 ? newer.reduce((a, b) => (b.epoch > a.epoch ? b : a)) : own;
    let programs: SockPrograms["programs"];
    let loaded = false;
    if (use) {
      const open = (name: string) => {
        const program = new BpfProgram(openPin(path.join(use.dir, name)), name);
        opened.push(program);
        return program;
      };
      programs = { sockOps: open(SOCK_PROGRAM_NAMES.sockOps), skMsg: open(SOCK_PROGRAM_NAMES.skMsg) };
    } else {
      const load = (name: string) => {
        const programSpec = spec.programs.find((p) => p.name === name);
        if (!programSpec) throw new Error(`program ${name} not found in bpf_sock.o`);
        const program = loadProgram(programSpec, { license: spec.license, maps: byName });
        opened.push(program);
        return program;
      };
      programs = { sockOps: load(SOCK_PROGRAM_NAMES.sockOps), skMsg: load(SOCK_PROGRAM_NAMES.skMsg) };
      const dir = path.join(sockProgramsRoot(bpffsRoot), build);
      for (const program of Object.values(programs)) {
        unpin(path.join(dir, program.name));
        pinObject(program.fd, path.join(dir, program.name));
      }
      loaded = true;
      for (const set of pinnedSockSets(bpffsRoot)) {
        if (set.build !== build && set.epoch <= epoch) fs.rmSync(set.dir, { recursive: true, force: true });
      }
    }
    return {
      maps,
      programs,
      build: use?.build ?? build,
      loaded,
      superseded: newer.length > 0,
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
  if (!map) throw new Error(`map ${name} missing from bpf_sock.o`);
  return map;
}

/** The pinned bypass maps, or undefined where no network ever asked for the bypass. */
export function openSockMaps(bpffsRoot: string): (SockMaps & { close(): void }) | undefined {
  const pins = Object.values(SOCK_MAP_NAMES).map((name) => path.join(mapsDir(bpffsRoot), name));
  if (!pins.every((pin) => fs.existsSync(pin))) return undefined;
  const opened: BpfMap[] = [];
  try {
    for (const pin of pins) opened.push(BpfMap.openPinned(pin));
    const [hash, state, stats] = opened as [BpfMap, BpfMap, BpfMap];
    return {
      hash,
      state,
      stats,
      close: () => {
        for (const m of opened) m.close();
      },
    };
  } catch (e) {
    for (const m of opened) m.close();
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
 * their states with them (DEL: no socket of a deleted pod stays spliced). Their peers'
 * sockets stay: removing a socket from the sockhash drops what was redirected into it
 * and not yet read, and a live peer may still read what the pod sent before it went.
 * Those peers send through the stack from their next message on (nkc_sk_msg finds the
 * pod's endpoint gone). Returns how many sockets were taken out.
 */
export function forgetSocketsOf(maps: Pick<SockMaps, "hash" | "state">, ips: ReadonlySet<string>): number {
  let removed = 0;
  for (const map of [maps.hash, maps.state]) {
    for (const key of [...map.keys()]) {
      if (!ips.has(decodeSockKey(key).local.ip)) continue;
      if (map.delete(key) && map === maps.hash) removed += 1;
    }
  }
  return removed;
}

export function readSockCounters(stats: BpfMap, hostIfindex: number): SockCounters | undefined {
  const perCpu = stats.lookupPerCpu(ifindexKey(hostIfindex));
  return perCpu ? sumSockCounters(perCpu) : undefined;
}

export function deleteSockCounters(stats: BpfMap, hostIfindex: number): boolean {
  return stats.delete(ifindexKey(hostIfindex));
}
