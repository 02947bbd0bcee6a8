/**
 * A pod's part of the eBPF fast path, as the verbs use it: ADD's attachPod (its state in
 * every map that holds one, its links pinned under `<bpffsRoot>/endpoints/<host device>/`,
 * its addresses in the endpoint map), DEL's removeEndpoint, GC's pruneDeadEndpoints. Each
 * runs under the node lock (node-datapath.ts), so that pruning dead entries cannot remove
 * an entry an ADD has just written: attachPod in the ADD's own hold of it, after
 * ensureNodeDatapath made the node's part; the removals take it themselves.
 *
 * The pin layout: bpf/layout.ts. Reading that state without changing it: node-state.ts.
 */

import * as fs from "node:fs";
import {
  attachNetkit,
  attachTcx,
  type BpfLink,
  type BpfProgram,
  type EgressEnforcement,
  EndpointMap,
  endpointDir,
  endpointPin,
  FROM_POD_PIN,
  forgetPodState,
  type GonePod,
  INGRESS_LIMIT_PIN,
  type IngressEnforcement,
  makePodState,
  type NodePrograms,
  nodeMapsPinned,
  POLICY_PIN,
  type PodStateMaps,
  podStateHolders,
  withPodStateMaps,
} from "../bpf/index";
import { hostPrefix } from "../cni/address";
import type { Bandwidth } from "../cni/bandwidth";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import type { RtnlSocket } from "../netlink/socket";
import { ensureClsact } from "../netlink/tc-filter";
import { failpoint } from "../sys/failpoints";
import { type FastPathSettings, withNodeLock } from "./node-datapath";
import { withPodState } from "./node-state";
import { attachPodFilter } from "./pod-filters";
import type { DeviceKind } from "./types";

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

/**
 * The pod's part, under the node lock with the programs ensureNodeDatapath gave: its
 * state in every map that holds one (bpf/pod-state.ts: a fresh flow table, its rate
 * limits, its namespace for the bypass and for Service translation), then its one link
 * (what the pod sends; each link costs an RCU grace period under RTNL on attach and again
 * on delete) running the fast path's program, or with `"fastPath": false` the source
 * check, NetworkPolicy's where the network enforces it, the ingress limit's for a pod
 * with one; a veth pod of a `"podHook": "tc"` network gets the same programs as tc
 * filters, which wait for no grace period. Then, last, its addresses: everything else
 * must be in place before traffic is steered here.
 * The caller registers `removeEndpoint` as the undo before calling.
 */
export async function attachPod(
  host: RtnlSocket,
  node: NodePrograms,
  settings: Pick<
    FastPathSettings,
    "bpffsRoot" | "enabled" | "sockBypass" | "serviceTranslation" | "networkPolicy" | "podHook"
  >,
  ep: FastPathEndpoint,
): Promise<void> {
  const root = settings.bpffsRoot;
  const program = settings.enabled ? node.programs.fromPod : node.programs.sourceCheck;
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
  const limited = ep.bandwidth?.ingress !== undefined && ingress.mode !== "qdisc";
  if (ep.kind === "veth" && settings.podHook === "tc") {
    await attachPodFilters(host, node, ep, { program, policy: settings.networkPolicy === true, limited });
  } else {
    attachPodLinks(root, node, ep, { program, policy: settings.networkPolicy === true, limited, ingress });
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

/** Which of the pod's programs it gets: its own (the fast path's or the source check),
 * NetworkPolicy's, and the ingress limit's. */
interface PodPrograms {
  program: BpfProgram;
  policy: boolean;
  limited: boolean;
}

/** The pod's programs on tcx (veth) or netkit's hooks, each a link pinned under its
 * endpoint directory. */
function attachPodLinks(
  root: string,
  node: NodePrograms,
  ep: FastPathEndpoint,
  { program, policy, limited, ingress }: PodPrograms & { ingress: IngressEnforcement },
): void {
  const link =
    ep.kind === "netkit"
      ? attachNetkit(program, ep.hostIfindex, "peer")
      : attachTcx(program, ep.hostIfindex, "ingress");
  pinAndClose(link, endpointPin(root, ep.hostDevice, FROM_POD_PIN));
  // NetworkPolicy on what the stack delivers to the pod (the other ways in judge before
  // their redirects), ahead of the ingress limit's program: what it drops is not charged.
  if (policy) {
    const judge =
      ep.kind === "netkit"
        ? attachNetkit(node.programs.podPolicy, ep.hostIfindex, "primary")
        : attachTcx(node.programs.podPolicy, ep.hostIfindex, "egress");
    pinAndClose(judge, endpointPin(root, ep.hostDevice, POLICY_PIN));
  }
  // The ingress limit's program on the host device's transmit: before the qdisc when it
  // paces (netkit's primary hook runs after it), anywhere when it polices; a tbf alone
  // needs none.
  if (limited) {
    const limit =
      ep.kind === "netkit" && ingress.mode === "police"
        ? attachNetkit(node.programs.podIngress, ep.hostIfindex, "primary")
        : attachTcx(node.programs.podIngress, ep.hostIfindex, "egress");
    pinAndClose(limit, endpointPin(root, ep.hostDevice, INGRESS_LIMIT_PIN));
  }
}

/** The same programs as filters on the veth's clsact hook (pod-filters.ts): nothing
 * pinned, no grace period waited for; clsact's egress runs before the device's qdisc, as
 * a paced ingress limit needs. The device's deletion takes them with it. */
async function attachPodFilters(
  host: RtnlSocket,
  node: NodePrograms,
  ep: FastPathEndpoint,
  { program, policy, limited }: PodPrograms,
): Promise<void> {
  await ensureClsact(host, ep.hostIfindex);
  await attachPodFilter(host, ep.hostIfindex, "fromPod", program);
  if (policy) await attachPodFilter(host, ep.hostIfindex, "policy", node.programs.podPolicy);
  if (limited) await attachPodFilter(host, ep.hostIfindex, "ingressLimit", node.programs.podIngress);
}

function pinAndClose(link: BpfLink, pin: string): void {
  try {
    link.pin(pin);
  } finally {
    link.close();
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
  withNodeLock(root, () =>
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
  return withNodeLock(root, () => withPodState(root, (maps) => removeDead(maps, dead))) ?? [];
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
