/**
 * Clusters for the policy tests, written as the API serves them
 * (test/support/policy-model.ts reads them so), and what the compiler makes of them: each
 * pod's compiled policy (src/agent/policy/model through the informers' transforms) and
 * the probes those answer, as the datapath would, into truth tables to set against the
 * model's.
 */
import type { V1Namespace, V1Pod } from "@kubernetes/client-node";
import type {
  CompiledPolicy,
  CompiledRule,
  DirectionPolicy,
  PeerBlock,
  PortRange,
} from "../../src/agent/policy/model/compile";
import {
  clusterNetworkPolicyObject,
  namespaceObject,
  networkPolicyObject,
  nodeObject,
  podObject,
} from "../../src/agent/policy/model/objects";
import { PolicySnapshot } from "../../src/agent/policy/model/snapshot";
import { type Address, AF_INET, parseAddress } from "../../src/cni/address";
import {
  type Cluster,
  type Endpoint,
  type Probe,
  type Protocol,
  type RawClusterPolicy,
  type RawPolicy,
  resolveEnd,
  type TruthTable,
  truthTable,
} from "./policy-model";

/** Addresses are read once each: a truth table asks about the same few thousands of times. */
const addresses = new Map<string, Address | undefined>();
function address(text: string): Address | undefined {
  if (!addresses.has(text)) addresses.set(text, parseAddress(text));
  return addresses.get(text);
}

export const namespace = (name: string, labels: Record<string, string> = {}): V1Namespace => ({
  metadata: { name, labels: { "kubernetes.io/metadata.name": name, ...labels } },
});

interface PodFacts {
  labels?: Record<string, string>;
  ips?: string[];
  node?: string;
  ports?: { name: string; port: number; protocol?: Protocol }[];
  hostNetwork?: boolean;
  phase?: string;
}

/** A pod "namespace/name", running unless told otherwise. */
export function pod(key: string, facts: PodFacts = {}): V1Pod {
  const [ns = "", name = ""] = key.split("/");
  const ports = (facts.ports ?? []).map((p) => ({
    name: p.name,
    containerPort: p.port,
    protocol: p.protocol ?? "TCP",
  }));
  return {
    metadata: { namespace: ns, name, labels: facts.labels ?? {} },
    spec: {
      nodeName: facts.node ?? "n1",
      hostNetwork: facts.hostNetwork ?? false,
      containers: [{ name: "c", ports }],
    },
    status: { phase: facts.phase ?? "Running", podIPs: (facts.ips ?? []).map((ip) => ({ ip })) },
  };
}

export const policy = (key: string, spec: Record<string, unknown>): RawPolicy => {
  const [ns = "", name = ""] = key.split("/");
  return { metadata: { namespace: ns, name }, spec };
};

/** The compiled policy of every pod that has one to compile, by "namespace/name". */
export function compileCluster(cluster: Cluster): Map<string, CompiledPolicy> {
  const snapshot = snapshotOf(cluster);
  return new Map(snapshot.pods.map((p) => [`${p.namespace}/${p.name}`, snapshot.compile(p).policy]));
}

export const clusterPolicy = (name: string, spec: Record<string, unknown>): RawClusterPolicy => ({
  metadata: { name },
  spec,
});

/** A cluster's node as the API serves it: its addresses as InternalIPs. */
export const rawNode = (node: NonNullable<Cluster["nodes"]>[number]) => ({
  metadata: { name: node.name, labels: node.labels ?? {} },
  status: { addresses: node.ips.map((address) => ({ type: "InternalIP", address })) },
});

export function snapshotOf(cluster: Cluster): PolicySnapshot {
  const defined = <T>(v: T | undefined): v is T => v !== undefined;
  return new PolicySnapshot(
    cluster.pods.map((p) => podObject(p)?.object).filter(defined),
    cluster.namespaces.map((n) => namespaceObject(n)?.object).filter(defined),
    cluster.policies.map((p) => networkPolicyObject(p)?.object).filter(defined),
    (cluster.clusterPolicies ?? []).map((c) => clusterNetworkPolicyObject(c)?.object).filter(defined),
    (cluster.nodes ?? []).map((n) => nodeObject(rawNode(n))?.object).filter(defined),
  );
}

/**
 * A probe as the datapath answers it from compiled policies: the sender's egress and the
 * receiver's ingress, each undefined (not isolated) or some rule covering the other end's
 * address and the port; the receiver's own node always let in; a pod reaches itself.
 */
export function compiledAllows(
  cluster: Cluster,
  compiled: Map<string, CompiledPolicy>,
  probe: Probe,
  judge: DirectionJudge = datapathJudge,
): boolean {
  const family = probe.family ?? 4;
  const from = resolveEnd(cluster, probe.from, family);
  const to = resolveEnd(cluster, probe.to, family);
  if (!from || !to) return false;
  if (from.pod && from.pod === to.pod) return true;
  const keyOf = (p: V1Pod) => `${p.metadata?.namespace}/${p.metadata?.name}`;
  const out = from.pod ? judge(compiled.get(keyOf(from.pod))?.egress, to.ip, probe) : true;
  const fromOwnNode = from.node !== undefined && from.node === to.pod?.spec?.nodeName;
  const inward = to.pod && !fromOwnNode ? judge(compiled.get(keyOf(to.pod))?.ingress, from.ip, probe) : true;
  return out && inward;
}

/** How one direction of a compiled policy judges the other end's address and the port. */
export type DirectionJudge = (direction: DirectionPolicy | undefined, ip: string, probe: Probe) => boolean;

/** Whether a compiled rule covers the other end's address and the probe's port. */
export const ruleCovers = (rule: CompiledRule, ip: string, probe: Probe): boolean =>
  peersCover(rule.peers, ip) && portsCover(rule.ports, probe);

/**
 * As the datapath judges one direction: the first Admin rule that matches decides (Pass
 * ends the tier); then NetworkPolicy's rules when it isolates the pod; then the first
 * Baseline rule that matches; then allowed. The conformance suite's mutation check
 * passes altered copies of this in its place.
 */
export const datapathJudge: DirectionJudge = (direction, ip, probe) => {
  if (!direction) return true;
  const matches = (r: CompiledRule) => ruleCovers(r, ip, probe);
  const admin = direction.admin?.find(matches);
  if (admin && admin.action !== "Pass") return admin.action === "Accept";
  if (!direction.unisolated) return direction.rules.some(matches);
  const baseline = direction.baseline?.find(matches);
  return baseline === undefined || baseline.action !== "Deny";
};

const peersCover = (peers: PeerBlock[] | "any", ip: string) =>
  peers === "any" || peers.some((b) => within(ip, b.cidr) && !b.except.some((e) => within(ip, e)));

const portsCover = (ports: PortRange[] | "any", probe: Probe) =>
  ports === "any" || ports.some((r) => r.protocol === probe.protocol && probe.port >= r.from && probe.port <= r.to);

function within(ip: string, cidr: string): boolean {
  const [base = "", length = ""] = cidr.split("/");
  const a = address(ip);
  const n = address(base);
  if (!a || !n || a.family !== n.family) return false;
  const shift = BigInt((a.family === AF_INET ? 32 : 128) - Number(length));
  return a.value >> shift === n.value >> shift;
}

/** The truth table the compiled policies give (compiled here unless given). */
export function observedTable(
  cluster: Cluster,
  on: { port: number; protocol: Protocol; family?: 4 | 6 },
  ends: { from?: Endpoint[]; to?: Endpoint[] } = {},
  compiled: Map<string, CompiledPolicy> = compileCluster(cluster),
): TruthTable {
  return truthTable(cluster, on, ends, (probe) => compiledAllows(cluster, compiled, probe));
}
