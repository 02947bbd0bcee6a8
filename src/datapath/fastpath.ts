/**
 * The eBPF fast path of one node, as the verbs use it. Node-wide state (pinned maps, the
 * newest build's programs, the uplink's ingress link and, for NetworkPolicy, its egress
 * link) is made once and reused; an uplink
 * link running an older program is switched with BPF_LINK_UPDATE, never detached. Per
 * endpoint: its own direct-flow table, its addresses in the endpoint map and its one link
 * pinned under `<bpffsRoot>/endpoints/<host device>/`.
 *
 * Every change to node-wide state and to the endpoint map happens under the node lock, so
 * that ADDs on a fresh node agree, a build never swaps programs under another's feet, and
 * pruning dead entries cannot remove an entry an ADD has just written.
 *
 * The pin layout: bpf/layout.ts. Reading that state without changing it: node-state.ts;
 * this build's objects: assets.ts.
 *
 * Longer than the ~350 lines other modules keep to: it is the verbs' one door to the
 * node's eBPF state, so that every change to it can be seen to happen under the lock.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import {
  attachNetkit,
  attachTcx,
  BpfLink,
  type BpfProgram,
  type EgressEnforcement,
  EndpointMap,
  endpointDir,
  endpointPin,
  ensureBpffsRoot,
  FROM_POD_PIN,
  forgetPodState,
  type GonePod,
  INGRESS_LIMIT_PIN,
  type IngressEnforcement,
  loadNodePrograms,
  makePodState,
  type NatCheck,
  type NodePrograms,
  nodeMapsPinned,
  POLICY_PIN,
  type PodStateMaps,
  PROGRAM_NAMES,
  podStateHolders,
  programName,
  uplinkPin,
  withPodStateMaps,
} from "../bpf/index";
import { hostPrefix } from "../cni/address";
import type { Bandwidth } from "../cni/bandwidth";
import type { NatCheckChoice } from "../cni/config";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import { failpoint } from "../sys/failpoints";
import { LockTimeoutError, withFileLock } from "../sys/file-lock";
import { mkdirs } from "../sys/mkdirs";
import { sha256Hex } from "../sys/sha256";
import { embeddedObjects, embeddedSockObject, embeddedSvcObject } from "./assets";
import { pinnedEndpointDevices, withPodState } from "./node-state";
import { ensureServiceTranslation } from "./service-translation";
import { clearSockBypassOff, ensureSockBypass, noteSockBypassOff } from "./sockbypass";
import type { DeviceKind } from "./types";

const LOCK_DIR = "/run/netkit-cni";
const NODE_LOCK_TIMEOUT_MS = 10_000;

export interface FastPathSettings {
  /** False: the pod gets only the source check (no redirects, no uplink program). */
  enabled: boolean;
  bpffsRoot: string;
  network: string;
  clusterCidrs: string[];
  natCheck: NatCheckChoice;
  /** Same-node socket bypass (sockbypass.ts); absent = off. */
  sockBypass?: boolean;
  sockBypassCgroup?: string | undefined;
  /** Service translation (service-translation.ts); absent = off. */
  serviceTranslation?: boolean;
  serviceTranslationCgroup?: string | undefined;
  /** NetworkPolicy (bpf/lib/policy.h); absent = off. */
  networkPolicy?: boolean;
}

export interface Uplink {
  name: string;
  index: number;
  mtu?: number;
  gsoMaxSize?: number;
  groMaxSize?: number;
  /** Transmit queues: pacing puts an fq on each under mq when there are several. */
  txQueues?: number;
  /** The node's WireGuard device, when the agent made one (uplink.ts). */
  wireguard?: { name: string; index: number; ready: boolean };
}

/** The endpoint as the fast path sees it. */
export interface FastPathEndpoint {
  hostDevice: string;
  hostIfindex: number;
  kind: DeviceKind;
  /** The pod's device speaks ARP/ND (veth, netkit L2); false: its ARP is refused. */
  resolvesNeighbours: boolean;
  addresses: string[];
  /** The pod's rate limits (cni/bandwidth.ts); absent: none. */
  bandwidth?: Bandwidth | undefined;
  /** How its egress limit is enforced (datapath/shaping.ts); absent: policed. */
  egress?: EgressEnforcement | undefined;
  /** How its ingress limit is enforced (datapath/pod-shaping.ts); absent: policed. */
  ingress?: IngressEnforcement | undefined;
  /** Its network namespace's cookie (SO_NETNS_COOKIE): the socket bypass admits only
   * sockets of that namespace, and Service translation acts only for them. Absent: none
   * of its sockets is spliced or translated. */
  netnsCookie?: bigint | undefined;
  /** NetworkPolicy: the pod's key, and whether it waits for the agent's judgment
   * (commands/add.ts); absent: its network does not enforce policy, or it has no name. */
  policy?: { key: bigint; pending: boolean } | undefined;
}

/** One lock per bpffs root, outside the bpffs (which holds no regular files). */
export const nodeLockPath = (root: string) => path.join(LOCK_DIR, `node-${sha256Hex([root], 12)}.lock`);

function underNodeLock<T>(root: string, fn: () => T): T {
  mkdirs(LOCK_DIR, 0o700);
  try {
    return withFileLock(nodeLockPath(root), NODE_LOCK_TIMEOUT_MS, fn);
  } catch (e) {
    if (e instanceof LockTimeoutError) {
      throw new CniError(ErrorCode.TryAgainLater, `node datapath is busy: ${e.message}; try again later`);
    }
    throw e;
  }
}

/**
 * Gives the endpoint its fast path, opening (or creating) the node's datapath first: maps,
 * programs, the uplink's link. The ADD that loads a new build also moves every existing
 * pod onto it, so one node never mixes two builds' ideas of which flows are direct. A
 * superseded build (an older executable still running during an upgrade) attaches its
 * pod to the newer build's programs and leaves node-wide links alone.
 * The caller registers `removeEndpoint` as the undo before calling.
 */
export function attachEndpoint(settings: FastPathSettings, uplink: Uplink | undefined, ep: FastPathEndpoint): void {
  const root = settings.bpffsRoot;
  underNodeLock(root, () => {
    ensureBpffsRoot(root);
    const natChecks = settings.natCheck === "auto" ? undefined : [settings.natCheck];
    const node = loadNodePrograms(root, embeddedObjects(), { ...settings, natChecks });
    try {
      if (node.loaded) {
        log.info(`datapath: loaded programs, NAT check "${node.natCheck}"`);
        for (const why of node.skippedVariants) log.info(`datapath: ${why}`);
      } else if (natChecks && !natChecks.includes(node.natCheck)) {
        log.warn(`datapath: "natCheck": "${settings.natCheck}" asked, but the node runs "${node.natCheck}"`);
      }
      if (!node.superseded) {
        // A network without the fast path leaves the uplink to those that have it.
        if (uplink && settings.enabled) {
          attachUplink(root, uplink, "ingress", node.programs.hostIn);
          // The agent's WireGuard device (--encryption): decrypted traffic takes the same way in.
          if (uplink.wireguard) attachUplink(root, uplink.wireguard, "ingress", node.programs.wgIn);
        }
        // NetworkPolicy's last look at a pod's packet leaving the node (a Service flow
        // the DNAT sent to another node's backend), with or without the fast path; with
        // encryption such a packet leaves through the WireGuard device, not the uplink.
        if (uplink && settings.networkPolicy) {
          attachUplink(root, uplink, "egress", node.programs.hostOut);
          if (uplink.wireguard) attachUplink(root, uplink.wireguard, "egress", node.programs.wgOut);
        }
        if (node.loaded) switchEndpoints(root, node);
      }
      if (settings.sockBypass) {
        try {
          ensureSockBypass(root, embeddedSockObject(), node.maps.endpoints, settings.sockBypassCgroup);
          clearSockBypassOff(root, settings.sockBypassCgroup);
        } catch (e) {
          // Optional: the pod works without it, on the packet path.
          const reason = (e as Error).message.split("\n")[0] ?? "unknown";
          log.warn(`socket bypass off: ${reason}`);
          noteSockBypassOff(root, { cgroup: settings.sockBypassCgroup, reason });
        }
      }
      if (settings.serviceTranslation) {
        ensureServiceTranslation(root, embeddedSvcObject(), settings.serviceTranslationCgroup);
      }
      const program = settings.enabled ? node.programs.fromPod : node.programs.sourceCheck;
      attachPod(root, node, ep, program, settings);
    } finally {
      node.close();
    }
  });
}

/**
 * The pod's part: its state in every map that holds one (bpf/pod-state.ts: a fresh flow
 * table, its rate limits, its namespace for the bypass and for Service translation), then
 * its one link (what the pod sends; each link costs an RCU grace period under RTNL on
 * attach and again on delete) running `program`, a second one only for a pod with an
 * ingress limit, then, last, its addresses: everything else must be in place before
 * traffic is steered here.
 */
function attachPod(
  root: string,
  node: NodePrograms,
  ep: FastPathEndpoint,
  program: BpfProgram,
  settings: Pick<FastPathSettings, "sockBypass" | "serviceTranslation" | "networkPolicy">,
): void {
  if (settings.serviceTranslation && ep.netnsCookie === undefined) {
    throw new CniError(
      ErrorCode.PluginNotAvailable,
      `"serviceTranslation" cannot run on this node: the kernel does not say a namespace's cookie (SO_NETNS_COOKIE, Linux 5.14)`,
    );
  }
  // The socket bypass splices TCP past every hook that enforces rate limits: a limited
  // pod's sockets stay on the packet path.
  const bypass = settings.sockBypass === true && !ep.bandwidth;
  const ingress = ep.ingress ?? { mode: "police" };
  withPodStateMaps(root, node.maps, (maps) =>
    makePodState(maps, {
      hostIfindex: ep.hostIfindex,
      bandwidth: ep.bandwidth,
      egress: ep.egress,
      ingress,
      netnsCookie: ep.netnsCookie,
      sockBypass: bypass,
      serviceTranslation: settings.serviceTranslation,
      policy: ep.policy,
    }),
  );
  // Pins left by an ADD that was killed before it could clean up name a dead device.
  unpinEndpoint(root, ep.hostDevice);
  const link =
    ep.kind === "netkit"
      ? attachNetkit(program, ep.hostIfindex, "peer")
      : attachTcx(program, ep.hostIfindex, "ingress");
  pinAndClose(link, endpointPin(root, ep.hostDevice, FROM_POD_PIN));
  // NetworkPolicy on what the stack delivers to the pod (the other ways in judge before
  // their redirects), ahead of the ingress limit's program: what it drops is not charged.
  if (settings.networkPolicy) {
    const judge =
      ep.kind === "netkit"
        ? attachNetkit(node.programs.podPolicy, ep.hostIfindex, "primary")
        : attachTcx(node.programs.podPolicy, ep.hostIfindex, "egress");
    pinAndClose(judge, endpointPin(root, ep.hostDevice, POLICY_PIN));
  }
  // The ingress limit's program on the host device's transmit: before the qdisc when it
  // paces (netkit's primary hook runs after it), anywhere when it polices; a tbf alone
  // needs none.
  if (ep.bandwidth?.ingress && ingress.mode !== "qdisc") {
    const limit =
      ep.kind === "netkit" && ingress.mode === "police"
        ? attachNetkit(node.programs.podIngress, ep.hostIfindex, "primary")
        : attachTcx(node.programs.podIngress, ep.hostIfindex, "egress");
    pinAndClose(limit, endpointPin(root, ep.hostDevice, INGRESS_LIMIT_PIN));
  }
  for (const cidr of ep.addresses) {
    node.endpoints.upsert(hostPrefix(cidr).address, {
      hostIfindex: ep.hostIfindex,
      datapath: ep.kind,
      sockBypass: bypass,
      noArp: !ep.resolvesNeighbours,
    });
  }
}

function pinAndClose(link: BpfLink, pin: string): void {
  try {
    link.pin(pin);
  } finally {
    link.close();
  }
}

/** Attaches `program` to the uplink, or switches an existing link to it atomically. */
export function attachUplink(root: string, uplink: Uplink, direction: "ingress" | "egress", program: BpfProgram): void {
  const pin = uplinkPin(root, uplink.name, direction);
  if (fs.existsSync(pin)) {
    const link = BpfLink.openPinned(pin);
    try {
      if (link.programId() === program.id()) return;
      link.update(program);
      log.info(`uplink ${uplink.name} ${direction}: switched to program ${program.id()}`);
      return;
    } catch (e) {
      // A link whose device went away (renamed NIC, new ifindex) cannot be updated: re-create.
      log.warn(`uplink ${uplink.name} ${direction}: pinned link unusable (${(e as Error).message}); re-attaching`);
    } finally {
      link.close();
    }
    fs.unlinkSync(pin);
  }
  const link = attachTcx(program, uplink.index, direction);
  try {
    link.pin(pin);
  } finally {
    link.close();
  }
  log.info(`uplink ${uplink.name} ${direction}: attached ${program.name}`);
}

/**
 * Points every pod's pinned link at this build's program of the same kind (the fast
 * path's, the source check's, the ingress limit's) with BPF_LINK_UPDATE: the program is
 * replaced in place, with no moment without one.
 */
export function switchEndpoints(root: string, node: Pick<NodePrograms, "programs">): void {
  const { fromPod, sourceCheck, podIngress, podPolicy } = node.programs;
  const ours = new Set([fromPod.id(), sourceCheck.id(), podIngress.id(), podPolicy.id()]);
  const byKind = new Map([
    [PROGRAM_NAMES.podIngress, podIngress],
    [PROGRAM_NAMES.sourceCheck, sourceCheck],
    [PROGRAM_NAMES.podPolicy, podPolicy],
  ]);
  for (const dev of pinnedEndpointDevices(root)) {
    for (const name of [FROM_POD_PIN, INGRESS_LIMIT_PIN, POLICY_PIN]) {
      const pin = endpointPin(root, dev, name);
      if (!fs.existsSync(pin)) continue;
      const link = BpfLink.openPinned(pin);
      try {
        const running = link.programId();
        if (ours.has(running)) continue;
        const kind = programName(running);
        link.update(byKind.get(kind as never) ?? fromPod);
      } catch (e) {
        // A link whose device is gone is GC's to remove; the other pods still move.
        log.warn(`endpoint ${dev}: cannot switch ${name} to this build's program: ${(e as Error).message}`);
      } finally {
        link.close();
      }
    }
  }
}

/**
 * Removes an endpoint's pins, map entries, counters and flow table. Safe to repeat and
 * safe when the node has no fast path state at all. The common case (DEL with prevResult,
 * device still there) deletes by address without scanning the map. Without addresses the
 * map is scanned for the device's ifindex. With the device already gone (its netns
 * vanished) its ifindex is unknown, so every entry whose device no longer exists is
 * pruned: a gone device's ifindex will be handed to another device. `liveIfindexes` is
 * asked for only then, after the map was listed (see pruneDeadEndpoints).
 */
export async function removeEndpoint(
  root: string,
  hostDevice: string,
  gone: { hostIfindex: number | undefined; addresses: string[] },
  liveIfindexes: () => Promise<ReadonlySet<number>>,
): Promise<void> {
  unpinEndpoint(root, hostDevice);
  if (!nodeMapsPinned(root)) return;
  const dead = gone.hostIfindex === undefined ? await deadEndpointState(root, liveIfindexes) : undefined;
  underNodeLock(root, () =>
    withPodState(root, (maps) => {
      const { hostIfindex } = gone;
      if (hostIfindex !== undefined) {
        const endpoints = new EndpointMap(maps.node.endpoints);
        const ips = gone.addresses.map((cidr) => hostPrefix(cidr).address);
        const owned = ips.length > 0 ? ips : [...endpoints.list()].filter(([, e]) => e.hostIfindex === hostIfindex);
        const removed = new Set<string>();
        for (const entry of owned) {
          const ip = typeof entry === "string" ? entry : entry[0];
          // Another pod may hold the address by now; only our device's entry goes.
          if (endpoints.get(ip)?.hostIfindex === hostIfindex && endpoints.delete(ip)) removed.add(ip);
        }
        // After the entries: from here on nothing new is steered to the pod.
        forgetPods(maps, [{ hostIfindex, addresses: removed }]);
      }
      if (dead) removeDead(maps, dead);
    }),
  );
}

/** Forgets the pods' state in every map that holds some (bpf/pod-state.ts), in its order. */
function forgetPods(maps: PodStateMaps, pods: GonePod[]): void {
  for (const note of forgetPodState(maps, pods)) log.info(note);
}

/** Removes an endpoint's link pins; with them go the links (and so the attachments). */
export function unpinEndpoint(root: string, hostDevice: string): void {
  fs.rmSync(endpointDir(root, hostDevice), { recursive: true, force: true });
}

/** What a prune found dead: map entries and ifindex-keyed state of devices that are gone. */
interface DeadState {
  entries: [string, number][];
  ifindexes: number[];
}

/**
 * GC's half: drops endpoint entries and every other piece of state of devices that no
 * longer exist. The map is listed before the live devices are: an entry an ADD writes
 * after the listing is not looked at, and one it wrote before belongs to a device that
 * the later device list includes. Deletion happens under the node lock and only if the
 * entry still names the dead device.
 */
export async function pruneDeadEndpoints(
  root: string,
  liveIfindexes: () => Promise<ReadonlySet<number>>,
): Promise<string[]> {
  if (!nodeMapsPinned(root)) return [];
  const dead = await deadEndpointState(root, liveIfindexes);
  return underNodeLock(root, () => withPodState(root, (maps) => removeDead(maps, dead))) ?? [];
}

async function deadEndpointState(root: string, liveIfindexes: () => Promise<ReadonlySet<number>>): Promise<DeadState> {
  const listed = withPodState(root, (maps) => ({
    entries: [...new EndpointMap(maps.node.endpoints).list()].map(([ip, e]): [string, number] => [ip, e.hostIfindex]),
    ifindexes: [...podStateHolders(maps).keys()],
  })) ?? { entries: [], ifindexes: [] };
  // An ADD may create its device and write its entries right here: its entries are not in
  // `listed`, so they are safe however late its device shows in `live`.
  await failpoint("prune-listed");
  const live = await liveIfindexes();
  return {
    entries: listed.entries.filter(([, ifindex]) => !live.has(ifindex)),
    ifindexes: listed.ifindexes.filter((ifindex) => !live.has(ifindex)),
  };
}

function removeDead(maps: PodStateMaps, dead: DeadState): string[] {
  const endpoints = new EndpointMap(maps.node.endpoints);
  const pods = new Map(dead.ifindexes.map((hostIfindex) => [hostIfindex, new Set<string>()]));
  for (const [ip, ifindex] of dead.entries) {
    if (endpoints.get(ip)?.hostIfindex !== ifindex || !endpoints.delete(ip)) continue;
    pods.set(ifindex, (pods.get(ifindex) ?? new Set()).add(ip));
  }
  forgetPods(
    maps,
    [...pods].map(([hostIfindex, addresses]) => ({ hostIfindex, addresses })),
  );
  return [...pods.values()].flatMap((addresses) => [...addresses]);
}

export type { NatCheck };
