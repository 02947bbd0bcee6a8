/**
 * The node-wide datapath objects: the maps every program shares, pinned once under
 * `<bpffsRoot>/maps/`, and our programs loaded against them. The entry point the ADD,
 * DEL, CHECK and GC commands use; it composes the layers below and never attaches
 * anything itself (callers pick devices and hooks, see links.ts).
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { BpfError } from "../sys/bpf-syscall";
import { type Counters, MAP_NAMES, PROGRAM_NAMES } from "./abi";
import { setNetworkClusterCidrs } from "./cluster";
import { readCounters } from "./counters";
import { type MapSpec, readObject } from "./elf";
import { EndpointMap } from "./endpoints";
import { BpfMap, specMismatches } from "./maps";
import { ensureBpffs, openPin, pinObject, unpin } from "./pins";
import { BpfProgram, loadProgram } from "./programs";

/** The compiled objects' bytes (dist/bpf/*.o, embedded in the executable). */
export interface NodeObjects {
  lxc: Buffer;
  host: Buffer;
}

export const OBJECT_FILES = { lxc: "bpf_lxc.o", host: "bpf_host.o" } as const;

export function readObjectsDir(dir: string): NodeObjects {
  return {
    lxc: fs.readFileSync(path.join(dir, OBJECT_FILES.lxc)),
    host: fs.readFileSync(path.join(dir, OBJECT_FILES.host)),
  };
}

export interface NodeMaps {
  endpoints: BpfMap;
  cluster: BpfMap;
  flows: BpfMap;
  clients: BpfMap;
  counters: BpfMap;
}

/** The maps DEL, CHECK and GC use: which pod is where, and its counters. */
export type EndpointMaps = Pick<NodeMaps, "endpoints" | "counters">;

export interface NodePrograms {
  maps: NodeMaps;
  endpoints: EndpointMap;
  programs: { fromPod: BpfProgram; hostIn: BpfProgram; hostOut: BpfProgram };
  readCounters(hostIfindex: number): Counters;
  /** True when this call loaded and pinned the programs (the first ADD of a build). */
  loaded: boolean;
  /** Closes our fds. Pinned maps stay; attached links keep their programs alive. */
  close(): void;
}

export interface NodeProgramsOptions {
  /** The cluster's pod CIDRs (v4 and v6): destinations forwarded by FIB lookup. */
  clusterCidrs: readonly string[];
  /** Whose CIDRs these are: the trie holds every network's (cluster.ts). */
  network?: string;
}

export const mapsDir = (bpffsRoot: string) => path.join(bpffsRoot, "maps");

/**
 * Mounts the bpffs at `bpffsRoot` if needed, creates or reuses the pinned maps, writes
 * the cluster CIDRs and loads all programs. On failure everything opened is closed
 * (maps that were pinned stay pinned: they are node state, shared by every pod).
 */
export function loadNodePrograms(bpffsRoot: string, objects: NodeObjects, options: NodeProgramsOptions): NodePrograms {
  ensureBpffs(bpffsRoot);
  // Programs are pinned per object version: every ADD after the first opens them (no
  // verifier run per pod), and a new version gets its own directory.
  const programsDir = path.join(bpffsRoot, "programs", objectsVersion(objects));
  const opened: { close(): void }[] = [];
  try {
    // Maps re-created under programs pinned earlier would leave those programs on the old
    // maps: a missing map means loading again.
    const pinned =
      Object.values(PROGRAM_NAMES).every((name) => fs.existsSync(path.join(programsDir, name))) &&
      Object.values(MAP_NAMES).every((name) => fs.existsSync(path.join(mapsDir(bpffsRoot), name)));
    const node = pinned
      ? openPinnedNode(bpffsRoot, programsDir, opened)
      : loadAndPinNode(bpffsRoot, programsDir, objects, opened);
    setNetworkClusterCidrs(bpffsRoot, node.maps.cluster, options);
    return {
      ...node,
      loaded: !pinned,
      endpoints: new EndpointMap(node.maps.endpoints),
      readCounters: (ifindex) => readCounters(node.maps.counters, ifindex),
      close: () => {
        for (const o of opened) o.close();
      },
    };
  } catch (e) {
    for (const o of opened) o.close();
    throw e;
  }
}

type LoadedNode = Pick<NodePrograms, "maps" | "programs">;

/**
 * The common case: this version's programs are pinned, so they were loaded against the
 * pinned maps after those passed the layout checks. Opens the pins without reading the
 * ELF objects again.
 */
function openPinnedNode(bpffsRoot: string, programsDir: string, opened: { close(): void }[]): LoadedNode {
  const byName = new Map<string, BpfMap>();
  for (const name of Object.values(MAP_NAMES)) {
    const map = BpfMap.openPinned(path.join(mapsDir(bpffsRoot), name));
    opened.push(map);
    byName.set(name, map);
  }
  const open = (name: string) => {
    const program = new BpfProgram(openPin(path.join(programsDir, name)), name);
    opened.push(program);
    return program;
  };
  return {
    maps: nodeMaps(byName),
    programs: {
      fromPod: open(PROGRAM_NAMES.fromPod),
      hostIn: open(PROGRAM_NAMES.hostIn),
      hostOut: open(PROGRAM_NAMES.hostOut),
    },
  };
}

/**
 * First ADD of a version: creates or checks the pinned maps against the objects' layouts,
 * loads the programs (the verifier runs here) and pins them, then drops older versions.
 */
function loadAndPinNode(
  bpffsRoot: string,
  programsDir: string,
  objects: NodeObjects,
  opened: { close(): void }[],
): LoadedNode {
  const lxc = readObject(objects.lxc);
  const host = readObject(objects.host);
  const byName = new Map<string, BpfMap>();
  for (const spec of mergeMapSpecs([...lxc.maps, ...host.maps])) {
    const map = openOrCreatePinnedMap(spec, path.join(mapsDir(bpffsRoot), spec.name));
    opened.push(map);
    byName.set(spec.name, map);
  }
  const load = (object: typeof lxc, name: string) => {
    const spec = object.programs.find((p) => p.name === name);
    if (!spec) throw new Error(`program ${name} not found in object`);
    const program = loadProgram(spec, { license: object.license, maps: byName });
    opened.push(program);
    replacePin(program.fd, path.join(programsDir, name));
    return program;
  };
  const programs = {
    fromPod: load(lxc, PROGRAM_NAMES.fromPod),
    hostIn: load(host, PROGRAM_NAMES.hostIn),
    hostOut: load(host, PROGRAM_NAMES.hostOut),
  };
  removeOtherVersions(path.dirname(programsDir), path.basename(programsDir));
  return { maps: nodeMaps(byName), programs };
}

/** Identifies a build of the programs: a hash of both objects. */
export function objectsVersion(objects: NodeObjects): string {
  return createHash("sha256").update(objects.lxc).update(objects.host).digest("hex").slice(0, 16);
}

/** Pins `fd` at `pin`, replacing what is there (a half-pinned set from a crashed ADD). */
function replacePin(fd: number, pin: string): void {
  unpin(pin);
  pinObject(fd, pin);
}

/**
 * Old versions' program pins go once a new version is pinned. Links attached to old
 * programs keep those programs alive until they are updated or removed.
 */
function removeOtherVersions(dir: string, keep: string): void {
  for (const name of fs.readdirSync(dir)) {
    if (name !== keep) fs.rmSync(path.join(dir, name), { recursive: true, force: true });
  }
}

/**
 * The pinned endpoint and counter maps alone (DEL, CHECK, GC need no programs, and must
 * work on a node where a newer version has not yet added the maps it brings). Throws if
 * not pinned yet.
 */
export function openNodeMaps(bpffsRoot: string): EndpointMaps & { close(): void } {
  const endpoints = BpfMap.openPinned(path.join(mapsDir(bpffsRoot), MAP_NAMES.endpoints));
  let counters: BpfMap;
  try {
    counters = BpfMap.openPinned(path.join(mapsDir(bpffsRoot), MAP_NAMES.counters));
  } catch (e) {
    endpoints.close();
    throw e;
  }
  return {
    endpoints,
    counters,
    close: () => {
      endpoints.close();
      counters.close();
    },
  };
}

/**
 * The pinned map at `pinPath` if its layout matches `spec`, else a new map pinned there.
 * Two ADDs racing on a fresh node: the loser's pin fails with EEXIST and it opens the
 * winner's map instead.
 */
export function openOrCreatePinnedMap(spec: MapSpec, pinPath: string): BpfMap {
  if (fs.existsSync(pinPath)) return openCompatible(spec, pinPath);
  const map = BpfMap.create(spec);
  try {
    pinObject(map.fd, pinPath);
    return map;
  } catch (e) {
    map.close();
    if (e instanceof BpfError && e.code === "EEXIST") return openCompatible(spec, pinPath);
    throw e;
  }
}

function openCompatible(spec: MapSpec, pinPath: string): BpfMap {
  const map = BpfMap.openPinned(pinPath);
  const problems = specMismatches(spec, map.spec);
  if (problems.length > 0) {
    map.close();
    // Replacing it would silently drop every endpoint on the node; an upgrade that
    // changes a layout must migrate or remove the pin deliberately.
    throw new Error(`pinned map ${pinPath} does not match this version: ${problems.join(", ")}`);
  }
  return map;
}

function mergeMapSpecs(all: MapSpec[]): MapSpec[] {
  const byName = new Map<string, MapSpec>();
  for (const spec of all) {
    const seen = byName.get(spec.name);
    if (!seen) byName.set(spec.name, spec);
    else if (specMismatches(seen, spec).length > 0) {
      throw new Error(`map ${spec.name} is defined differently in two objects`);
    }
  }
  return [...byName.values()];
}

function nodeMaps(byName: ReadonlyMap<string, BpfMap>): NodeMaps {
  const get = (name: string) => {
    const map = byName.get(name);
    if (!map) throw new Error(`map ${name} missing from the objects`);
    return map;
  };
  return {
    endpoints: get(MAP_NAMES.endpoints),
    cluster: get(MAP_NAMES.cluster),
    flows: get(MAP_NAMES.flows),
    clients: get(MAP_NAMES.clients),
    counters: get(MAP_NAMES.counters),
  };
}
