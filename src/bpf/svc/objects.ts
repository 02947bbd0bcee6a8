/**
 * Service translation's objects (bpf/bpf_svc.c): its maps, pinned with the node's under
 * `<bpffsRoot>/maps/` (SVC_MAP_NAMES), and its eight programs, pinned per build under
 * `<bpffsRoot>/svc/programs/<epoch>-<hash>/` (loader/program-set.ts orders builds). Loaded only
 * where a network asks for translation, apart from the node's other programs: a kernel
 * that cannot run them must not cost a node its fast path. Never attaches
 * (datapath/service-translation.ts does). The Service tables' writer is table.ts;
 * each pod's record is here.
 */
import * as fs from "node:fs";
import { monotonicNs } from "../../sys/clock";
import { type ObjectSpec, readObject } from "../loader/elf";
import { mapPin, svcProgramsRoot } from "../loader/layout";
import { BpfMap } from "../loader/maps";
import { openOrCreatePinnedMap } from "../loader/pinned-map";
import { loadProgramSet } from "../loader/program-set";
import type { BpfProgram } from "../loader/programs";
import { u32Key } from "../loader/struct";
import { checkStructs } from "../loader/struct-btf";
import {
  cookieBytes,
  decodeClient,
  emptyClient,
  SVC_MAP_NAMES,
  SVC_OBJECT,
  SVC_PROGRAM_NAMES,
  SVC_STRUCTS,
  type SvcClient,
  type SvcCounters,
  type SvcHook,
  sumSvcCounters,
} from "./abi";
import type { SvcTables } from "./table";

export type SvcMaps = Record<keyof typeof SVC_MAP_NAMES, BpfMap>;

export interface SvcPrograms {
  maps: SvcMaps;
  programs: Record<SvcHook, BpfProgram>;
  build: string;
  loaded: boolean;
  superseded: boolean;
  close(): void;
}

const HOOKS = Object.keys(SVC_PROGRAM_NAMES) as SvcHook[];

/** The maps and programs: the newest pinned build's, or this build's, loaded and pinned
 * now. Throws what the kernel said when it cannot. */
export function loadSvcPrograms(bpffsRoot: string, object: Buffer, epoch: number): SvcPrograms {
  const spec = readSvcObject(object);
  const maps = svcMapsFrom(bpffsRoot, spec);
  try {
    const set = loadProgramSet({
      setsDir: svcProgramsRoot(bpffsRoot),
      object,
      spec,
      epoch,
      names: Object.values(SVC_PROGRAM_NAMES),
      maps: new Map(Object.entries(SVC_MAP_NAMES).map(([role, name]) => [name, maps[role as keyof SvcMaps]])),
    });
    const programs = Object.fromEntries(
      HOOKS.map((hook) => [hook, set.programs.get(SVC_PROGRAM_NAMES[hook]) as BpfProgram]),
    ) as Record<SvcHook, BpfProgram>;
    const { close: _, ...justMaps } = maps;
    return {
      maps: justMaps,
      programs,
      build: set.build,
      loaded: set.loaded,
      superseded: set.superseded,
      close: () => {
        set.close();
        maps.close();
      },
    };
  } catch (e) {
    maps.close();
    throw e;
  }
}

/** The pinned maps, or undefined where no network ever asked for translation (or only
 * a build before per-socket state did). */
export function openSvcMaps(bpffsRoot: string): (SvcMaps & { close(): void }) | undefined {
  if (!Object.values(SVC_MAP_NAMES).every((name) => fs.existsSync(mapPin(bpffsRoot, name)))) return undefined;
  return mapsByRole((name) => BpfMap.openPinned(mapPin(bpffsRoot, name)));
}

/** Each role's map, from `open` by the map's name; all closed again if one cannot be had. */
function mapsByRole(open: (name: string) => BpfMap): SvcMaps & { close(): void } {
  const opened: BpfMap[] = [];
  const close = () => {
    for (const m of opened) m.close();
  };
  try {
    const maps = Object.fromEntries(
      Object.entries(SVC_MAP_NAMES).map(([role, name]) => {
        const map = open(name);
        opened.push(map);
        return [role, map];
      }),
    ) as SvcMaps;
    return { ...maps, close };
  } catch (e) {
    close();
    throw e;
  }
}

export const svcTables = (maps: SvcMaps): SvcTables => ({
  services: maps.services,
  slots: maps.slots,
  backends: maps.backends,
});

type PodMaps = Pick<SvcMaps, "pods" | "netns" | "clients">;

/**
 * Records that the pod on `hostIfindex` (in the namespace of `netnsCookie`) asks for
 * translation; its namespace counts one attachment more. A repeated ADD changes nothing;
 * a record of another namespace belongs to a device that held the ifindex before.
 */
export function recordSvcPod(maps: PodMaps, hostIfindex: number, netnsCookie: bigint): void {
  settleClients(maps);
  const key = u32Key(hostIfindex);
  const before = maps.pods.lookup(key)?.readBigUInt64LE(0);
  if (before === netnsCookie) return;
  maps.pods.update(key, cookieBytes(netnsCookie));
  recountNetns(maps, netnsCookie);
  if (before !== undefined) recountNetns(maps, before);
}

/** Forgets the pod on `hostIfindex`; its namespace stops being translated with its last
 * recorded attachment. False when it had no record. */
export function forgetSvcPod(maps: PodMaps, hostIfindex: number): boolean {
  settleClients(maps);
  const key = u32Key(hostIfindex);
  const cookie = maps.pods.lookup(key)?.readBigUInt64LE(0);
  if (cookie === undefined) return false;
  maps.pods.delete(key);
  recountNetns(maps, cookie);
  return true;
}

/** The ifindexes of the pods recorded (GC compares them with the node's devices). */
export function svcPodIfindexes(maps: Pick<SvcMaps, "pods">): number[] {
  return [...maps.pods.keys()].map((key) => key.readUInt32LE(0));
}

/** The namespace's entry says how many recorded attachments it has, counted from the pod
 * records themselves, so that no sequence of ADDs and DELs can leave it wrong. The pod's
 * own state (nkc_svc_clients) exists before its namespace is translated and goes after. */
function recountNetns(maps: PodMaps, cookie: bigint): void {
  let count = 0;
  for (const key of maps.pods.keys()) if (maps.pods.lookup(key)?.readBigUInt64LE(0) === cookie) count += 1;
  const key = cookieBytes(cookie);
  if (count === 0) {
    maps.netns.delete(key);
    maps.clients.delete(key);
  } else {
    ensureClient(maps, key);
    maps.netns.update(key, u32Key(count));
  }
}

function ensureClient(maps: PodMaps, key: Buffer): void {
  if (maps.clients.lookup(key)) return;
  maps.clients.update(key, emptyClient(), "create-only");
}

/** Every translated namespace with its state and no state without one: namespaces
 * recorded by a build that made none get theirs, and what a DEL of such a build left
 * goes. Under the node lock, like every change of the records. */
function settleClients(maps: PodMaps): void {
  const recorded = new Set([...maps.netns.keys()].map((k) => k.toString("hex")));
  for (const key of [...maps.clients.keys()]) if (!recorded.has(key.toString("hex"))) maps.clients.delete(key);
  for (const hex of recorded) ensureClient(maps, Buffer.from(hex, "hex"));
}

/** Each recorded pod's own state, by host ifindex (a pod without one is left out). */
export function readSvcClients(
  maps: Pick<SvcMaps, "pods" | "clients">,
): Map<number, SvcClient & { netnsCookie: bigint }> {
  const now = monotonicNs();
  const out = new Map<number, SvcClient & { netnsCookie: bigint }>();
  for (const key of maps.pods.keys()) {
    const cookie = maps.pods.lookup(key);
    const value = cookie && maps.clients.lookup(cookie);
    if (cookie && value)
      out.set(key.readUInt32LE(0), { ...decodeClient(value, now), netnsCookie: cookie.readBigUInt64LE(0) });
  }
  return out;
}

export function readSvcCounters(stats: BpfMap): SvcCounters {
  return sumSvcCounters(stats.lookupPerCpu(u32Key(0)) ?? []);
}

/**
 * The pinned maps, made now from the object's specs where no ADD made them yet (the agent
 * fills the Service tables before the first translating pod arrives). Loads no program.
 */
export function openOrCreateSvcMaps(bpffsRoot: string, object: Buffer): SvcMaps & { close(): void } {
  return svcMapsFrom(bpffsRoot, readSvcObject(object));
}

function svcMapsFrom(bpffsRoot: string, object: ObjectSpec): SvcMaps & { close(): void } {
  const specs = new Map(object.maps.map((spec) => [spec.name, spec]));
  return mapsByRole((name) => {
    const spec = specs.get(name);
    if (!spec) throw new Error(`map ${name} missing from ${SVC_OBJECT}`);
    return openOrCreatePinnedMap(spec, mapPin(bpffsRoot, name));
  });
}

/** bpf_svc.o read, once its structs are found laid out as user space writes them. */
function readSvcObject(object: Buffer): ObjectSpec {
  checkStructs(object, SVC_STRUCTS, SVC_OBJECT);
  return readObject(object);
}
