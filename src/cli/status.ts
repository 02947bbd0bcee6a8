/**
 * `netkit-cni status`, gathering the facts: what this node's datapath looks like. Kernel
 * features (netkit, tcx, bpffs), the device kind `"datapath": "auto"` picks here, our
 * programs pinned under the bpffs root, which NAT check they use and why, the links
 * running them (the uplink's, each endpoint's), the endpoint count, how full each map
 * is (status-maps.ts), and what is wrong: pins or map entries for devices that
 * no longer exist, links whose device is gone, devices we own that have no programs; and
 * the socket bypass: its links and spliced sockets, or why this kernel cannot run it; how
 * many pods have rate limits and how they are enforced; the devices of another plugin on
 * which the node answers for our pods (a shared subnet). Read-only (the netkit answer is
 * cached under /run like ADD caches it); run in the node's network namespace. Rendering
 * the facts for people is status-format.ts's.
 */

import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import {
  BpfLink,
  BpfProgram,
  buildName,
  conntrackUnavailable,
  DROP_REASONS,
  type Drops,
  endpointDir,
  isBpffs,
  listBypassedSockets,
  MAP_NAMES,
  type MapOccupancy,
  mapPin,
  type NatCheck,
  nodeMapsPinned,
  openPin,
  openSockMaps,
  PROGRAM_NAMES,
  pinnedProgramSets,
  readSockPod,
  SOCK_PER_POD,
  sockPodIfindexes,
  sockProgramsRoot,
  sockRoot,
  uplinkRoot,
} from "../bpf/index";
import { AF_INET, AF_INET6 } from "../cni/address";
import { DEFAULT_AGENT_STATE_DIR } from "../commands/agent-state";
import { embeddedObjects } from "../datapath/assets";
import { isOurProxy } from "../datapath/coexist-plan";
import { isRetiredDevice, parseOwnerAlias } from "../datapath/naming";
import {
  dropsOf,
  endpointMapEntries,
  limitsOf,
  pinnedEndpointDevices,
  podStateHoldersOf,
} from "../datapath/node-state";
import { podFilters } from "../datapath/pod-filters";
import { readIngressShapingOff } from "../datapath/pod-shaping";
import { kernelHasNetkit } from "../datapath/probe";
import { type PacingOff, readPacingOff } from "../datapath/shaping";
import { readSockBypassOff, type SockBypassOff, sockBypassUnavailable } from "../datapath/sockbypass";
import { type Link, listLinks } from "../netlink/links";
import { listProxyNeighbors, type ProxyNeighbor } from "../netlink/neighbors";
import { RtnlSocket } from "../netlink/socket";
import { objGetInfo } from "../sys/bpf-syscall";
import { type EncryptionStatus, encryptionStatus } from "./status-encryption";
import { type FlowTablesStatus, mapsStatus } from "./status-maps";
import { type NetworkPolicyStatus, networkPolicyStatus } from "./status-policy";
import { type ServiceTranslationStatus, serviceTranslationStatus } from "./status-services";

export interface LinkStatus {
  /** Pin path relative to the bpffs root. */
  pin: string;
  linkId: number;
  programId: number;
  /** The device the link is attached to (0: the device is gone, the link is defunct). */
  ifindex: number;
  device: string | undefined;
}

export interface NodeStatus {
  kernel: { release: string; netkit: boolean; tcx: boolean; bpffsMounted: boolean };
  /** What `"datapath": "auto"` picks on this kernel. */
  autoDatapath: "netkit" | "veth";
  bpffsRoot: string;
  /** False when nothing is pinned under the root yet (no pod was ever added with it). */
  initialized: boolean;
  programs: {
    /** This executable's build of the programs (its epoch and a hash of the objects). */
    build: string;
    /** Builds pinned under programs/ (`<build>-<variant>`); normally just one. */
    pinnedBuilds: string[];
    /** The newest pinned build: the one every pod runs once an ADD has switched it. */
    running: string | undefined;
    /** Kernel ids of the running build's programs, by name; absent when not loaded. */
    ids: Record<string, number>;
    /** How the running programs keep NAT'd flows on the stack (bpf/lib/direct.h). */
    natCheck: NatCheck | undefined;
    /** Why this kernel cannot use the conntrack NAT check; absent when it can. */
    conntrackUnavailable: string | undefined;
  };
  /** The per-endpoint direct-flow tables (LRU, one per pod interface), summed, and the fullest. */
  flowTables: FlowTablesStatus;
  /** Each node-wide map the programs use that is pinned: kind, entries, capacity. */
  maps: MapOccupancy[];
  uplinks: LinkStatus[];
  /** The same-node socket bypass ("sockBypass"): its links, the sockets it holds, or why it is off. */
  sockBypass: {
    /** Links pinned under sock/ (the sk_msg verdict, one sock_ops link per watched cgroup). */
    links: { pin: string; linkId: number; programId: number }[];
    /** Sockets in the sockhash now. */
    sockets: number;
    /** Sockets one pod may hold in the sockhash. */
    bound: number;
    /** Over every pod with a recorded namespace: sockets refused because their pod held
     * `bound` already, and sockets on a pod's address made in another namespace. */
    refusedBound: number;
    refusedNetns: number;
    /** Why the kernel cannot run it (checked on the node's cgroup v2 root); absent when it can. */
    unavailable: string | undefined;
    /** Why the last ADD that asked for it on some cgroup could not run it (e.g. not cgroup v2). */
    off: SockBypassOff | undefined;
  };
  /** Service translation ("serviceTranslation"): its links, pods, tables and counters. */
  serviceTranslation: ServiceTranslationStatus;
  /** NetworkPolicy ("networkPolicy"): its pods, their isolation and verdicts; undefined: never enforced here. */
  networkPolicy: NetworkPolicyStatus | undefined;
  /** The agent's WireGuard device and its peers; undefined: no device (no --encryption). */
  encryption: EncryptionStatus | undefined;
  /** Pods with rate limits (the bandwidth capability), by how their egress is enforced
   * (edt: paced by fq on the uplink; police: token bucket) and why an uplink cannot pace,
   * and by how their ingress is (edt: paced by fq on the pod's host device; qdisc: a tbf
   * there; police) and why it is not paced. */
  bandwidth: {
    limited: number;
    modes: Record<string, number>;
    pacingOff: PacingOff[];
    ingressModes: Record<string, number>;
    ingressPacingOff: string | undefined;
  };
  /** What the programs refused, by reason (bpf/lib/frame.h): summed over our pods, and per
   * uplink for frames from the wire that no pod owns. Absent: no maps pinned yet. */
  drops:
    | { pods: Record<keyof Drops, number>; uplinks: { device: string; drops: Record<keyof Drops, number> }[] }
    | undefined;
  /**
   * Devices not ours on which the node answers ARP/ND for our pods (another plugin's
   * bridge on the same subnet, datapath/coexist.ts), with the addresses it answers for.
   */
  sharedSubnets: { device: string; addresses: string[] }[];
  endpoints: {
    /** Host devices carrying our owner alias. */
    devices: number;
    /** Device pairs a deferred DEL retired, waiting for their netns's teardown, the agent or GC. */
    retired: number;
    /** Endpoint pin directories (one per pod interface whose programs are links). */
    pinned: number;
    /** Pod devices whose programs are tc filters (`"podHook": "tc"`, nothing pinned). */
    filtered: number;
    /** Addresses in the endpoint map. */
    addresses: number;
    links: LinkStatus[];
  };
  problems: string[];
}

/** The pinned link at `pinPath`, named in the report by its path below `root`. Its
 * struct bpf_link_info: type, id, prog_id, then (8-aligned) tcx/netkit { ifindex, attach_type }. */
function linkStatus(root: string, pinPath: string, byIndex: Map<number, Link>): LinkStatus {
  const pin = path.relative(root, pinPath);
  const link = BpfLink.openPinned(pinPath);
  try {
    const info = objGetInfo(link.fd, 24);
    const ifindex = info.readUInt32LE(16);
    return {
      pin,
      linkId: info.readUInt32LE(4),
      programId: info.readUInt32LE(8),
      ifindex,
      device: byIndex.get(ifindex)?.name,
    };
  } finally {
    link.close();
  }
}

const listDir = (dir: string) => (fs.existsSync(dir) ? fs.readdirSync(dir).sort() : []);

/** tcx arrived in Linux 6.6; the release string is all a read-only check can go by. */
function kernelHasTcx(release: string): boolean {
  const [major = 0, minor = 0] = release.split(/[.-]/).map((n) => Number.parseInt(n, 10));
  return major > 6 || (major === 6 && minor >= 6);
}

/** The node as the kernel and the bpffs show it now; read-only. */
export async function nodeStatus(bpffsRoot: string, stateDir = DEFAULT_AGENT_STATE_DIR): Promise<NodeStatus> {
  const root = bpffsRoot;
  const { links, netkit, proxies, filtered, pacingOff } = await readKernel();
  const node: NodeView = {
    root,
    byIndex: new Map(links.map((l) => [l.index, l])),
    byName: new Map(links.map((l) => [l.name, l])),
    initialized: nodeMapsPinned(root),
    problems: [],
  };
  const programs = programsStatus(node);
  const uplinks = uplinkLinks(node, Object.values(programs.ids));
  const owned = links.filter((l) => parseOwnerAlias(l.alias) !== undefined);
  const endpoints = endpointsStatus(node, owned, filtered, links.filter(isRetiredDevice).length);
  const { maps, flowTables } = mapsStatus(root, endpoints.hostIfindexes, node.byIndex);
  const uplinkDevices = listDir(uplinkRoot(root)).flatMap((dev) => {
    const link = node.byName.get(dev);
    return link ? [{ device: dev, ifindex: link.index }] : [];
  });
  const bpffsMounted = isBpffs("/sys/fs/bpf") || isBpffs(root);
  if (!bpffsMounted) node.problems.push("no bpffs mounted at /sys/fs/bpf (ADD mounts one)");
  const release = os.release();
  return {
    kernel: { release, netkit, tcx: kernelHasTcx(release), bpffsMounted },
    autoDatapath: netkit ? "netkit" : "veth",
    bpffsRoot: root,
    initialized: node.initialized,
    programs,
    flowTables,
    maps,
    uplinks,
    sockBypass: sockBypassStatus(root),
    serviceTranslation: serviceTranslationStatus(root),
    networkPolicy: networkPolicyStatus(root, stateDir),
    encryption: await encryptionStatus(node.byName),
    bandwidth: bandwidthStatus(root, owned, pacingOff),
    drops: refusals(
      root,
      owned.map((l) => l.index),
      uplinkDevices,
    ),
    sharedSubnets: sharedSubnets(proxies, node.byIndex),
    endpoints: endpoints.status,
    problems: node.problems,
  };
}

/** What every part of the report reads: the root, the devices, and the problems found. */
interface NodeView {
  root: string;
  byIndex: Map<number, Link>;
  byName: Map<string, Link>;
  /** Maps are pinned: some ADD ran here. */
  initialized: boolean;
  problems: string[];
}

/** The node's devices, whether the kernel has netkit, the proxy entries on its devices, and
 * the notes of why its uplinks do not pace (named by the namespace's cookie: a socket's). */
async function readKernel(): Promise<{
  links: Link[];
  netkit: boolean;
  proxies: ProxyNeighbor[];
  filtered: Set<number>;
  pacingOff: PacingOff[];
}> {
  const host = RtnlSocket.open();
  try {
    const links = await listLinks(host);
    // Pods whose program runs as a tc filter (`"podHook": "tc"`): they have no pins.
    const filtered = new Set<number>();
    for (const l of links.filter((link) => parseOwnerAlias(link.alias) !== undefined)) {
      if ((await podFilters(host, l.index)).fromPod) filtered.add(l.index);
    }
    return {
      links,
      netkit: await kernelHasNetkit(host),
      proxies: [...(await listProxyNeighbors(host, AF_INET)), ...(await listProxyNeighbors(host, AF_INET6))],
      filtered,
      pacingOff: readPacingOff(host),
    };
  } finally {
    host.close();
  }
}

/** This build, the pinned builds, the running one's program ids and its NAT check. */
function programsStatus(node: NodeView): NodeStatus["programs"] {
  const build = buildName(embeddedObjects());
  const sets = pinnedProgramSets(node.root);
  const running = sets.reduce<(typeof sets)[number] | undefined>(
    (a, b) => (!a || b.epoch > a.epoch ? b : a),
    undefined,
  );
  if (running && running.build !== build) {
    node.problems.push(`the running programs are build ${running.build}, not this executable's ${build}`);
  }
  const ids: Record<string, number> = {};
  let jited: boolean | undefined;
  for (const name of Object.values(PROGRAM_NAMES)) {
    const pin = running && path.join(running.dir, name);
    if (!pin || !fs.existsSync(pin)) continue;
    const program = new BpfProgram(openPin(pin), name);
    try {
      ids[name] = program.id();
      jited = program.jited();
    } finally {
      program.close();
    }
  }
  if (node.initialized && Object.keys(ids).length === 0) {
    node.problems.push(`this build's programs (${build}) are not loaded yet; the next ADD loads them`);
  }
  return {
    build,
    pinnedBuilds: sets.map((s) => path.basename(s.dir)).sort(),
    running: running?.build,
    ids,
    natCheck: running?.natCheck,
    // Informational: "natCheck": "memory" in a config picks the memory check on purpose.
    conntrackUnavailable: conntrackUnavailable(jited),
  };
}

/** The uplinks' pinned links, and what is wrong with them (`running`: the programs' ids). */
function uplinkLinks(node: NodeView, running: number[]): LinkStatus[] {
  const uplinks: LinkStatus[] = [];
  const root = uplinkRoot(node.root);
  for (const dev of listDir(root)) {
    for (const dir of listDir(path.join(root, dev))) {
      const st = linkStatus(node.root, path.join(root, dev, dir), node.byIndex);
      uplinks.push(st);
      const problem = (what: string) => node.problems.push(`uplink ${dev}: ${what}`);
      if (!node.byName.has(dev)) problem(`pinned ${dir} link, but no device ${dev} exists`);
      else if (st.ifindex === 0) problem(`${dir} link is defunct (its device went away)`);
      else if (st.device !== dev) problem(`${dir} link is attached to ${st.device ?? st.ifindex}`);
      if (running.length > 0 && !running.includes(st.programId)) {
        problem(`${dir} runs program ${st.programId}, not this build's (the next ADD switches it)`);
      }
    }
  }
  return uplinks;
}

/**
 * The pods' side: devices we own, their pins and links, the endpoint map, and the state
 * left of devices that are gone (pins, entries, per-pod state: DEL or GC removes it).
 */
function endpointsStatus(
  node: NodeView,
  owned: Link[],
  filtered: ReadonlySet<number>,
  retired: number,
): { status: NodeStatus["endpoints"]; hostIfindexes: number[] } {
  const { root, byIndex, byName, problems } = node;
  const pinned = pinnedEndpointDevices(root).sort();
  const links: LinkStatus[] = [];
  for (const dev of pinned) {
    if (!byName.has(dev)) problems.push(`endpoint pins for ${dev}, which no longer exists (DEL or GC removes them)`);
    for (const pin of listDir(endpointDir(root, dev))) {
      const st = linkStatus(root, path.join(endpointDir(root, dev), pin), byIndex);
      links.push(st);
      if (byName.has(dev) && st.ifindex === 0) problems.push(`endpoint ${dev}: ${pin} link is defunct`);
    }
  }
  for (const l of owned) {
    if (node.initialized && !pinned.includes(l.name) && !filtered.has(l.index)) {
      problems.push(`device ${l.name} (${l.alias}) has no programs pinned or as tc filters (a failed ADD)`);
    }
  }
  const entries = endpointMapEntries(root);
  for (const [ip, e] of entries) {
    if (!byIndex.has(e.hostIfindex)) {
      problems.push(`endpoint map: ${ip} points at ifindex ${e.hostIfindex}, which is gone`);
    }
  }
  for (const [ifindex, held] of podStateHoldersOf(root)) {
    if (!byIndex.has(ifindex)) problems.push(`pod state of ifindex ${ifindex}, which is gone: ${held.join(", ")}`);
  }
  return {
    status: {
      devices: owned.length,
      retired,
      pinned: pinned.length,
      filtered: owned.filter((l) => filtered.has(l.index)).length,
      addresses: entries.size,
      links,
    },
    hostIfindexes: [...entries.values()].map((e) => e.hostIfindex),
  };
}

/** How many of our pods have rate limits, by how each direction is enforced. */
function bandwidthStatus(root: string, owned: Link[], pacingOff: PacingOff[]): NodeStatus["bandwidth"] {
  const bandwidth = {
    limited: 0,
    modes: {} as Record<string, number>,
    pacingOff,
    ingressModes: {} as Record<string, number>,
    ingressPacingOff: readIngressShapingOff(),
  };
  const count = (modes: Record<string, number>, mode: string | undefined) => {
    modes[mode ?? "unknown"] = (modes[mode ?? "unknown"] ?? 0) + 1;
  };
  for (const l of owned) {
    const limits = limitsOf(root, l.index);
    if (!limits) continue;
    bandwidth.limited += 1;
    if (limits.egress) count(bandwidth.modes, limits.mode);
    if (limits.ingress) count(bandwidth.ingressModes, limits.ingressMode);
  }
  return bandwidth;
}

/** The bypass's links, the sockets it splices, what it refused, and why it is off. */
function sockBypassStatus(root: string): NodeStatus["sockBypass"] {
  const links = listDir(sockRoot(root))
    .map((name) => path.join(sockRoot(root), name))
    .filter((pin) => pin !== sockProgramsRoot(root))
    .map((pin) => {
      const link = BpfLink.openPinned(pin);
      try {
        return { pin: path.relative(root, pin), linkId: link.id(), programId: link.programId() };
      } finally {
        link.close();
      }
    });
  const sockMaps = openSockMaps(root);
  let sockets = 0;
  let refusedBound = 0;
  let refusedNetns = 0;
  try {
    if (sockMaps) {
      sockets = listBypassedSockets(sockMaps).length;
      for (const ifindex of sockPodIfindexes(sockMaps.pods)) {
        const pod = readSockPod(sockMaps.pods, ifindex);
        refusedBound += Number(pod?.refusedBound ?? 0n);
        refusedNetns += Number(pod?.refusedNetns ?? 0n);
      }
    }
  } finally {
    sockMaps?.close();
  }
  return {
    links,
    sockets,
    bound: SOCK_PER_POD,
    refusedBound,
    refusedNetns,
    unavailable: sockBypassUnavailable(undefined),
    off: readSockBypassOff(root),
  };
}

/** Refusals by reason: the pods' summed, each uplink's own; undefined before the first ADD
 * pinned the maps. */
function refusals(root: string, pods: number[], uplinks: { device: string; ifindex: number }[]): NodeStatus["drops"] {
  if (!fs.existsSync(mapPin(root, MAP_NAMES.drops))) return undefined;
  const counts = (ifindexes: number[]) => {
    const sum = Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<keyof Drops, number>;
    for (const ifindex of ifindexes) {
      const drops = dropsOf(root, ifindex);
      for (const r of DROP_REASONS) sum[r] += Number(drops?.[r] ?? 0n);
    }
    return sum;
  };
  return {
    pods: counts(pods),
    uplinks: uplinks.map(({ device, ifindex }) => ({ device, drops: counts([ifindex]) })),
  };
}

function sharedSubnets(proxies: ProxyNeighbor[], byIndex: Map<number, Link>): NodeStatus["sharedSubnets"] {
  const byDevice = new Map<string, string[]>();
  for (const p of proxies.filter(isOurProxy)) {
    const device = byIndex.get(p.ifindex)?.name ?? `ifindex ${p.ifindex}`;
    byDevice.set(device, [...(byDevice.get(device) ?? []), p.address]);
  }
  return [...byDevice].map(([device, addresses]) => ({ device, addresses }));
}
