/**
 * The paths the benchmark compares, each on its own two-node cluster (the integration
 * tests' topology: node netns A and B joined by a veth "wire", each routing the other's
 * pod subnet over it), so no path's programs or devices sit on another path's packets:
 *
 *   host          a process in node A's netns ↔ one in node B's (one node: over loopback)
 *   bridge        the reference `bridge` plugin (isGateway, no masquerade) + host-local
 *   ptp           the reference `ptp` plugin + host-local
 *   veth          this plugin, veth pairs, eBPF fast path (NAT check: conntrack where it loads)
 *   veth-memory   the same with `"natCheck": "memory"` (the variant for kernels without a JIT)
 *   veth-baseline the same path made by another build (--baseline), side by side
 *   veth-plain    this plugin, veth pairs, `"fastPath": false` (plain routing, source check only)
 *   netkit        this plugin, netkit pairs, fast path (kernels with netkit: the UML guest)
 *   netkit-plain  this plugin, netkit pairs, `"fastPath": false` (the source check only)
 *
 * Each path offers two client → server pairs: across nodes (A → B) and within node A.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { withPluginBinary } from "../../test/support/harness";
import { addPod, type ClusterNode, makeCluster } from "../../test/support/topology";
import type { BenchFixture } from "./cleanup";
import { newFixture } from "./cleanup";
import { type Attachment, refPlugin, resultV4, runCni } from "./cni";

export type PathId =
  | "host"
  | "bridge"
  | "ptp"
  | "veth"
  | "veth-memory"
  | "veth-baseline"
  | "veth-plain"
  | "netkit"
  | "netkit-plain";
export type Placement = "across" | "same";

export const PATH_LABELS: Record<PathId, string> = {
  host: "host ↔ host",
  bridge: "bridge + host-local",
  ptp: "ptp + host-local",
  veth: "netkit-cni veth (fast path)",
  "veth-memory": "netkit-cni veth, memory NAT check",
  "veth-baseline": "netkit-cni veth, baseline build",
  "veth-plain": "netkit-cni veth, fastPath false",
  netkit: "netkit-cni netkit (fast path)",
  "netkit-plain": "netkit-cni netkit, fastPath false",
};

export const PLACEMENT_LABELS: Record<Placement, string> = { across: "across nodes", same: "one node" };

export interface Endpoint {
  netns: string;
  ip: string;
}

export interface BenchPath {
  id: PathId;
  fx: BenchFixture;
  nodes: [ClusterNode, ClusterNode];
  pairs: Record<Placement, { client: Endpoint; server: Endpoint }>;
  /** Every netns a netserver must run in. */
  servers: string[];
}

/** Our plugin's settings per path (the cluster's conf already names wire0, CIDRs, bpffs root). */
const OURS: Partial<Record<PathId, Record<string, unknown>>> = {
  veth: { datapath: "veth", fastPath: true },
  "veth-memory": { datapath: "veth", fastPath: true, natCheck: "memory" },
  "veth-baseline": { datapath: "veth", fastPath: true },
  "veth-plain": { datapath: "veth", fastPath: false },
  netkit: { datapath: "netkit", fastPath: true },
  "netkit-plain": { datapath: "netkit", fastPath: false },
};

/** A reference plugin's conf for one node: host-local over the node's pod subnet (IPv4). */
export function refConf(type: "bridge" | "ptp", node: ClusterNode, dataDir: string): Record<string, unknown> {
  const ipam = {
    type: "host-local",
    ranges: [[{ subnet: node.podSubnet4 }]],
    routes: [{ dst: "0.0.0.0/0" }],
    dataDir,
  };
  const common = { cniVersion: "1.0.0", name: `bench-${type}`, type, ipMasq: false, ipam };
  // isGateway: the bridge gets the subnet's first address and pods route through it; the
  // other node's pod subnet is reached over the wire by the cluster's routes.
  return type === "bridge" ? { ...common, bridge: "cni0", isGateway: true, hairpinMode: false } : common;
}

/** A reference plugin's pod in a new netns: where it is, and what a runtime keeps of its
 * ADD (the attachment and the result, a chained plugin's prevResult). */
export function addRefPod(
  fx: BenchFixture,
  type: "bridge" | "ptp",
  node: ClusterNode,
  dataDir: string,
  id: string,
): { pod: Endpoint; att: Attachment; result: Record<string, unknown> } {
  const netns = fx.makeNetns("nkp");
  const att = { containerId: id, netns: `/run/netns/${netns}`, ifname: "eth0" };
  const r = runCni(refPlugin(type), node.netns, "ADD", att, refConf(type, node, dataDir));
  const ip = resultV4(r.json);
  if (r.status !== 0 || !ip || !r.json) throw new Error(`${type} ADD ${id} on node ${node.name} failed: ${r.stdout}`);
  return { pod: { netns, ip }, att, result: r.json };
}

const refPod = (fx: BenchFixture, type: "bridge" | "ptp", node: ClusterNode, dataDir: string, id: string) =>
  addRefPod(fx, type, node, dataDir, id).pod;

/** Builds one path's cluster and pods: a1, a2 on node A and b1 on node B; the
 * veth-baseline path's pods are made by the `baseline` executable. */
export function buildPath(id: PathId, baseline?: string): BenchPath {
  if (id !== "veth-baseline") return assemble(id);
  if (!baseline) throw new Error("the veth-baseline path needs --baseline");
  return withPluginBinary(baseline, () => assemble(id));
}

/** The path's own cluster: its own netns and bpffs root (named by the path), never shared. */
function assemble(id: PathId): BenchPath {
  const fx = newFixture(id);
  const ours = OURS[id];
  const nodes = makeCluster(fx, { logLevel: "info", ...ours });
  const [a, b] = nodes;
  let a1: Endpoint;
  let a2: Endpoint;
  let b1: Endpoint;
  if (id === "host") {
    const pairs = {
      across: { client: { netns: a.netns, ip: a.wireV4 }, server: { netns: b.netns, ip: b.wireV4 } },
      same: { client: { netns: a.netns, ip: a.wireV4 }, server: { netns: a.netns, ip: a.wireV4 } },
    };
    return { id, fx, nodes, pairs, servers: [a.netns, b.netns] };
  }
  if (id === "bridge" || id === "ptp") {
    const dirA = fx.tempDir(`nkb-${id}-a-`);
    const dirB = fx.tempDir(`nkb-${id}-b-`);
    a1 = refPod(fx, id, a, dirA, "a1");
    a2 = refPod(fx, id, a, dirA, "a2");
    b1 = refPod(fx, id, b, dirB, "b1");
  } else {
    const pod = (node: ClusterNode, name: string): Endpoint => {
      const p = addPod(fx, node, name);
      return { netns: p.netns, ip: p.v4 };
    };
    a1 = pod(a, "a1");
    a2 = pod(a, "a2");
    b1 = pod(b, "b1");
  }
  return {
    id,
    fx,
    nodes,
    pairs: { across: { client: a1, server: b1 }, same: { client: a1, server: a2 } },
    servers: [b1.netns, a2.netns],
  };
}

/** Pods reach each other: a few pings per pair, which also settle neighbours and flows. */
export function checkPath(p: BenchPath, ping: (from: string, to: string, count: number) => void): void {
  for (const placement of ["across", "same"] as const) {
    const { client, server } = p.pairs[placement];
    ping(client.netns, server.ip, 3);
  }
}

/** Where a run's plugin logs went (the clusters' temp folders), for a failure report. */
export function pluginLogs(p: BenchPath): string[] {
  return p.nodes
    .map((n) => String(n.conf.logFile))
    .filter((f) => fs.existsSync(f))
    .map((f) => path.resolve(f));
}
