/**
 * The NetworkPolicy section's maps (bench/lib/policy.ts), written as each node's agent
 * writes them (src/agent/policy: the compiler, the slots, KernelPolicyWriter) from the
 * cluster policy-set.ts describes; no API server. With ClusterNetworkPolicies, a slot's
 * tiers (nkc_pol_tiers) are written with its rules, as the agent writes them.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { podRules } from "../../src/agent/policy/controller";
import { PolicySlots } from "../../src/agent/policy/slots";
import { KernelPolicyWriter } from "../../src/agent/policy/writer";
import { nodeObjectsFrom, openPolicyMaps } from "../../src/bpf/index";
import { snapshotOf } from "../../test/support/policy-cluster";
import type { Cluster } from "../../test/support/policy-model";
import type { ClusterNode } from "../../test/support/topology";
import { OUR_PLUGIN } from "./cni";
import { type ModePods, namedPods, nodeOf } from "./policy-pods";
import type { PolicyMapFill, PolicyRun } from "./policy-result";
import { localPods, type NetperfPod, namespacesWithPolicies, policyCluster, SELECTED_NS } from "./policy-set";

/** The lxc object the agent reads the maps' specs from (this build's, beside the executable). */
function lxcObject(): Buffer {
  const dir = path.join(path.dirname(OUR_PLUGIN), "bpf");
  return nodeObjectsFrom((file) => {
    const p = path.join(dir, file);
    return fs.existsSync(p) ? fs.readFileSync(p) : undefined;
  }).variants.memory.lxc;
}

/** Prefixes in the node's two tries, and its slots' tier entries. */
function tableFill(node: ClusterNode): { peers: number; ports: number; tiers: number } {
  const maps = openPolicyMaps(node.bpffsRoot);
  if (!maps) throw new Error(`policy: no NetworkPolicy maps on node ${node.name}`);
  try {
    return { peers: maps.peers.countKeys(), ports: maps.ports.countKeys(), tiers: maps.tiers.countKeys() };
  } finally {
    maps.close();
  }
}

/**
 * One node's agent's writes: the namespaces that have policies, then every local pod of
 * them, a pod some policy isolates on its slot (written whole before the pod's entry
 * points at it). Records which policies select each netperf pod in `selecting`, and which
 * ClusterNetworkPolicies in `clusterSelecting`.
 */
function writeNode(
  node: ClusterNode,
  cluster: Cluster,
  object: Buffer,
  selecting: Record<string, string[]>,
  clusterSelecting: Record<string, string[]>,
): PolicyMapFill {
  const snapshot = snapshotOf(cluster);
  const writer = new KernelPolicyWriter(node.bpffsRoot, object);
  try {
    const slots = new PolicySlots(writer);
    for (const ns of namespacesWithPolicies(cluster)) writer.setNamespace(ns, true);
    const local = new Set(localPods(cluster, node.name));
    let judged = 0;
    for (const target of snapshot.pods.filter((p) => local.has(`${p.namespace}/${p.name}`))) {
      const key = `${target.namespace}/${target.name}`;
      const { policy, selectedBy, clusterSelectedBy } = snapshot.compile(target);
      if (target.namespace === SELECTED_NS) {
        selecting[target.name] = selectedBy;
        if (clusterSelectedBy) clusterSelecting[target.name] = clusterSelectedBy;
      }
      const isolated = { ingress: policy.ingress !== undefined, egress: policy.egress !== undefined };
      // As the controller: a pod of a namespace with policies gets an entry either way.
      if (!isolated.ingress && !isolated.egress) writer.setPod(key, { slot: 0, isolated, stamp: 0n });
      else slots.place(key, podRules(policy));
      judged += 1;
    }
    return { node: node.name, pods: judged, slots: slots.size, ...tableFill(node) };
  } finally {
    writer.close();
  }
}

/**
 * Both nodes' maps for a mode's pods (of the selected namespace) among the 100 policies;
 * with `tiers`, the 50 ClusterNetworkPolicies beside them.
 */
export function writePolicies(
  nodes: [ClusterNode, ClusterNode],
  selected: ModePods,
  tiers = false,
): { policies: PolicyRun["policies"]; maps: PolicyMapFill[] } {
  const netperfPods: NetperfPod[] = namedPods(selected).map(([name, pod]) => ({
    name,
    role: name === "client" ? "client" : "server",
    node: nodeOf(pod),
    ips: [pod.v4, pod.v6],
  }));
  const cluster = policyCluster(netperfPods, tiers);
  const object = lxcObject();
  const selecting: Record<string, string[]> = {};
  const clusterSelecting: Record<string, string[]> = {};
  const maps = nodes.map((node) => writeNode(node, cluster, object, selecting, clusterSelecting));
  const policies: PolicyRun["policies"] = {
    total: cluster.policies.length,
    namespaces: namespacesWithPolicies(cluster),
    selecting,
  };
  if (tiers) {
    const cnps = cluster.clusterPolicies ?? [];
    policies.cluster = {
      total: cnps.length,
      admin: cnps.filter((c) => c.spec.tier === "Admin").length,
      baseline: cnps.filter((c) => c.spec.tier === "Baseline").length,
      selecting: clusterSelecting,
    };
  }
  return { policies, maps };
}
