/**
 * A two-node cluster in namespaces, as the fast-path tests and benchmarks need it: node
 * netns A and B joined by a veth "wire", each routing the other's pod subnet over it,
 * each with its own bpffs root and IPAM store, pods made by the real executable.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Counters } from "../../src/bpf/index";
import { programsRoot } from "../../src/bpf/loader/layout";
import { countersOf } from "../../src/datapath/node-state";
import { type Fixture, inNs, type PluginRun, runPlugin, TEST_DATAPATH } from "./harness";

export interface ClusterNode {
  name: "a" | "b";
  netns: string;
  wire: string;
  wireV4: string;
  wireV6: string;
  podSubnet4: string;
  podSubnet6: string;
  bpffsRoot: string;
  conf: Record<string, unknown>;
}

export interface Pod {
  node: ClusterNode;
  netns: string;
  containerId: string;
  v4: string;
  v6: string;
  hostDevice: string;
  add: PluginRun;
}

export const CLUSTER_CIDRS = ["10.221.0.0/16", "fd21::/16"];

export function makeCluster(
  fx: Fixture,
  extraConf: Record<string, unknown> = {},
  wireQueues = 1,
): [ClusterNode, ClusterNode] {
  const a = fx.makeNetns("nka");
  const b = fx.makeNetns("nkb");
  // More than one transmit queue: a NIC's, where pacing puts an fq under mq per queue.
  // Always said: veth's default is one queue per CPU, so the wire would change with the
  // machine (an SMP guest's would be multi-queue).
  const queues = ["numtxqueues", `${wireQueues}`, "numrxqueues", `${wireQueues}`];
  inNs(a, "ip", [
    "link",
    "add",
    "wire0",
    ...queues,
    "type",
    "veth",
    "peer",
    "name",
    "wire0",
    ...queues,
    "netns",
    `/run/netns/${b}`,
  ]);
  const nodes = (["a", "b"] as const).map((name, i): ClusterNode => {
    const netns = name === "a" ? a : b;
    const n = i + 1;
    const dataDir = fx.tempDir(`nkt-${name}-`);
    return {
      name,
      netns,
      wire: "wire0",
      wireV4: `10.220.0.${n}`,
      wireV6: `fd20::${n}`,
      podSubnet4: `10.221.${n}.0/24`,
      podSubnet6: `fd21:${n}::/64`,
      bpffsRoot: `${fx.bpffsRoot}-${name}`,
      conf: {
        cniVersion: "1.1.0",
        name: "cluster",
        type: "netkit-cni",
        datapath: TEST_DATAPATH,
        logFile: path.join(dataDir, "plugin.log"),
        logLevel: "debug",
        bpffsRoot: `${fx.bpffsRoot}-${name}`,
        hostInterface: "wire0",
        clusterCIDRs: CLUSTER_CIDRS,
        ipam: {
          type: "netkit-cni",
          ranges: [[{ subnet: `10.221.${n}.0/24` }], [{ subnet: `fd21:${n}::/64` }]],
          dataDir,
        },
        ...extraConf,
      },
    };
  }) as [ClusterNode, ClusterNode];
  for (const node of nodes) {
    fx.extraBpffsRoots.push(node.bpffsRoot);
    const peer = node === nodes[0] ? nodes[1] : nodes[0];
    inNs(node.netns, "ip", ["link", "set", "lo", "up"]);
    inNs(node.netns, "ip", ["addr", "add", `${node.wireV4}/24`, "dev", "wire0"]);
    inNs(node.netns, "ip", ["-6", "addr", "add", `${node.wireV6}/64`, "dev", "wire0", "nodad"]);
    // A fresh wire's link-local address stays tentative (DAD) for a second or more, and
    // neighbour solicitations wait for it; a real uplink has long been up.
    inNs(node.netns, "sysctl", ["-qw", "net.ipv6.conf.wire0.accept_dad=0"]);
    inNs(node.netns, "ip", ["link", "set", "wire0", "up"]);
    inNs(node.netns, "ip", ["route", "add", peer.podSubnet4, "via", peer.wireV4]);
    inNs(node.netns, "ip", ["-6", "route", "add", peer.podSubnet6, "via", peer.wireV6]);
  }
  return nodes;
}

/** `env`: more of the runtime's environment, e.g. CNI_ARGS naming the pod for NetworkPolicy. */
export function addPod(
  fx: Fixture,
  node: ClusterNode,
  containerId: string,
  conf = node.conf,
  env: Record<string, string> = {},
): Pod {
  const netns = fx.makeNetns("nkp");
  const add = runPlugin(node.netns, "ADD", { containerId, netns: `/run/netns/${netns}`, ifname: "eth0" }, conf, env);
  if (add.status !== 0) throw new Error(`ADD ${containerId} on node ${node.name} failed: ${add.stdout}`);
  const ips = (add.json?.ips ?? []) as { address: string }[];
  const ip = (v6: boolean) => ips.find((i) => i.address.includes(":") === v6)?.address.split("/")[0] ?? "";
  const hostDevice = ((add.json?.interfaces ?? []) as { name: string }[])[0]?.name ?? "";
  if (EXPECTED_NAT_CHECK) expectNatCheck(node, EXPECTED_NAT_CHECK);
  return { node, netns, containerId, v4: ip(false), v6: ip(true), hostDevice, add };
}

/**
 * The NAT check every node of the run must use (NETKIT_CNI_TEST_NAT_CHECK; the distro lane
 * sets "conntrack"): the files it shares with other lanes then prove their flows under
 * that check, or fail at the first pod.
 */
const EXPECTED_NAT_CHECK = process.env.NETKIT_CNI_TEST_NAT_CHECK;

/** Pinned program sets are named `<epoch>-<hash>-<variant>` (src/bpf/node.ts). */
function expectNatCheck(node: ClusterNode, natCheck: string): void {
  const pinned = fs.readdirSync(programsRoot(node.bpffsRoot));
  if (pinned.length === 0 || !pinned.every((set) => set.endsWith(`-${natCheck}`))) {
    throw new Error(
      `node ${node.name} runs the programs ${pinned.join(", ")}; this run expects the ${natCheck} NAT check`,
    );
  }
}

export function delPod(pod: Pod): PluginRun {
  return runPlugin(
    pod.node.netns,
    "DEL",
    { containerId: pod.containerId, netns: `/run/netns/${pod.netns}`, ifname: "eth0" },
    { ...pod.node.conf, prevResult: pod.add.json },
  );
}

export function ifindexOf(netns: string, device: string): number {
  const [link] = JSON.parse(inNs(netns, "ip", ["-j", "link", "show", "dev", device])) as { ifindex: number }[];
  if (!link) throw new Error(`no ${device} in ${netns}`);
  return link.ifindex;
}

/** The pod's packets by path, as its node's programs counted them. */
function podCounters(pod: Pod): Counters {
  const c = countersOf(pod.node.bpffsRoot, ifindexOf(pod.node.netns, pod.hostDevice));
  if (!c) throw new Error("no counters map");
  return c;
}

/** How much each of the pod's counters grew while `fn` ran. */
export function counterDelta(pod: Pod, fn: () => void): Counters {
  const before = podCounters(pod);
  fn();
  const after = podCounters(pod);
  return Object.fromEntries(
    Object.entries(after).map(([k, v]) => [k, v - before[k as keyof Counters]]),
  ) as unknown as Counters;
}
