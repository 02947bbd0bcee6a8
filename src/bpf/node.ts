/**
 * The node-wide datapath objects: the maps every program shares, pinned once under
 * `<bpffsRoot>/maps/`, and our programs loaded against them. The entry point the ADD,
 * DEL, CHECK and GC commands use; it composes the layers below and never attaches
 * anything itself (callers pick devices and hooks, see loader/links.ts).
 *
 * Each build comes in two variants that differ in how they keep NAT'd flows on the stack
 * (bpf/lib/direct.h): "conntrack" asks the kernel's conntrack through kfuncs, which
 * needs a BPF JIT and the conntrack functions in the kernel's BTF; "memory" needs
 * neither. The first load on a node tries them in that order; the one that loads is
 * pinned as `programs/<epoch>-<hash>-<variant>/`.
 *
 * Builds are ordered by their epoch (when they were made): a build never replaces the
 * programs of a newer one, and only removes older ones' pins. During an upgrade an old
 * executable may still run beside the new one; it then uses the newer programs.
 *
 * Longer than the ~350 lines other modules keep to: opening, loading, pinning and retiring
 * the node's maps and programs follow one set of rules (epochs, variants, compatible
 * maps), kept in one file so that no part can follow an older version of them.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { type Counters, MAP_NAMES, PROGRAM_NAMES } from "./fastpath/abi";
import { setNetworkClusterCidrs } from "./fastpath/cluster";
import { readCounters } from "./fastpath/counters";
import { DIRECT_TABLE_SPEC, type FlowTableMaps } from "./fastpath/direct";
import { EndpointMap } from "./fastpath/endpoints";
import { resolveConntrackFunctions } from "./fastpath/kernel-probe";
import { KeptPins } from "./kept-pins";
import { type MapSpec, type ObjectSpec, readObject } from "./loader/elf";
import { mapPin, programsRoot } from "./loader/layout";
import { BpfMap, specMismatches } from "./loader/maps";
import { openOrCreatePinnedMap } from "./loader/pinned-map";
import { ensureBpffs, openPin, replacePin } from "./loader/pins";
import { BpfProgram, firstLine, loadProgram } from "./loader/programs";
import { checkStructs } from "./loader/struct-btf";
import { buildName, NAT_CHECKS, type NatCheck, type NodeObjects, OBJECT_FILES } from "./objects";
import { POLICY_MAP_NAMES } from "./policy/abi";
import { POLICY_CT_SPEC } from "./policy/ct";
import { NODE_STRUCTS } from "./structs";

/** The maps of the node's objects, pinned under `<bpffsRoot>/maps/` (NodeMaps has them all). */
const NODE_MAP_NAMES: readonly string[] = [...Object.values(MAP_NAMES), ...Object.values(POLICY_MAP_NAMES)];

/** Every node map by its role in MAP_NAMES, the pool of per-endpoint flow tables (its
 * three maps) as fastpath/direct.ts takes it, and NetworkPolicy's maps by their role in
 * POLICY_MAP_NAMES. */
export type NodeMaps = Record<keyof typeof MAP_NAMES, BpfMap> & {
  flows: FlowTableMaps;
  policy: Record<keyof typeof POLICY_MAP_NAMES, BpfMap>;
};

export interface NodePrograms {
  maps: NodeMaps;
  endpoints: EndpointMap;
  /** fromPod: a pod's program with the fast path; sourceCheck: without it (fastPath false);
   * podIngress: a limited pod's ingress limit on its host device's transmit; podPolicy:
   * NetworkPolicy there, for pods of networks that enforce it; hostIn and hostOut: the
   * uplink's ingress (the fast path) and egress (NetworkPolicy). */
  programs: {
    fromPod: BpfProgram;
    sourceCheck: BpfProgram;
    hostIn: BpfProgram;
    hostOut: BpfProgram;
    podIngress: BpfProgram;
    podPolicy: BpfProgram;
    /** What the node's WireGuard device hands up, decrypted (the agent's --encryption),
     * and what it is given to encrypt (NetworkPolicy, as hostOut on the uplink). */
    wgIn: BpfProgram;
    wgOut: BpfProgram;
  };
  /** Which variant runs on this node. */
  natCheck: NatCheck;
  /** When this call loaded the programs: why preferred variants did not load. */
  skippedVariants: string[];
  readCounters(hostIfindex: number): Counters;
  /** True when this call loaded and pinned the programs (the first ADD of a build). */
  loaded: boolean;
  /** True when the programs are a newer build's: this build must not change node-wide links. */
  superseded: boolean;
  /** Closes our fds. Pinned maps stay; attached links keep their programs alive. */
  close(): void;
}

export interface NodeProgramsOptions {
  /** The cluster's pod CIDRs (v4 and v6): destinations forwarded by FIB lookup. */
  clusterCidrs: readonly string[];
  /** The variants a first load may choose from, in order (default NAT_CHECKS). */
  natChecks?: readonly NatCheck[];
  /** Whose CIDRs these are: the trie holds every network's (fastpath/cluster.ts). */
  network?: string;
}

/** A pinned program set: `<epoch>-<hash>-<variant>` (bpffs refuses dots in names). */
export interface ProgramSet {
  dir: string;
  epoch: number;
  build: string;
  natCheck: NatCheck;
}

const SET_NAME = /^(\d+)-([0-9a-f]+)-(conntrack|memory)$/;

export function pinnedProgramSets(bpffsRoot: string): ProgramSet[] {
  const root = programsRoot(bpffsRoot);
  if (!fs.existsSync(root)) return [];
  return fs.readdirSync(root).flatMap((name): ProgramSet[] => {
    const m = SET_NAME.exec(name);
    if (!m) return [];
    return [{ dir: path.join(root, name), epoch: Number(m[1]), build: `${m[1]}-${m[2]}`, natCheck: m[3] as NatCheck }];
  });
}

/**
 * Mounts the bpffs at `bpffsRoot` if needed, creates or reuses the pinned maps, writes
 * the cluster CIDRs and loads all programs. On failure everything opened is closed
 * (maps that were pinned stay pinned: they are node state, shared by every pod).
 */
export function loadNodePrograms(bpffsRoot: string, objects: NodeObjects, options: NodeProgramsOptions): NodePrograms {
  ensureBpffs(bpffsRoot);
  // Programs are pinned per build: every ADD after the first opens them (no verifier run
  // per pod), and a new build gets its own directory.
  const build = buildName(objects);
  const sets = pinnedProgramSets(bpffsRoot);
  const newer = sets.filter((s) => s.epoch > objects.epoch && complete(bpffsRoot, s));
  const own = sets.find((s) => s.build === build);
  const opened: { close(): void }[] = [];
  try {
    let node: LoadedNode;
    let loaded = false;
    if (newer.length > 0) {
      const newest = newer.reduce((a, b) => (b.epoch > a.epoch ? b : a));
      node = openPinnedSet(bpffsRoot, newest, opened);
    } else if (own && complete(bpffsRoot, own)) {
      node = openPinnedSet(bpffsRoot, own, opened);
    } else {
      node = loadAndPinNode(bpffsRoot, build, objects, options.natChecks ?? NAT_CHECKS, opened);
      loaded = true;
      removeOlderSets(bpffsRoot, objects.epoch, build);
      removeRetiredMaps(bpffsRoot);
    }
    setNetworkClusterCidrs(bpffsRoot, node.maps.cluster, options);
    return {
      ...node,
      loaded,
      superseded: newer.length > 0,
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

type LoadedNode = Pick<NodePrograms, "maps" | "programs" | "natCheck" | "skippedVariants">;

/** Set by a process that serves many verbs (keepNodeObjectsOpen); the plugin keeps nothing. */
let keptSets: KeptPins<LoadedNode> | undefined;
let keptMaps: KeptPins<NodeMaps> | undefined;

/**
 * From now on, a pinned set and the node's maps stay open across calls in this process,
 * served again while their pins are the ones opened (kept-pins.ts). Returns what closes them.
 */
export function keepNodeObjectsOpen(): { close(): void } {
  keptSets ??= new KeptPins<LoadedNode>();
  keptMaps ??= new KeptPins<NodeMaps>();
  const sets = keptSets;
  const maps = keptMaps;
  return {
    close: () => {
      sets.close();
      maps.close();
    },
  };
}

/** A pinned set with the node's maps: kept ones where this process keeps them. */
function openPinnedSet(bpffsRoot: string, set: ProgramSet, opened: { close(): void }[]): LoadedNode {
  if (!keptSets) return openPinnedNode(bpffsRoot, set, opened);
  const pins = [
    ...NODE_MAP_NAMES.map((name) => mapPin(bpffsRoot, name)),
    ...Object.values(PROGRAM_NAMES).map((name) => path.join(set.dir, name)),
  ];
  return keptSets.use(bpffsRoot, pins, (closables) => openPinnedNode(bpffsRoot, set, closables), opened);
}

/** Every program and map the set needs is pinned. Maps re-created under programs pinned
 * earlier would leave those programs on the old maps: a missing map means loading again. */
function complete(bpffsRoot: string, set: ProgramSet): boolean {
  return (
    Object.values(PROGRAM_NAMES).every((name) => fs.existsSync(path.join(set.dir, name))) &&
    NODE_MAP_NAMES.every((name) => fs.existsSync(mapPin(bpffsRoot, name)))
  );
}

/**
 * The common case: this build's programs are pinned, so they were loaded against the
 * pinned maps after those passed the layout checks. Opens the pins without reading the
 * ELF objects again.
 */
function openPinnedNode(bpffsRoot: string, set: ProgramSet, opened: { close(): void }[]): LoadedNode {
  const byName = new Map<string, BpfMap>();
  for (const name of NODE_MAP_NAMES) {
    const map = BpfMap.openPinned(mapPin(bpffsRoot, name));
    opened.push(map);
    byName.set(name, map);
  }
  const open = (name: string) => {
    const program = new BpfProgram(openPin(path.join(set.dir, name)), name);
    opened.push(program);
    return program;
  };
  return {
    maps: nodeMaps(byName),
    programs: {
      fromPod: open(PROGRAM_NAMES.fromPod),
      sourceCheck: open(PROGRAM_NAMES.sourceCheck),
      hostIn: open(PROGRAM_NAMES.hostIn),
      hostOut: open(PROGRAM_NAMES.hostOut),
      podIngress: open(PROGRAM_NAMES.podIngress),
      podPolicy: open(PROGRAM_NAMES.podPolicy),
      wgIn: open(PROGRAM_NAMES.wgIn),
      wgOut: open(PROGRAM_NAMES.wgOut),
    },
    natCheck: set.natCheck,
    skippedVariants: [],
  };
}

/**
 * First ADD of a build: creates or checks the pinned maps against the objects' layouts,
 * loads the programs of the first variant this kernel accepts (the verifier runs here)
 * and pins them.
 */
function loadAndPinNode(
  bpffsRoot: string,
  build: string,
  objects: NodeObjects,
  natChecks: readonly NatCheck[],
  opened: { close(): void }[],
): LoadedNode {
  // Every struct of both variants laid out as user space writes it, before any map is made.
  for (const v of NAT_CHECKS) {
    checkStructs(objects.variants[v].lxc, NODE_STRUCTS, OBJECT_FILES[v].lxc);
    checkStructs(objects.variants[v].host, NODE_STRUCTS, OBJECT_FILES[v].host);
  }
  const parsed = Object.fromEntries(
    NAT_CHECKS.map((v) => [
      v,
      { lxc: readObject(objects.variants[v].lxc), host: readObject(objects.variants[v].host) },
    ]),
  ) as Record<NatCheck, { lxc: ObjectSpec; host: ObjectSpec }>;
  const byName = new Map<string, BpfMap>();
  const specs = NAT_CHECKS.flatMap((v) => [...parsed[v].lxc.maps, ...parsed[v].host.maps]);
  for (const spec of mergeMapSpecs(specs)) {
    const map = openOrCreatePinnedMap(withInner(spec), mapPin(bpffsRoot, spec.name));
    opened.push(map);
    byName.set(spec.name, map);
  }
  const failures: string[] = [];
  for (const natCheck of natChecks) {
    try {
      const programs = loadVariant(natCheck, parsed[natCheck], byName, opened);
      const dir = path.join(programsRoot(bpffsRoot), `${build}-${natCheck}`);
      for (const [key, name] of Object.entries(PROGRAM_NAMES)) {
        // Replaced: a half-pinned set from a crashed ADD may be there.
        replacePin(programs[key as keyof typeof PROGRAM_NAMES].fd, path.join(dir, name));
      }
      return { maps: nodeMaps(byName), programs, natCheck, skippedVariants: failures };
    } catch (e) {
      // The last variant's failure is the node's: nothing is left to fall back to.
      if (natCheck === natChecks[natChecks.length - 1]) throw e;
      failures.push(`${natCheck} unavailable: ${firstLine(e)}`);
    }
  }
  throw new Error("no NAT check variant to load");
}

function loadVariant(
  natCheck: NatCheck,
  objects: { lxc: ObjectSpec; host: ObjectSpec },
  maps: ReadonlyMap<string, BpfMap>,
  opened: { close(): void }[],
): LoadedNode["programs"] {
  const kernel = natCheck === "conntrack" ? resolveConntrackFunctions() : undefined;
  try {
    const load = (object: ObjectSpec, name: string) => {
      const spec = object.programs.find((p) => p.name === name);
      if (!spec) throw new Error(`program ${name} not found in object`);
      const program = loadProgram(spec, { license: object.license, maps, kernelFunctions: kernel?.functions });
      opened.push(program);
      return program;
    };
    return {
      fromPod: load(objects.lxc, PROGRAM_NAMES.fromPod),
      sourceCheck: load(objects.lxc, PROGRAM_NAMES.sourceCheck),
      hostIn: load(objects.host, PROGRAM_NAMES.hostIn),
      hostOut: load(objects.host, PROGRAM_NAMES.hostOut),
      podIngress: load(objects.lxc, PROGRAM_NAMES.podIngress),
      podPolicy: load(objects.lxc, PROGRAM_NAMES.podPolicy),
      wgIn: load(objects.host, PROGRAM_NAMES.wgIn),
      wgOut: load(objects.host, PROGRAM_NAMES.wgOut),
    };
  } finally {
    kernel?.close();
  }
}

/** The map of maps needs its inner maps' shape, which the ELF definition cannot carry. */
function withInner(spec: MapSpec): MapSpec {
  if (spec.name === MAP_NAMES.flowTables) return { ...spec, inner: DIRECT_TABLE_SPEC };
  if (spec.name === POLICY_MAP_NAMES.ctTables) return { ...spec, inner: POLICY_CT_SPEC };
  return spec;
}

/**
 * Pins of older builds (and of other builds of the same epoch) go once this build's are
 * pinned; newer ones stay. Links attached to old programs keep those programs alive
 * until they are updated or removed.
 */
/**
 * Maps an older build pinned under names this one no longer uses: a map whose value
 * changed its layout takes a new name, since a pinned map cannot be resized and the
 * programs of the older build still attached to its pods keep using the old one (an
 * unpinned map lives while a program holds it). Their pins go when this build's programs
 * are first pinned; nothing of this build opens them.
 */
export const RETIRED_MAP_PINS = [
  // struct nkc_pol_ct grew from 32 to 64 bytes (a flow's packets and bytes): nkc_pol_flowtabs.
  "nkc_pol_ct_tables",
  "nkc_pol_ct_owner",
  "nkc_pol_ct_pool",
];

function removeRetiredMaps(bpffsRoot: string): void {
  for (const name of RETIRED_MAP_PINS) fs.rmSync(mapPin(bpffsRoot, name), { force: true });
}

function removeOlderSets(bpffsRoot: string, epoch: number, keep: string): void {
  for (const set of pinnedProgramSets(bpffsRoot)) {
    if (set.build !== keep && set.epoch <= epoch) fs.rmSync(set.dir, { recursive: true, force: true });
  }
}

/**
 * Has an ADD made the node's maps? The endpoint map is made with the rest, under the
 * node lock; the maps folder alone says nothing (the agent makes Service translation's
 * tables there before any pod).
 */
export const nodeMapsPinned = (bpffsRoot: string): boolean => fs.existsSync(mapPin(bpffsRoot, MAP_NAMES.endpoints));

/** The pinned node maps alone (DEL, CHECK and GC need no programs), kept ones where this
 * process keeps them. Throws if one is not pinned. */
export function openNodeMaps(bpffsRoot: string): NodeMaps & { close(): void } {
  const leases: { close(): void }[] = [];
  const close = () => {
    for (const l of leases.splice(0)) l.close();
  };
  const pins = NODE_MAP_NAMES.map((name) => mapPin(bpffsRoot, name));
  const maps = keptMaps
    ? keptMaps.use(bpffsRoot, pins, (closables) => openMaps(pins, closables), leases)
    : openMaps(pins, leases);
  return { ...maps, close };
}

function openMaps(pins: readonly string[], opened: { close(): void }[]): NodeMaps {
  const byName = new Map<string, BpfMap>();
  try {
    for (const pin of pins) {
      const map = BpfMap.openPinned(pin);
      opened.push(map);
      byName.set(path.basename(pin), map);
    }
    return nodeMaps(byName);
  } catch (e) {
    for (const o of opened.splice(0)) o.close();
    throw e;
  }
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
  const byRole = <R extends string>(names: Record<R, string>) =>
    Object.fromEntries(Object.entries(names).map(([role, name]) => [role, get(name as string)])) as Record<R, BpfMap>;
  const maps = byRole(MAP_NAMES);
  const flows = { tables: maps.flowTables, owners: maps.flowOwner, pool: maps.flowPool };
  return { ...maps, flows, policy: byRole(POLICY_MAP_NAMES) };
}
