/**
 * The pods this node's plugin wired, one row each, read back from the devices and the
 * pinned maps: container, interface, host device and its kind, addresses, the fast-path
 * counters that say which path their packets took and why refused ones were refused, and
 * how full its direct-flow table is (entries held, and what the LRU evicted), how many of
 * its sockets the socket bypass splices now and how many it refused (over the bound one
 * pod may hold; a socket on the pod's address made in another network namespace), its
 * own Service translation state (the Services its affinity holds, of the 32 a pod may;
 * sockets left to the stack without socket state; what it gave up of its own to make
 * room), its rate limits (how they are enforced, the rates, what they dropped) and its
 * NetworkPolicy state. What `netkit-cni endpoints` shows (cli/endpoints.ts renders it),
 * `monitor` names and the agent's metrics count. Read-only; run in the node's network
 * namespace.
 */
import {
  type Counters,
  type Drops,
  listBypassedSockets,
  openPolicyMaps,
  openSockMaps,
  openSvcMaps,
  POL_F_INCOMPLETE,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  POL_F_PENDING,
  type PodLimits,
  readPolicyPod,
  readPolicyStats,
  readSockCounters,
  readSockPod,
  readSvcClients,
  SOCK_PER_POD,
  type SockCounters,
  type SockPod,
  SVC_POD_AFFINITY,
  type SvcClient,
} from "../bpf/index";
import { parseOwnerAlias } from "../datapath/naming";
import {
  countersOf,
  dropsOf,
  endpointMapEntries,
  type FlowTableUsage,
  flowTableOf,
  limitsOf,
} from "../datapath/node-state";
import { attachedPodPrograms } from "../datapath/pod-filters";
import { listLinks } from "../netlink/links";
import { RtnlSocket } from "../netlink/socket";

export interface EndpointRow {
  containerId: string;
  ifname: string;
  hostDevice: string;
  datapath: string;
  addresses: string[];
  programsAttached: boolean;
  counters: Record<keyof Counters, number> | undefined;
  /** What its programs refused, by reason (absent: no maps pinned yet). */
  drops: Record<keyof Drops, number> | undefined;
  flowTable: Record<keyof FlowTableUsage, number> | undefined;
  /** Its sockets spliced by the socket bypass now (connections it has open to local pods). */
  bypassedSockets: number;
  /** What the bypass did for its sockets so far (absent: never asked to). */
  sockCounters: Record<keyof SockCounters, number> | undefined;
  /** The bypass's record of the pod (absent: its sockets are never spliced): the
   * namespace its sockets must live in, its sockets counted against `bound`, and those
   * refused over the bound or from another namespace. */
  sockRecord: SockRecord | undefined;
  /** Its rate limits (bits/s, bits), their mode and drops; absent: not limited. */
  limits: PodLimits | undefined;
  /** Its own Service translation state (absent: its sockets are not translated). */
  services: ServiceState | undefined;
  /** NetworkPolicy (absent: its network does not enforce it). */
  policy: PolicyState | undefined;
}

export interface PolicyState {
  /** Whether its policy isolates it each way; pending: the agent has not judged it yet. */
  ingress: boolean;
  egress: boolean;
  pending: boolean;
  /** The agent could not write its policy in full: what it isolates is denied whole. */
  incomplete: boolean;
  /** New flows its policy judged, by direction. */
  allowed: { ingress: number; egress: number };
  denied: { ingress: number; egress: number };
}

export interface ServiceState {
  affinityHeld: number;
  affinityCapacity: number;
  noSocketState: number;
  socketReplaced: number;
  affinityReplaced: number;
}

const serviceStateOf = (c: SvcClient | undefined): ServiceState | undefined =>
  c && {
    affinityHeld: c.affinityHeld,
    affinityCapacity: SVC_POD_AFFINITY,
    noSocketState: Number(c.noSocketState),
    socketReplaced: Number(c.socketReplaced),
    affinityReplaced: Number(c.affinityReplaced),
  };

export interface SockRecord {
  netnsCookie: string;
  sockets: number;
  bound: number;
  refusedBound: number;
  refusedNetns: number;
}

const sockRecordOf = (pod: SockPod | undefined): SockRecord | undefined =>
  pod && {
    netnsCookie: String(pod.netnsCookie),
    sockets: pod.sockets,
    bound: SOCK_PER_POD,
    refusedBound: Number(pod.refusedBound),
    refusedNetns: Number(pod.refusedNetns),
  };

const numbers = <T extends object>(o: T | undefined) =>
  o ? (Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Number(v)])) as Record<keyof T, number>) : undefined;

export async function listEndpoints(bpffsRoot: string): Promise<EndpointRow[]> {
  const host = RtnlSocket.open();
  let links: Awaited<ReturnType<typeof listLinks>>;
  // Per pod device: its program runs (a pinned link, or a tc filter: pod-filters.ts).
  const programsAttached = new Map<number, boolean>();
  try {
    links = await listLinks(host);
    for (const link of links.filter((l) => parseOwnerAlias(l.alias))) {
      programsAttached.set(link.index, (await attachedPodPrograms(host, bpffsRoot, link.name, link.index)).fromPod);
    }
  } finally {
    host.close();
  }
  const entries = endpointMapEntries(bpffsRoot);
  const sock = openSockMaps(bpffsRoot);
  const bypassed = new Map<string, number>();
  let sockCounters = (_: number): SockCounters | undefined => undefined;
  let sockRecord = (_: number): SockRecord | undefined => undefined;
  try {
    for (const s of sock ? listBypassedSockets(sock) : [])
      bypassed.set(s.local.ip, (bypassed.get(s.local.ip) ?? 0) + 1);
    if (sock) {
      const all = new Map(links.map((l) => [l.index, readSockCounters(sock.stats, l.index)]));
      sockCounters = (ifindex) => all.get(ifindex);
      const records = new Map(links.map((l) => [l.index, sockRecordOf(readSockPod(sock.pods, l.index))]));
      sockRecord = (ifindex) => records.get(ifindex);
    }
  } finally {
    sock?.close();
  }
  const svc = openSvcMaps(bpffsRoot);
  let clients = new Map<number, SvcClient>();
  try {
    if (svc) clients = readSvcClients(svc);
  } finally {
    svc?.close();
  }
  const policyOf = policyReader(bpffsRoot);
  const rows: EndpointRow[] = [];
  for (const link of links) {
    const owner = parseOwnerAlias(link.alias);
    if (!owner) continue;
    const counters = countersOf(bpffsRoot, link.index);
    const addresses = [...entries].filter(([, e]) => e.hostIfindex === link.index).map(([ip]) => ip);
    rows.push({
      containerId: owner.containerId,
      ifname: owner.ifname,
      hostDevice: link.name,
      datapath: link.kind ?? "?",
      addresses,
      programsAttached: programsAttached.get(link.index) ?? false,
      counters: numbers(counters),
      drops: numbers(dropsOf(bpffsRoot, link.index)),
      flowTable: numbers(flowTableOf(bpffsRoot, link.index)),
      bypassedSockets: addresses.reduce((n, ip) => n + (bypassed.get(ip) ?? 0), 0),
      sockCounters: numbers(sockCounters(link.index)),
      sockRecord: sockRecord(link.index),
      limits: limitsOf(bpffsRoot, link.index),
      services: serviceStateOf(clients.get(link.index)),
      policy: policyOf(link.index),
    });
  }
  return rows;
}

/** Each pod's NetworkPolicy state, read once from the pinned maps (none where no policy network ran). */
function policyReader(bpffsRoot: string): (ifindex: number) => PolicyState | undefined {
  const maps = openPolicyMaps(bpffsRoot);
  if (!maps) return () => undefined;
  const states = new Map<number, PolicyState>();
  try {
    for (const k of maps.endpoints.keys()) {
      const ifindex = k.readUInt32LE(0);
      const key = maps.endpoints.lookup(k)?.readBigUInt64LE(0);
      const pod = key === undefined ? undefined : readPolicyPod(maps, key);
      const flags = pod?.flags ?? 0;
      const stats = readPolicyStats(maps, ifindex);
      states.set(ifindex, {
        ingress: (flags & POL_F_ISOLATED_IN) !== 0,
        egress: (flags & POL_F_ISOLATED_OUT) !== 0,
        pending: (flags & POL_F_PENDING) !== 0,
        incomplete: (flags & POL_F_INCOMPLETE) !== 0,
        allowed: { ingress: Number(stats.allowed.ingress), egress: Number(stats.allowed.egress) },
        denied: { ingress: Number(stats.denied.ingress), egress: Number(stats.denied.egress) },
      });
    }
  } finally {
    maps.close();
  }
  return (ifindex) => states.get(ifindex);
}
