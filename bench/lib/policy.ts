/**
 * NetworkPolicy's cost: the same netperf client and servers three ways side by side,
 * veth pods with the fast path on, across nodes and on one node:
 *
 *   off        a network without "networkPolicy", on a two-node cluster of its own (so
 *              no policy program, not even the uplink's, sees its packets): the baseline
 *   none       a network with "networkPolicy": true, the pods in a namespace without a
 *              policy: nothing judged, the lookups that find no policy
 *   selected   the same network, the pods in a namespace whose policies select them: 3
 *              isolate the servers' ingress and 3 the client's egress, allowing each
 *              other on netperf's ports, among 100 policies in the maps (policy-set.ts)
 *
 * The policies are compiled and written into the nodes' pinned maps as the agent does
 * (src/agent/policy: the compiler, the slots, KernelPolicyWriter), after the pods' ADDs,
 * which name each pod by CNI_ARGS as a runtime does; no API server.
 *
 * Measured: backlog-queue crossings per TCP_RR packet (exact: the policy must cost none)
 * and netperf TCP_RR and TCP_CRR, interleaved round by round, the modes' order turning.
 * The programs' own counters (nkc_pol_stats) show the selected pods were judged, and a
 * probe that no rule allows shows it denied; the none pods' show nothing judged.
 */
import * as path from "node:path";
import * as fs from "node:fs";
import { podRules } from "../../src/agent/controllers/policy";
import { KernelPolicyWriter } from "../../src/agent/policy-maps";
import { PolicySlots } from "../../src/agent/policy-slots";
import {
  nodeObjectsFrom,
  openPolicyMaps,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  podKey,
  readPolicyPod,
  readPolicyStats,
} from "../../src/bpf/index";
import { inNs } from "../../test/support/harness";
import { netperf, startNetserver } from "../../test/support/netperf";
import { snapshotOf } from "../../test/support/policy-cluster";
import { addPod, type ClusterNode, ifindexOf, makeCluster, type Pod } from "../../test/support/topology";
import { newFixture, tick } from "./cleanup";
import { OUR_PLUGIN } from "./cni";
import {
  type NetifRxCounter,
  type PerPacket,
  perPacket,
  RR_REQUEST,
  RR_REQUEST_LEN,
  RR_RESPONSE,
  RR_RESPONSE_LEN,
} from "./crossings";
import type { Placement } from "./paths";
import {
  localPods,
  NETPERF_PORTS,
  namespacesWithPolicies,
  type NetperfPod,
  POLICY_COUNT,
  type PolicyNode,
  policyCluster,
  SELECTED_NS,
  UNJUDGED_NS,
} from "./policy-set";
import { turnedBy } from "./stats";

export const POLICY_MODES = ["off", "none", "selected"] as const;
export type PolicyMode = (typeof POLICY_MODES)[number];
export const POLICY_TESTS = ["TCP_RR", "TCP_CRR"] as const;
export type PolicyTest = (typeof POLICY_TESTS)[number];
const PLACEMENTS: Placement[] = ["across", "same"];

/** TCP_CRR runs a fixed number of connections: with a time limit netperf waits out
 * netserver's 4 s padding timer after each test. */
const CRR_CONNECTIONS = 4000;

export interface PolicyCrossing {
  mode: PolicyMode;
  placement: Placement;
  rrRequest: PerPacket;
  rrResponse: PerPacket;
}

/** What one node's maps held while the selected pods were measured. */
export interface PolicyMapFill {
  node: PolicyNode;
  /** Pods the node's agent would judge (nkc_pol_pods entries) and the slots they share. */
  pods: number;
  slots: number;
  /** Prefixes in the two tries, all slots and directions. */
  peers: number;
  ports: number;
}

/** New flows the programs judged for one pod (nkc_pol_stats), over the whole run. */
export interface PolicyVerdicts {
  mode: PolicyMode;
  pod: string;
  allowed: { egress: number; ingress: number };
  denied: { egress: number; ingress: number };
}

export interface PolicyRun {
  rounds: number;
  seconds: number;
  crrConnections: number;
  /** The policies in the maps, their namespaces, and which of them select each netperf pod (as compiled). */
  policies: { total: number; namespaces: string[]; selecting: Record<string, string[]> };
  maps: PolicyMapFill[];
  /** A connection from the selected client to a pod no rule lets it reach: refused, and counted so. */
  probe: { refused: boolean; deniedEgress: number };
  crossings: PolicyCrossing[];
  /** mode → placement → test → per-round rates (transactions or connections per second). */
  samples: Record<PolicyMode, Record<Placement, Record<PolicyTest, number[]>>>;
  verdicts: PolicyVerdicts[];
  errors: string[];
}

interface ModePods {
  client: Pod;
  servers: Record<Placement, Pod>;
}

/** A runtime's CNI_ARGS: the pod's namespace and name, by which its policy knows it. */
const podArgs = (namespace: string, name: string) => ({
  CNI_ARGS: `K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name}`,
});

/** The client on node a, a server on node b (across) and one on node a (same). */
function addPods(
  fx: ReturnType<typeof newFixture>,
  [a, b]: [ClusterNode, ClusterNode],
  namespace: string,
  prefix: string,
): ModePods {
  const add = (node: ClusterNode, name: string) => addPod(fx, node, `${prefix}-${name}`, node.conf, podArgs(namespace, name));
  return { client: add(a, "client"), servers: { across: add(b, "server-b"), same: add(a, "server-a") } };
}

const NODE_OF = (pod: Pod): PolicyNode => pod.node.name;

export async function measurePolicy(
  counter: NetifRxCounter,
  opts: { rounds: number; seconds: number; transactions: number },
): Promise<PolicyRun> {
  const offFx = newFixture("pol-off");
  const onFx = newFixture("pol-on");
  const offNodes = makeCluster(offFx, { logLevel: "info" });
  const onNodes = makeCluster(onFx, { logLevel: "info", networkPolicy: true });
  const pods: Record<PolicyMode, ModePods> = {
    off: addPods(offFx, offNodes, "bench-off", "off"),
    none: addPods(onFx, onNodes, UNJUDGED_NS, "none"),
    selected: addPods(onFx, onNodes, SELECTED_NS, "sel"),
  };
  for (const [mode, set] of Object.entries(pods)) {
    for (const server of Object.values(set.servers)) startNetserver(mode === "off" ? offFx : onFx, server.netns);
  }
  const written = writePolicies(onNodes, pods.selected);
  const errors = checkEntries(onNodes, pods);
  const probe = probeDenied(pods.selected.client, pods.none.servers.across);
  if (!probe.refused || probe.deniedEgress === 0) {
    errors.push(`the selected client reached ${pods.none.servers.across.v4}, which no rule allows`);
  }
  const before = verdictsOf(pods);

  const rr = (mode: PolicyMode, placement: Placement, test: PolicyTest, length: number) =>
    netperf(pods[mode].client.netns, pods[mode].servers[placement].v4, test, length, [
      "-r",
      `${RR_REQUEST},${RR_RESPONSE}`,
      "-P",
      `,${NETPERF_PORTS[1]}`,
    ]);

  const crossings: PolicyCrossing[] = [];
  for (const placement of PLACEMENTS) {
    for (const mode of POLICY_MODES) {
      await tick();
      const warm = rr(mode, placement, "TCP_RR", -50);
      if (warm.error) throw new Error(`policy, ${mode} ${placement}: ${warm.error}`);
      const events = counter.count(() => {
        const r = rr(mode, placement, "TCP_RR", -opts.transactions);
        if (r.error) throw new Error(`policy, ${mode} ${placement}: ${r.error}`);
      });
      if (events.lost > 0) errors.push(`crossings ${mode} ${placement}: ${events.lost} trace events lost`);
      const c: PolicyCrossing = {
        mode,
        placement,
        rrRequest: perPacket(events.byLen.get(RR_REQUEST_LEN), opts.transactions),
        rrResponse: perPacket(events.byLen.get(RR_RESPONSE_LEN), opts.transactions),
      };
      crossings.push(c);
      process.stderr.write(
        `  policy crossings ${mode.padEnd(8)} ${placement.padEnd(6)} request ${c.rrRequest.total.toFixed(3)}, response ${c.rrResponse.total.toFixed(3)}\n`,
      );
    }
  }

  const empty = () => ({ TCP_RR: [] as number[], TCP_CRR: [] as number[] });
  const samples = Object.fromEntries(POLICY_MODES.map((m) => [m, { across: empty(), same: empty() }])) as PolicyRun["samples"];
  for (let round = 0; round < opts.rounds; round++) {
    for (const test of POLICY_TESTS) {
      for (const placement of PLACEMENTS) {
        for (const mode of turnedBy(POLICY_MODES, round)) {
          await tick();
          const r = rr(mode, placement, test, test === "TCP_CRR" ? -CRR_CONNECTIONS : opts.seconds);
          if (r.error) errors.push(`round ${round + 1} ${mode} ${placement} ${test}: ${r.error}`);
          samples[mode][placement][test].push(r.value);
        }
      }
    }
    process.stderr.write(`  policy round ${round + 1}/${opts.rounds}\n`);
  }

  const verdicts = verdictsOf(pods);
  errors.push(...checkVerdicts(before, verdicts));
  offFx.cleanup();
  onFx.cleanup();
  return {
    rounds: opts.rounds,
    seconds: opts.seconds,
    crrConnections: CRR_CONNECTIONS,
    policies: written.policies,
    maps: written.maps,
    probe,
    crossings,
    samples,
    verdicts,
    errors,
  };
}

/** The lxc object the agent reads the maps' specs from (this build's, beside the executable). */
function lxcObject(): Buffer {
  const dir = path.join(path.dirname(OUR_PLUGIN), "bpf");
  return nodeObjectsFrom((file) => {
    const p = path.join(dir, file);
    return fs.existsSync(p) ? fs.readFileSync(p) : undefined;
  }).variants.memory.lxc;
}

/**
 * Each node's agent's writes: the namespaces that have policies, then every local pod a
 * policy isolates, on its slot (written whole before the pod's entry points at it).
 */
function writePolicies(
  nodes: [ClusterNode, ClusterNode],
  selected: ModePods,
): { policies: PolicyRun["policies"]; maps: PolicyMapFill[] } {
  const netperfPods: NetperfPod[] = [
    { name: "client", role: "client", pod: selected.client },
    { name: "server-b", role: "server", pod: selected.servers.across },
    { name: "server-a", role: "server", pod: selected.servers.same },
  ].map(({ name, role, pod }) => ({ name, role: role as NetperfPod["role"], node: NODE_OF(pod), ips: [pod.v4, pod.v6] }));
  const cluster = policyCluster(netperfPods);
  const snapshot = snapshotOf(cluster);
  const object = lxcObject();
  const maps: PolicyMapFill[] = [];
  const selecting: Record<string, string[]> = {};
  for (const node of nodes) {
    const writer = new KernelPolicyWriter(node.bpffsRoot, object);
    try {
      const slots = new PolicySlots(writer);
      for (const ns of namespacesWithPolicies(cluster)) writer.setNamespace(ns, true);
      const local = new Set(localPods(cluster, node.name));
      let judged = 0;
      for (const target of snapshot.pods.filter((p) => local.has(`${p.namespace}/${p.name}`))) {
        const key = `${target.namespace}/${target.name}`;
        const { policy, selectedBy } = snapshot.compile(target);
        if (target.namespace === SELECTED_NS) selecting[target.name] = selectedBy;
        const isolated = { ingress: policy.ingress !== undefined, egress: policy.egress !== undefined };
        // As the controller: a pod of a namespace with policies gets an entry either way.
        if (!isolated.ingress && !isolated.egress) writer.setPod(key, 0, isolated);
        else slots.place(key, podRules(policy), (slot) => writer.setPod(key, slot, isolated));
        judged += 1;
      }
      maps.push({ node: node.name, pods: judged, slots: slots.size, ...tableFill(node) });
    } finally {
      writer.close();
    }
  }
  return {
    policies: { total: cluster.policies.length, namespaces: namespacesWithPolicies(cluster), selecting },
    maps,
  };
}

function tableFill(node: ClusterNode): { peers: number; ports: number } {
  const maps = openPolicyMaps(node.bpffsRoot);
  if (!maps) throw new Error(`policy: no NetworkPolicy maps on node ${node.name}`);
  try {
    return { peers: maps.peers.countKeys(), ports: maps.ports.countKeys() };
  } finally {
    maps.close();
  }
}

/** The selected pods isolated as their policies say and none pending; the unjudged pods without an entry. */
function checkEntries(nodes: [ClusterNode, ClusterNode], pods: Record<PolicyMode, ModePods>): string[] {
  const errors: string[] = [];
  const expect = (mode: PolicyMode, namespace: string, name: string, pod: Pod, flags: number | undefined) => {
    const node = nodes.find((n) => n.name === NODE_OF(pod)) as ClusterNode;
    const maps = openPolicyMaps(node.bpffsRoot);
    if (!maps) throw new Error(`policy: no NetworkPolicy maps on node ${node.name}`);
    try {
      const entry = readPolicyPod(maps, podKey(namespace, name));
      if (entry?.flags !== flags) {
        errors.push(`${mode} ${namespace}/${name}: flags ${entry?.flags ?? "none"}, expected ${flags ?? "none"}`);
      }
    } finally {
      maps.close();
    }
  };
  expect("selected", SELECTED_NS, "client", pods.selected.client, POL_F_ISOLATED_OUT);
  expect("selected", SELECTED_NS, "server-b", pods.selected.servers.across, POL_F_ISOLATED_IN);
  expect("selected", SELECTED_NS, "server-a", pods.selected.servers.same, POL_F_ISOLATED_IN);
  expect("none", UNJUDGED_NS, "client", pods.none.client, undefined);
  expect("none", UNJUDGED_NS, "server-b", pods.none.servers.across, undefined);
  return errors;
}

/** A TCP connection from `client` to `target`'s netserver, which its egress rules do not allow. */
function probeDenied(client: Pod, target: Pod): PolicyRun["probe"] {
  const before = statsOf(client).denied.egress;
  let refused = false;
  try {
    inNs(client.netns, "timeout", ["2", "bash", "-c", `exec 3<>/dev/tcp/${target.v4}/${NETPERF_PORTS[0]}`]);
  } catch {
    refused = true;
  }
  return { refused, deniedEgress: Number(statsOf(client).denied.egress - before) };
}

/** The new flows the pod's node judged for it (nkc_pol_stats). */
function statsOf(pod: Pod): ReturnType<typeof readPolicyStats> {
  const maps = openPolicyMaps(pod.node.bpffsRoot);
  if (!maps) throw new Error(`policy: no NetworkPolicy maps on node ${pod.node.name}`);
  try {
    return readPolicyStats(maps, ifindexOf(pod.node.netns, pod.hostDevice));
  } finally {
    maps.close();
  }
}

/** Every netperf pod's judged flows, from its node's nkc_pol_stats. */
function verdictsOf(pods: Record<PolicyMode, ModePods>): PolicyVerdicts[] {
  const out: PolicyVerdicts[] = [];
  for (const mode of ["none", "selected"] as const) {
    const set = pods[mode];
    for (const [name, pod] of [
      ["client", set.client],
      ["server-b", set.servers.across],
      ["server-a", set.servers.same],
    ] as const) {
      const s = statsOf(pod);
      out.push({
        mode,
        pod: name,
        allowed: { egress: Number(s.allowed.egress), ingress: Number(s.allowed.ingress) },
        denied: { egress: Number(s.denied.egress), ingress: Number(s.denied.ingress) },
      });
    }
  }
  return out;
}

/** The measurement judged the selected pods' flows, allowed every one, and judged nothing of the others. */
function checkVerdicts(before: PolicyVerdicts[], after: PolicyVerdicts[]): string[] {
  const errors: string[] = [];
  for (const a of after) {
    const b = before.find((x) => x.mode === a.mode && x.pod === a.pod);
    const grew = (d: "allowed" | "denied", dir: "egress" | "ingress") => a[d][dir] - (b?.[d][dir] ?? 0);
    const denied = grew("denied", "egress") + grew("denied", "ingress");
    if (denied > 0) errors.push(`${a.mode} ${a.pod}: ${denied} flows denied while measured`);
    const allowed = a.pod === "client" ? grew("allowed", "egress") : grew("allowed", "ingress");
    if (a.mode === "selected" && allowed === 0) errors.push(`selected ${a.pod}: no flow judged`);
    if (a.mode === "none" && a.allowed.egress + a.allowed.ingress + a.denied.egress + a.denied.ingress > 0) {
      errors.push(`none ${a.pod}: flows judged in a namespace without policy`);
    }
  }
  return errors;
}
