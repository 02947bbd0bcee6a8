/**
 * An oracle for NetworkPolicy: is one connection allowed, read straight from the API's
 * prose over the raw API objects, the way the upstream netpol e2e tests' reachability
 * model and cyclonus's truth tables do. It shares no code with src/agent/policy (only
 * address parsing from src/cni/address.ts), so that the compiler is checked against a
 * second, plain reading of the same words:
 *
 * - "Traffic is allowed to a pod if there are no NetworkPolicies selecting the pod ... OR
 *   if the traffic source is the pod's local node, OR if the traffic matches at least one
 *   ingress rule across all of the NetworkPolicy objects whose podSelector matches the
 *   pod" (NetworkPolicySpec.ingress), counting only policies whose policyTypes include
 *   Ingress (defaulted: Ingress always, Egress when there are egress rules); egress
 *   likewise for the sending pod. A connection works when the sender's egress and the
 *   receiver's ingress both allow it.
 * - A rule matches when its peers (from/to: none or empty = any) and its ports (none or
 *   empty = any) both match. Peers: podSelector (the policy's namespace), namespaceSelector
 *   (all pods of the namespaces), both (AND), ipBlock (cidr minus except, by address).
 *   Ports: protocol (TCP unless given) and number, number..endPort, a container port's
 *   name on the receiving pod, or the protocol alone.
 * - A policy the API server would refuse (unknown protocol or policyType, port out of
 *   range, endPort below port or without a numeric port, malformed CIDR, except not
 *   strictly inside its cidr, an invalid selector, a peer of no kind or two) reaches an
 *   agent only from a newer API or around validation; the agent's choice, as
 *   network-policy-api prescribes for what an implementation cannot read: it isolates
 *   the pods it selects (all of its namespace's when its podSelector is invalid) in the
 *   directions it governs (both when policyTypes is invalid) and allows nothing. Only
 *   the rules of the directions it governs are checked (a malformed section that has no
 *   effect does not make a policy unreadable).
 * - hostNetwork pods are the node: never chosen by selectors, never isolated, their
 *   traffic is the node's; finished pods (Succeeded, Failed) take no part.
 * - A pod reaches itself (its traffic to its own address never leaves it; the upstream
 *   e2e tests ignore these loopback probes).
 */
import type { V1Namespace, V1Pod } from "@kubernetes/client-node";
import { type Address, AF_INET, parseAddress } from "../../src/cni/address";

/** Addresses are read once each: a truth table asks about the same few thousands of times. */
const addresses = new Map<string, Address | undefined>();
function address(text: string): Address | undefined {
  if (!addresses.has(text)) addresses.set(text, parseAddress(text));
  return addresses.get(text);
}

export type Protocol = "TCP" | "UDP" | "SCTP";

interface ModelNode {
  name: string;
  ips: string[];
  /** For ClusterNetworkPolicy's `nodes` peers (cluster-policy-model.ts). */
  labels?: Record<string, string>;
}

type Raw = Record<string, unknown>;

/** A NetworkPolicy as the API serves it (JSON field names: `from`, not the client's `_from`). */
export interface RawPolicy {
  metadata: { namespace: string; name: string };
  spec: Raw;
}

/** A ClusterNetworkPolicy as the API serves it (read by cluster-policy-model.ts). */
export interface RawClusterPolicy {
  metadata: { name: string };
  spec: Raw;
}

export interface Cluster {
  namespaces: V1Namespace[];
  pods: V1Pod[];
  policies: RawPolicy[];
  nodes?: ModelNode[];
  clusterPolicies?: RawClusterPolicy[];
}

/** A pod ("namespace/name"), an address outside the cluster's pods, or a node. */
export type Endpoint = { pod: string } | { ip: string } | { node: string };

export interface Probe {
  from: Endpoint;
  to: Endpoint;
  port: number;
  protocol: Protocol;
  /** Which of dual-stack pods' addresses the connection uses (4 unless given). */
  family?: 4 | 6;
}

type LabelMap = Record<string, string>;

/** Who is at one end: a policed pod, or an address (the node's own when `node` is set). */
export interface End {
  ip: string;
  pod?: V1Pod;
  node?: string;
}

export function allowed(cluster: Cluster, probe: Probe): boolean {
  const family = probe.family ?? 4;
  const from = resolveEnd(cluster, probe.from, family);
  const to = resolveEnd(cluster, probe.to, family);
  if (!from || !to) return false;
  if (from.pod && from.pod === to.pod) return true;
  const out = from.pod ? sendingAllowed(cluster, from.pod, to, probe) : true;
  const fromOwnNode = from.node !== undefined && from.node === to.pod?.spec?.nodeName;
  const inward = to.pod && !fromOwnNode ? receivingAllowed(cluster, to.pod, from, probe) : true;
  return out && inward;
}

/**
 * Who is at one end of a probe: a running pod with its address of the family, an
 * address, or a node's address; a hostNetwork pod is its node. Undefined when there is
 * no such end (a finished pod, no address of the family).
 */
export function resolveEnd(cluster: Cluster, end: Endpoint, family: 4 | 6): End | undefined {
  if ("ip" in end) return { ip: end.ip };
  if ("node" in end) {
    const ip = cluster.nodes?.find((n) => n.name === end.node)?.ips.find((a) => familyOf(a) === family);
    return ip ? { ip, node: end.node } : undefined;
  }
  const pod = cluster.pods.find((p) => `${p.metadata?.namespace}/${p.metadata?.name}` === end.pod);
  if (!pod || pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed") return undefined;
  const ip = (pod.status?.podIPs ?? []).map((a) => a.ip).find((a) => familyOf(a) === family);
  if (!ip) return undefined;
  return pod.spec?.hostNetwork ? { ip, node: pod.spec.nodeName } : { ip, pod };
}

function familyOf(ip: string): 4 | 6 | undefined {
  const a = address(ip);
  return a === undefined ? undefined : a.family === AF_INET ? 4 : 6;
}

/**
 * The policies of the pod's namespace that select it and govern this direction; a refused
 * one selects where its podSelector cannot be read and governs both directions where its
 * policyTypes cannot (it allows nothing: rulesOf).
 */
function governing(cluster: Cluster, pod: V1Pod, type: "Ingress" | "Egress"): RawPolicy[] {
  return cluster.policies.filter((p) => {
    if (p.metadata.namespace !== pod.metadata?.namespace) return false;
    const selected = selects((p.spec.podSelector ?? {}) as Raw, pod.metadata?.labels ?? {});
    const types = policyTypesOf(p);
    const governs = types.some((t) => t !== "Ingress" && t !== "Egress") || types.includes(type);
    return selected !== false && governs;
  });
}

/** A direction's rules: none for a policy the API server would refuse. */
function rulesOf(p: RawPolicy, direction: "ingress" | "egress"): Raw[] {
  return acceptable(p) ? ((p.spec[direction] ?? []) as Raw[]) : [];
}

function policyTypesOf(p: RawPolicy): string[] {
  const written = (p.spec.policyTypes ?? []) as string[];
  if (written.length > 0) return written;
  return ((p.spec.egress ?? []) as Raw[]).length > 0 ? ["Ingress", "Egress"] : ["Ingress"];
}

/**
 * NetworkPolicy's word on one direction of a pod, for the tiers' model
 * (cluster-policy-model.ts): undefined when no policy isolates the pod that way.
 */
export function networkPolicyVerdict(
  cluster: Cluster,
  pod: V1Pod,
  direction: "ingress" | "egress",
  other: End,
  probe: Probe,
): boolean | undefined {
  if (governing(cluster, pod, direction === "ingress" ? "Ingress" : "Egress").length === 0) return undefined;
  return direction === "ingress"
    ? receivingAllowed(cluster, pod, other, probe)
    : sendingAllowed(cluster, pod, other, probe);
}

/** The container port of that name and protocol on the pod (sidecars included). */
export const namedPortOf = (pod: V1Pod, name: string, protocol: Protocol) => containerPortNamed(pod, name, protocol);

/** Whether the address is in the CIDR (same family, same bits up to its length). */
export const addressIn = (ip: string, cidr: string) => inCidr(ip, cidr);

/** Whether labels satisfy a selector as the API writes it (false for one it would refuse). */
export const labelsSelected = (selector: Raw, labels: LabelMap) => selects(selector, labels) === true;
/** Whether the API would accept the selector. */
export const selectorAcceptable = (selector: Raw) => selects(selector, {}) !== undefined;

function receivingAllowed(cluster: Cluster, pod: V1Pod, from: End, probe: Probe): boolean {
  const policies = governing(cluster, pod, "Ingress");
  if (policies.length === 0) return true;
  return policies.some((p) =>
    rulesOf(p, "ingress").some(
      (rule) =>
        portsMatch(rule.ports as Raw[] | undefined, probe, pod) &&
        peersMatch(cluster, rule.from as Raw[] | undefined, from, p),
    ),
  );
}

function sendingAllowed(cluster: Cluster, pod: V1Pod, to: End, probe: Probe): boolean {
  const policies = governing(cluster, pod, "Egress");
  if (policies.length === 0) return true;
  return policies.some((p) =>
    rulesOf(p, "egress").some(
      (rule) =>
        portsMatch(rule.ports as Raw[] | undefined, probe, to.pod) &&
        peersMatch(cluster, rule.to as Raw[] | undefined, to, p),
    ),
  );
}

/** Ports: any when none; a name is looked up on the receiving pod (an address has no names). */
function portsMatch(ports: Raw[] | undefined, probe: Probe, receiver: V1Pod | undefined): boolean {
  if (!ports || ports.length === 0) return true;
  return ports.some((p) => {
    if ((p.protocol ?? "TCP") !== probe.protocol) return false;
    if (p.port === undefined || p.port === null) return true;
    if (typeof p.port === "number") return probe.port >= p.port && probe.port <= ((p.endPort as number) ?? p.port);
    return receiver !== undefined && containerPortNamed(receiver, String(p.port), probe.protocol) === probe.port;
  });
}

function containerPortNamed(pod: V1Pod, name: string, protocol: Protocol): number | undefined {
  const sidecars = (pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === "Always");
  for (const c of [...(pod.spec?.containers ?? []), ...sidecars]) {
    for (const p of c.ports ?? []) if (p.name === name && (p.protocol ?? "TCP") === protocol) return p.containerPort;
  }
  return undefined;
}

function peersMatch(cluster: Cluster, peers: Raw[] | undefined, end: End, policy: RawPolicy): boolean {
  if (!peers || peers.length === 0) return true;
  return peers.some((peer) => {
    const block = peer.ipBlock as { cidr: string; except?: string[] } | undefined;
    if (block) return inCidr(end.ip, block.cidr) && !(block.except ?? []).some((e) => inCidr(end.ip, e));
    if (!end.pod) return false;
    const podNs = end.pod.metadata?.namespace;
    const nsLabels = cluster.namespaces.find((n) => n.metadata?.name === podNs)?.metadata?.labels ?? {};
    const nsOk = peer.namespaceSelector
      ? selects(peer.namespaceSelector as Raw, nsLabels) === true
      : podNs === policy.metadata.namespace;
    const podOk = peer.podSelector ? selects(peer.podSelector as Raw, end.pod.metadata?.labels ?? {}) === true : true;
    return nsOk && podOk;
  });
}

function inCidr(ip: string, cidr: string): boolean {
  const [base = "", lengthText = ""] = cidr.split("/");
  const a = address(ip);
  const n = address(base);
  if (!a || !n || a.family !== n.family) return false;
  const bits = a.family === AF_INET ? 32 : 128;
  const shift = BigInt(bits - Number(lengthText));
  return a.value >> shift === n.value >> shift;
}

/** true / false; undefined when the selector is not one the API accepts. */
function selects(selector: Raw, labels: LabelMap): boolean | undefined {
  const expressions = (selector.matchExpressions ?? []) as Raw[];
  if (!expressions.every(expressionAcceptable)) return undefined;
  const matchLabels = Object.entries((selector.matchLabels ?? {}) as LabelMap);
  const byLabels = matchLabels.every(([k, v]) => Object.hasOwn(labels, k) && labels[k] === v);
  return byLabels && expressions.every((e) => expressionHolds(e, labels));
}

function expressionAcceptable(e: Raw): boolean {
  const count = ((e.values ?? []) as string[]).length;
  if (e.operator === "In" || e.operator === "NotIn") return count > 0;
  if (e.operator === "Exists" || e.operator === "DoesNotExist") return count === 0;
  return false;
}

/** In: has the label with one of the values; NotIn: hasn't it with one of them; Exists; DoesNotExist. */
function expressionHolds(e: Raw, labels: LabelMap): boolean {
  const key = e.key as string;
  const has = Object.hasOwn(labels, key);
  const inValues = has && ((e.values ?? []) as string[]).includes(labels[key] as string);
  if (e.operator === "In") return inValues;
  if (e.operator === "NotIn") return !inValues;
  if (e.operator === "Exists") return has;
  return !has;
}

// ---- what the API server would refuse --------------------------------------------------

const verdicts = new WeakMap<RawPolicy, boolean>();

/** Whether the API server would have accepted the policy (ValidateNetworkPolicySpec, as documented). */
function acceptable(p: RawPolicy): boolean {
  let verdict = verdicts.get(p);
  if (verdict === undefined) {
    verdict = judge(p);
    verdicts.set(p, verdict);
  }
  return verdict;
}

function judge(p: RawPolicy): boolean {
  const spec = p.spec;
  if (selects((spec.podSelector ?? {}) as Raw, {}) === undefined) return false;
  const types = policyTypesOf(p);
  if (types.some((t) => t !== "Ingress" && t !== "Egress")) return false;
  const governed = (type: string, rules: unknown) => (types.includes(type) ? ((rules ?? []) as Raw[]) : []);
  const rules = [
    ...governed("Ingress", spec.ingress).map((r) => ({ peers: r.from, ports: r.ports })),
    ...governed("Egress", spec.egress).map((r) => ({ peers: r.to, ports: r.ports })),
  ];
  return rules.every(
    (r) => ((r.ports ?? []) as Raw[]).every(portAcceptable) && ((r.peers ?? []) as Raw[]).every(peerAcceptable),
  );
}

function portAcceptable(p: Raw): boolean {
  if (!["TCP", "UDP", "SCTP"].includes((p.protocol ?? "TCP") as string)) return false;
  const valid = (n: unknown) => typeof n === "number" && Number.isInteger(n) && n >= 1 && n <= 65535;
  if (p.endPort !== undefined) return valid(p.port) && valid(p.endPort) && (p.endPort as number) >= (p.port as number);
  if (typeof p.port === "string") return p.port !== "";
  return p.port === undefined || valid(p.port);
}

function peerAcceptable(peer: Raw): boolean {
  const kinds = ["podSelector", "namespaceSelector", "ipBlock"].filter((k) => peer[k] !== undefined);
  if (kinds.length === 0 || (peer.ipBlock !== undefined && kinds.length > 1)) return false;
  for (const k of ["podSelector", "namespaceSelector"]) {
    if (peer[k] !== undefined && selects(peer[k] as Raw, {}) === undefined) return false;
  }
  const block = peer.ipBlock as { cidr?: string; except?: string[] } | undefined;
  if (!block) return true;
  const outer = cidrParts(block.cidr);
  return outer !== undefined && (block.except ?? []).every((e) => strictlyWithin(cidrParts(e), outer));
}

function cidrParts(text: unknown): { family: number; value: bigint; length: number } | undefined {
  if (typeof text !== "string" || !/^[^/]+\/\d{1,3}$/.test(text)) return undefined;
  const [base = "", lengthText = ""] = text.split("/");
  const a = address(base);
  const length = Number(lengthText);
  if (!a || length > (a.family === AF_INET ? 32 : 128)) return undefined;
  return { family: a.family, value: a.value, length };
}

function strictlyWithin(inner: ReturnType<typeof cidrParts>, outer: NonNullable<ReturnType<typeof cidrParts>>) {
  if (!inner || inner.family !== outer.family || inner.length <= outer.length) return false;
  const shift = BigInt((outer.family === AF_INET ? 32 : 128) - outer.length);
  return inner.value >> shift === outer.value >> shift;
}

// ---- truth tables ------------------------------------------------------------------------

export interface TruthTable {
  from: string[];
  to: string[];
  /** allowed[i][j]: from[i] to to[j]. */
  allowed: boolean[][];
}

export const endpointName = (e: Endpoint): string => ("pod" in e ? e.pod : "ip" in e ? `ip:${e.ip}` : `node:${e.node}`);

/** The running pods of a cluster, as probe endpoints. */
export function podEndpoints(cluster: Cluster): Endpoint[] {
  return cluster.pods
    .filter((p) => p.status?.phase !== "Succeeded" && p.status?.phase !== "Failed")
    .map((p) => ({ pod: `${p.metadata?.namespace}/${p.metadata?.name}` }));
}

/** Every from × to probe on one port and protocol, answered by `decide` (the model unless given). */
export function truthTable(
  cluster: Cluster,
  on: { port: number; protocol: Protocol; family?: 4 | 6 },
  ends: { from?: Endpoint[]; to?: Endpoint[] } = {},
  decide: (probe: Probe) => boolean = (probe) => allowed(cluster, probe),
): TruthTable {
  const from = ends.from ?? podEndpoints(cluster);
  const to = ends.to ?? podEndpoints(cluster);
  return {
    from: from.map(endpointName),
    to: to.map(endpointName),
    allowed: from.map((f) => to.map((t) => decide({ ...on, from: f, to: t }))),
  };
}

/** The table as text: "." allowed, "X" denied. */
export function tableText(table: TruthTable): string {
  return grid(table, (i, j) => (table.allowed[i]?.[j] ? "." : "X"));
}

/**
 * Expected against observed: "" when they agree; otherwise a grid ("." and "X" where
 * they agree, "+" observed allowed but expected denied, "-" the reverse) and each
 * disagreement in words.
 */
export function diffTables(expected: TruthTable, observed: TruthTable): string {
  const wrong: string[] = [];
  const text = grid(expected, (i, j) => {
    const want = expected.allowed[i]?.[j];
    const got = observed.allowed[i]?.[j];
    if (want === got) return want ? "." : "X";
    wrong.push(
      `${expected.from[i]} -> ${expected.to[j]}: expected ${want ? "allowed" : "denied"}, observed ${got ? "allowed" : "denied"}`,
    );
    return got ? "+" : "-";
  });
  if (wrong.length === 0) return "";
  return `${text}\n(+ observed allowed, expected denied; - observed denied, expected allowed)\n${wrong.join("\n")}`;
}

function grid(table: TruthTable, cell: (i: number, j: number) => string): string {
  const width = Math.max(...table.from.map((f) => f.length), 4);
  const header = `${"".padEnd(width)} ${table.to.map((_, j) => String(j % 10)).join(" ")}`;
  const legend = table.to.map((t, j) => `${String(j % 10)}=${t}`).join("  ");
  const rows = table.from.map((f, i) => `${f.padEnd(width)} ${table.to.map((_, j) => cell(i, j)).join(" ")}`);
  return [legend, header, ...rows].join("\n");
}
