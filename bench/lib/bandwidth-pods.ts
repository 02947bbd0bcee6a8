/**
 * The rate-limit section's clusters (bench/lib/bandwidth.ts). Per variant a two-node
 * cluster of its own, built as the paths' are (bench/lib/paths.ts): a server pod b1 on
 * node B without limits, and on node A one client pod per limit and burst, limited both
 * ways through the CNI `bandwidth` capability (runtimeConfig.bandwidth, as a runtime
 * passes it from the pod's annotations).
 *
 * One pod per limit and burst, made up front (a1-10-300ms, a1-10-50ms, ...), rather than
 * one pod re-created (DEL + ADD) for each: the rounds then hold only measurements, no
 * ADD's work (our programs' map writes and qdiscs; the reference's qdiscs and ifb) falls
 * between two of them, and every round of a variant measures the same pods. The pods not
 * being measured are idle, so they take nothing from the one that is.
 */
import type { EndpointRow } from "../../src/commands/endpoints";
import { inNs } from "../../test/support/harness";
import { addPod, type ClusterNode, delPod, makeCluster } from "../../test/support/topology";
import { type BenchFixture, newFixture } from "./cleanup";
import { type Attachment, OUR_PLUGIN, refPlugin, runCni } from "./cni";
import { addRefPod, type Endpoint, refConf } from "./paths";

/**
 * ours-veth, ours-netkit: this plugin, the limits enforced by its programs and the qdiscs
 * it sets (fq on the uplink, fq or tbf on the pod's host device); reference:
 * Debian's ptp plugin chained with its bandwidth plugin, as a conflist does (qdiscs on
 * the pod's host veth, and on an ifb device for what the pod sends).
 */
export const BW_VARIANTS = ["ours-veth", "ours-netkit", "reference"] as const;
export type BwVariant = (typeof BW_VARIANTS)[number];

export const BW_VARIANT_LABELS: Record<BwVariant, string> = {
  "ours-veth": "netkit-cni veth",
  "ours-netkit": "netkit-cni netkit",
  reference: "ptp + bandwidth plugin",
};

/**
 * The buckets' depths, ms at the rate; every limit is measured with each. TCP meets a
 * policer in bursts and loses whole bursts at once: the rate-limit integration tests
 * found 300 ms lets it reach 91-100% of the rate where 20 ms gave about 11%. 50 ms is the
 * size admins write into network configs; against it a shaper and a policer part most.
 * Kubernetes leaves the burst to the runtime; every variant gets the same ones.
 */
export const BURSTS_MS = [300, 50];

/** runtimeConfig.bandwidth for a limit of `mbit` Mbit/s each way with `burstMs` of burst (bits/s, bits). */
export function capabilityOf(mbit: number, burstMs: number): Record<string, number> {
  const rate = mbit * 1e6;
  const burst = Math.round((rate * burstMs) / 1000);
  return { ingressRate: rate, ingressBurst: burst, egressRate: rate, egressBurst: burst };
}

/** One client pod's limit: Mbit/s each way, and its bucket in ms at that rate. */
export interface Shape {
  mbit: number;
  burstMs: number;
}

/** Every limit with every burst. */
export const shapesOf = (limits: number[], bursts: number[]): Shape[] =>
  limits.flatMap((mbit) => bursts.map((burstMs) => ({ mbit, burstMs })));

/** A client's name and its key in BwCluster.clients. */
export const shapeKey = (s: Shape) => `${s.mbit}-${s.burstMs}ms`;

/** How our plugin enforces one pod's limits, as `netkit-cni endpoints` says. */
export interface PodModes {
  /** "edt" (paced by fq on the uplink) or "police". */
  egress: string;
  /** "edt" (paced by fq on the host device), "qdisc" (a tbf there) or "police". */
  ingress: string;
}

export interface BwCluster {
  variant: BwVariant;
  fx: BenchFixture;
  /** The client pods on node A, by shapeKey. */
  clients: Map<string, Endpoint>;
  server: Endpoint;
  /** How our plugin enforces each client's limits, by shapeKey; empty for the reference. */
  modes: Record<string, PodModes>;
  /** DELs every pod as a runtime does (a chain's plugins last first); what failed. */
  teardown: () => string[];
}

export function buildBwCluster(variant: BwVariant, shapes: Shape[]): BwCluster {
  return variant === "reference" ? buildReference(shapes) : buildOurs(variant, shapes);
}

function buildOurs(variant: "ours-veth" | "ours-netkit", shapes: Shape[]): BwCluster {
  const fx = newFixture(`bw-${variant}`);
  const datapath = variant === "ours-netkit" ? "netkit" : "veth";
  const [a, b] = makeCluster(fx, { logLevel: "info", datapath, fastPath: true });
  const server = addPod(fx, b, "b1");
  const pods = shapes.map((s) =>
    addPod(fx, a, `a1-${shapeKey(s)}`, { ...a.conf, runtimeConfig: { bandwidth: capabilityOf(s.mbit, s.burstMs) } }),
  );
  // The plugin chooses how each direction is enforced (paced where the kernel has fq,
  // ingress shaped by a tbf where it has not, else policed): asked of it, as an operator
  // would, so the report can say which ones ran.
  const rows = JSON.parse(inNs(a.netns, OUR_PLUGIN, ["endpoints", "--bpffs-root", a.bpffsRoot, "--json"])) as unknown;
  const modes: Record<string, PodModes> = {};
  const clients = new Map<string, Endpoint>();
  shapes.forEach((s, i) => {
    const pod = pods[i];
    if (!pod) return;
    const m = modesOf(rows, pod.hostDevice, capabilityOf(s.mbit, s.burstMs));
    if ("error" in m) throw new Error(`${variant}, pod ${pod.containerId}: ${m.error}`);
    modes[shapeKey(s)] = m;
    clients.set(shapeKey(s), { netns: pod.netns, ip: pod.v4 });
  });
  const teardown = () =>
    [...pods, server].flatMap((p) => {
      const r = delPod(p);
      return r.status === 0 ? [] : [`${variant}: DEL ${p.containerId} failed: ${r.stdout.trim()}`];
    });
  return { variant, fx, clients, server: { netns: server.netns, ip: server.v4 }, modes, teardown };
}

/** A pod chained as ptp, then bandwidth: what its DELs need. */
interface Chain {
  att: Attachment;
  bandwidthConf: Record<string, unknown>;
  /** The chain's result (the bandwidth plugin's): every plugin's prevResult at DEL. */
  result: Record<string, unknown>;
}

function buildReference(shapes: Shape[]): BwCluster {
  const fx = newFixture("bw-reference");
  // Our plugin's conf on these nodes is never used: the cluster gives the wire and routes.
  const [a, b] = makeCluster(fx, { logLevel: "info" });
  const dirA = fx.tempDir("nkb-bw-a-");
  const dirB = fx.tempDir("nkb-bw-b-");
  const ptpA = refConf("ptp", a, dirA);
  const b1 = addRefPod(fx, "ptp", b, dirB, "b1");
  const clients = new Map<string, Endpoint>();
  const chains: Chain[] = [];
  for (const s of shapes) {
    const ptp = addRefPod(fx, "ptp", a, dirA, `a1-${shapeKey(s)}`);
    // A conflist's second plugin: the same network name, the first one's result.
    const bandwidthConf = {
      cniVersion: "1.0.0",
      name: ptpA.name,
      type: "bandwidth",
      runtimeConfig: { bandwidth: capabilityOf(s.mbit, s.burstMs) },
    };
    const r = runCni(refPlugin("bandwidth"), a.netns, "ADD", ptp.att, { ...bandwidthConf, prevResult: ptp.result });
    if (r.status !== 0 || !r.json) throw new Error(`bandwidth ADD a1-${shapeKey(s)} failed: ${r.stdout.trim()}`);
    clients.set(shapeKey(s), ptp.pod);
    chains.push({ att: ptp.att, bandwidthConf, result: r.json });
  }
  // Each limited pod's egress goes through an ifb of its own in the node's netns: one
  // missing would mean a pod sends unlimited.
  if (ifbDevices(a).length !== shapes.length) {
    throw new Error(`bandwidth: ${ifbDevices(a).length} ifb devices on node A for ${shapes.length} limited pods`);
  }
  const teardown = () => {
    const errors: string[] = [];
    const del = (type: "ptp" | "bandwidth", node: ClusterNode, att: Attachment, conf: Record<string, unknown>) => {
      const r = runCni(refPlugin(type), node.netns, "DEL", att, conf);
      if (r.status !== 0) errors.push(`reference: ${type} DEL ${att.containerId} failed: ${r.stdout.trim()}`);
    };
    for (const c of chains) {
      del("bandwidth", a, c.att, { ...c.bandwidthConf, prevResult: c.result });
      del("ptp", a, c.att, { ...ptpA, prevResult: c.result });
    }
    del("ptp", b, b1.att, { ...refConf("ptp", b, dirB), prevResult: b1.result });
    // The ifbs would go with the node's netns anyway (an ifb's link ops do not return it
    // to the initial netns, so the kernel deletes it with its netns); DEL must not need that.
    const left = ifbDevices(a);
    if (left.length) errors.push(`reference: ifb devices left on node A after DEL: ${left.join(", ")}`);
    return errors;
  };
  return { variant: "reference", fx, clients, server: b1.pod, modes: {}, teardown };
}

function ifbDevices(node: ClusterNode): string[] {
  const links = JSON.parse(inNs(node.netns, "ip", ["-j", "link", "show", "type", "ifb"]) || "[]") as {
    ifname: string;
  }[];
  return links.map((l) => l.ifname);
}

/**
 * A limited pod's row of `netkit-cni endpoints --json`: how each direction is enforced,
 * or why the row is not what its ADD asked for (no row, no limits, other rates or
 * bursts: a figure would then be labelled with a limit the pod does not have).
 */
export function modesOf(
  rows: unknown,
  hostDevice: string,
  asked: Record<string, number>,
): PodModes | { error: string } {
  const row = (Array.isArray(rows) ? (rows as Partial<EndpointRow>[]) : []).find((r) => r?.hostDevice === hostDevice);
  if (!row) return { error: `no row for ${hostDevice} in netkit-cni endpoints` };
  const limits = row.limits;
  if (!limits) return { error: `${hostDevice} has no rate limits` };
  const { ingress, egress } = limits;
  const as = (l: { rate: number; burst: number } | undefined) => (l ? `${l.rate}/${l.burst}` : "-");
  if (
    ingress?.rate !== asked.ingressRate ||
    ingress?.burst !== asked.ingressBurst ||
    egress?.rate !== asked.egressRate ||
    egress?.burst !== asked.egressBurst
  ) {
    return {
      error:
        `${hostDevice} is limited to ${as(ingress)} in, ${as(egress)} out (rate/burst, bits), ` +
        `not ${asked.ingressRate}/${asked.ingressBurst} in, ${asked.egressRate}/${asked.egressBurst} out`,
    };
  }
  if (typeof limits.mode !== "string") return { error: `${hostDevice}: no egress enforcement mode` };
  if (typeof limits.ingressMode !== "string") return { error: `${hostDevice}: no ingress enforcement mode` };
  return { egress: limits.mode, ingress: limits.ingressMode };
}
