/**
 * What networking.k8s.io/v1 NetworkPolicy allows one pod, compiled for the datapath: per
 * direction, undefined (not isolated: everything allowed) or the rules whose union is
 * allowed (none: everything denied). Pure; the policies and pods come through a
 * `CompileSource`, which the incremental index (policy-index.ts) answers from its caches
 * and snapshot.ts by scanning.
 *
 * The semantics, from the API reference and the NetworkPolicy concepts page:
 * - A pod is isolated for ingress (egress) when a policy of its namespace selects it and
 *   has Ingress (Egress) in policyTypes (defaulted as parse.ts says); it may then receive
 *   (send) only what some rule of those policies allows: policies are additive.
 * - A rule allows traffic that matches both its peers and its ports. Peers chosen by
 *   labels contribute their pods' addresses as host prefixes; a pod without an address
 *   contributes nothing, and so do pods that have finished (Succeeded, Failed: their
 *   addresses may already be another pod's) and hostNetwork pods. The latter is the
 *   concepts page's "most common implementation": a hostNetwork pod has the node's
 *   address, so it is neither selected by selectors nor policed itself, and its traffic
 *   is the node's (from the pod's own node always allowed, by the datapath).
 * - A named port is resolved against container ports (name and protocol): for ingress,
 *   the target pod's own; for egress, each destination pod's, so one rule becomes one
 *   compiled rule per resolved port set, its pods grouped by it. A name resolving to
 *   nothing matches nothing, and it never matches an ipBlock peer (not a pod).
 * - A rule left with no peer or no port after resolution allows nothing and is dropped:
 *   it must never become "any".
 * - No ports: every port and protocol (ICMP too), "any".
 *
 * The output is canonical: rules with the same ports are merged (their peers' union,
 * their origins listed), overlapping and adjacent port ranges joined, peers deduplicated
 * and sorted by address, rules sorted by ports, so equal inputs give deep-equal output
 * (`policyFingerprint` names it: pods with one policy share one copy in the datapath).
 * A rule allowing every peer on every port makes the others redundant; it stays alone.
 *
 * Bounds: the datapath holds MAX_RULES rules per direction and MAX_PORT_RANGES ranges
 * per rule. A direction past a bound, after merging, denies everything and says why in
 * `problems`: never allow what the policies do not.
 *
 * Unreadable policies (parse.ts lists what makes one) fail closed, as network-policy-api
 * has its implementations treat what they cannot read: such a policy isolates the pods it
 * selects (every pod of its namespace when its podSelector cannot be read) in the
 * directions it isolates (both when its policyTypes cannot be read), and allows nothing;
 * the namespace's readable policies still add what they allow. It is named in
 * `selectedBy` and, with its reasons, in `problems` of each such pod. Guessing what it
 * meant could allow what its author denied; skipping it would leave its pods open. Nothing
 * that passes the API server's validation is unreadable here (legacy CIDR forms are read
 * as it reads them), so only an API newer than this agent, or an object written around
 * validation, meets this.
 *
 * ClusterNetworkPolicies (cluster-parse.ts) add tiers around a direction's NetworkPolicy
 * rules, as DirectionPolicy describes: `admin` holds the rules of the Admin-tier policies
 * whose subject selects the pod, `baseline` the Baseline tier's, each in precedence order:
 * by priority, then by the policy's name (the API leaves ties to the implementation),
 * then in written order. Their rules are never merged (order decides); one with named
 * ports becomes adjacent rules of the same action, one per set of numbers its names take
 * (ingress: on the pod; egress: on each destination pod; a node or a network has none);
 * one that can match nothing after that (no peer, no port) is left out, which changes no
 * verdict. A direction is present when a NetworkPolicy isolates it or a tier has a rule
 * for it; `unisolated` says when no NetworkPolicy does. The bounds count the tiers' rules
 * with the NetworkPolicy rules; past one, the direction denies everything as above.
 * `clusterSelectedBy` names the ClusterNetworkPolicies selecting the pod and `problems`
 * lists what they could not read (before the bounds').
 */
import { AF_INET, addressBits, formatSubnet, parseAddress, type Subnet } from "../../../cni/address";
import { sha256Hex } from "../../../sys/sha256";
import { getOrMake } from "../../collections";
import type { ClusterPeer, ClusterSubject, NodePeer, ParsedClusterPolicy, ParsedClusterRule } from "./cluster-parse";
import type { PodPort, PolicyPod } from "./objects";
import type {
  Direction,
  NamedPort,
  NumberedPorts,
  ParsedPolicy,
  ParsedPort,
  ParsedRule,
  PolicyParse,
  PolicyProblem,
  PolicyProtocol,
  SelectorPeer,
} from "./parse";
import { type Labels, selectorMatches } from "./selectors";

export type { PolicyProblem, PolicyProtocol } from "./parse";

/** Inclusive, 1..65535; "all ports of TCP" is {TCP, 1, 65535}. */
export interface PortRange {
  protocol: PolicyProtocol;
  from: number;
  to: number;
}

/** Canonical text; a pod's address is cidr "10.1.2.3/32", except []. */
export interface PeerBlock {
  cidr: string;
  except: string[];
}

export interface CompiledRule {
  /** Which policies and rules ("ns/a ingress[0], ns/b ingress[1]"): the monitor shows it. */
  origin: string;
  peers: PeerBlock[] | "any";
  ports: PortRange[] | "any";
}

/** A ClusterNetworkPolicy's tiers: Admin before the namespace's NetworkPolicies, Baseline after. */
export type Tier = "Admin" | "Baseline";
/** What a ClusterNetworkPolicy rule does with what it matches (Pass: on to the next tier). */
export type TierAction = "Accept" | "Deny" | "Pass";

/** A ClusterNetworkPolicy rule, compiled: matches as a CompiledRule does, then acts. */
export interface TierRule extends CompiledRule {
  action: TierAction;
  /** The ClusterNetworkPolicy's name. */
  policy: string;
  /** The rule's `name`, or its index in the policy's list when it has none ("ingress[2]"). */
  rule: string;
}

/**
 * One direction of a pod, judged (a direction left undefined in CompiledPolicy is not:
 * everything passes). Evaluated in order, as the network-policy-api has it:
 * - `admin`: the first rule that matches decides (Accept, Deny), or Pass skips the rest
 *   of the tier;
 * - then, when a NetworkPolicy isolates the pod (`unisolated` unset), `rules` decide:
 *   allowed when one matches, else denied (no rules: everything denied);
 * - else `baseline`: the first rule that matches decides;
 * - else allowed.
 * With neither tier present this is NetworkPolicy alone, as before the tiers.
 */
export interface DirectionPolicy {
  rules: CompiledRule[];
  /** No NetworkPolicy isolates the pod in this direction: `rules` is empty and decides nothing. */
  unisolated?: true;
  /** Admin-tier rules in precedence order (priority, then name, then written order). */
  admin?: TierRule[];
  /** Baseline-tier rules in precedence order. */
  baseline?: TierRule[];
}

/** A direction left undefined is not isolated. */
export interface CompiledPolicy {
  ingress?: DirectionPolicy;
  egress?: DirectionPolicy;
}

export const MAX_RULES = 64;
export const MAX_PORT_RANGES = 16;

/** An unreadable policy that selects a pod, as far as it could be read. */
export interface UnreadableSelecting {
  key: string;
  isolates: readonly Direction[];
  audit?: true;
}

/**
 * enforced: what the datapath enforces, audit-mode policies left out; audited: every
 * policy as if enforced (what an audit-mode policy would make of the pod's traffic).
 */
export type CompileMode = "enforced" | "audited";

/** Where the compiler reads the cluster from. */
export interface CompileSource {
  /** The readable policies of the pod's namespace whose podSelector selects it. */
  selecting(pod: PolicyPod): Iterable<ParsedPolicy>;
  /** The unreadable policies of the pod's namespace whose podSelector selects it or could not be read. */
  unreadable(pod: PolicyPod): Iterable<UnreadableSelecting>;
  /** The pods whose labels and namespace a selector peer selects (compilePod skips the ones that are no peers). */
  peerPods(peer: SelectorPeer): Iterable<PolicyPod>;
  /** The ClusterNetworkPolicies whose subject selects the pod (subjectSelects); none when not given. */
  clusterSelecting?(pod: PolicyPod): Iterable<ParsedClusterPolicy>;
  /** The addresses of the Nodes a `nodes` peer's selector matches. */
  nodeAddresses?(peer: NodePeer): Iterable<string>;
}

export interface CompileResult {
  policy: CompiledPolicy;
  /** The readable policies that select the pod, by key. */
  selectedBy: string[];
  /**
   * The directions past a bound (`direction` set), after the index's unreadable policies
   * that might select the pod and the problems of the ClusterNetworkPolicies selecting it.
   */
  problems: PolicyProblem[];
  /** The ClusterNetworkPolicies whose subject selects the pod, by name; absent when none. */
  clusterSelectedBy?: string[];
  /** The audit-mode policies that select it (NetworkPolicies by key, ClusterNetworkPolicies by name); absent when none. */
  auditedBy?: string[];
}

/** A pod that selectors may choose as a peer: one with its own addresses that is still running. */
export const isPeerCandidate = (pod: PolicyPod): boolean => !pod.hostNetwork && pod.terminal !== true;

/**
 * Whether a selector peer's labels and scope choose the pod: its own namespace's pods,
 * or those of the namespaces whose labels `namespaces` selects (a namespace not seen yet
 * has no labels). Whether the pod may be a peer at all is isPeerCandidate's question.
 */
export function peerChooses(peer: SelectorPeer, pod: PolicyPod, namespaceLabels: Labels): boolean {
  const inScope = peer.namespaces
    ? selectorMatches(peer.namespaces, namespaceLabels)
    : pod.namespace === peer.namespace;
  return inScope && selectorMatches(peer.pods, pod.labels);
}

/**
 * Whether a ClusterNetworkPolicy's subject selects the pod: its namespace's labels and
 * its own (a namespace not seen yet has none); never a pod that is no peer candidate
 * (hostNetwork, finished).
 */
export function subjectSelects(subject: ClusterSubject, pod: PolicyPod, namespaceLabels: Labels): boolean {
  return (
    isPeerCandidate(pod) &&
    selectorMatches(subject.namespaces, namespaceLabels) &&
    selectorMatches(subject.pods, pod.labels)
  );
}

/** Tier order: priority, then name. */
export const byPrecedence = (a: ParsedClusterPolicy, b: ParsedClusterPolicy) =>
  a.priority - b.priority || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** A pod whose traffic this node's datapath polices. */
export const isCompileTarget = (pod: PolicyPod, localNode: string): boolean =>
  pod.nodeName === localNode && isPeerCandidate(pod);

export function compilePod(target: PolicyPod, source: CompileSource, mode: CompileMode = "enforced"): CompileResult {
  if (!isPeerCandidate(target)) return { policy: {}, selectedBy: [], problems: [] };
  const byKey = <T extends { key: string }>(a: T, b: T) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
  const inMode = <T extends { audit?: true }>(p: T) => mode === "audited" || !p.audit;
  const allPolicies = [...source.selecting(target)];
  const allUnreadable = [...source.unreadable(target)];
  const allCluster = [...(source.clusterSelecting?.(target) ?? [])];
  const auditedBy = [
    ...[...allPolicies, ...allUnreadable].filter((p) => p.audit).map((p) => p.key),
    ...allCluster.filter((c) => c.audit).map((c) => c.name),
  ].sort();
  const policies = allPolicies.filter(inMode).sort(byKey);
  const unreadable = allUnreadable.filter(inMode).sort(byKey);
  const cluster = allCluster.filter(inMode).sort(byPrecedence);
  const problems: PolicyProblem[] = cluster.flatMap((c) => c.problems);
  const policy: CompiledPolicy = {};
  const np = { policies, unreadable };
  const ingress = compileDirection("ingress", target, np, cluster, source, problems);
  if (ingress) policy.ingress = ingress;
  const egress = compileDirection("egress", target, np, cluster, source, problems);
  if (egress) policy.egress = egress;
  const selectedBy = [...policies, ...unreadable].map((p) => p.key).sort();
  const result: CompileResult = { policy, selectedBy, problems };
  if (cluster.length > 0) result.clusterSelectedBy = cluster.map((c) => c.name).sort();
  if (auditedBy.length > 0) result.auditedBy = auditedBy;
  return result;
}

function compileDirection(
  direction: Direction,
  target: PolicyPod,
  np: { policies: ParsedPolicy[]; unreadable: UnreadableSelecting[] },
  cluster: ParsedClusterPolicy[],
  source: CompileSource,
  problems: PolicyProblem[],
): DirectionPolicy | undefined {
  const isolating = np.policies.filter((p) => p[direction] !== undefined);
  const closed = np.unreadable.some((u) => u.isolates.includes(direction));
  const admin = tierRules(direction, "Admin", cluster, target, source);
  const baseline = tierRules(direction, "Baseline", cluster, target, source);
  const tiered = admin.length + baseline.length > 0;
  if (isolating.length === 0 && !tiered) return closed ? { rules: [] } : undefined;
  const drafts: Draft[] = [];
  for (const policy of isolating) {
    for (const rule of policy[direction] ?? []) drafts.push(...draftsOf(direction, rule, target, source));
  }
  const out: DirectionPolicy = { rules: isolating.length > 0 ? mergeByPorts(drafts) : [] };
  if (isolating.length === 0 && !closed) out.unisolated = true;
  if (admin.length > 0) out.admin = admin;
  if (baseline.length > 0) out.baseline = baseline;
  const over = overBounds(out.rules, admin, baseline);
  if (!over) return out;
  const tierPolicies = cluster.filter((c) => [...admin, ...baseline].some((r) => r.policy === c.name));
  const policy = [...isolating.map((p) => p.key), ...tierPolicies.map((c) => c.key)].join(", ");
  problems.push({
    policy,
    kind: over.kind,
    reason: `${direction}: ${over.reason}; all ${direction} denied`,
    direction,
  });
  return { rules: [] };
}

// ---- ClusterNetworkPolicy rules ----------------------------------------------------------

/** One tier's rules for a direction: its policies in precedence order, each's rules in written order. */
function tierRules(
  direction: Direction,
  tier: Tier,
  cluster: ParsedClusterPolicy[],
  target: PolicyPod,
  source: CompileSource,
): TierRule[] {
  const rules: TierRule[] = [];
  for (const policy of cluster) {
    if (policy.tier !== tier) continue;
    for (const rule of policy[direction]) rules.push(...tierRulesOf(direction, policy, rule, target, source));
  }
  return rules;
}

/** A rule as the datapath's: one per set of ports its names take, none when it can match nothing. */
function tierRulesOf(
  direction: Direction,
  policy: ParsedClusterPolicy,
  rule: ParsedClusterRule,
  target: PolicyPod,
  source: CompileSource,
): TierRule[] {
  const made = (peers: PeerSet, ports: PortRange[] | "any"): TierRule => ({
    origin: rule.origin,
    peers: finalPeers(peers),
    ports,
    action: rule.action,
    policy: policy.name,
    rule: rule.name,
  });
  const peers = rule.peers === "any" ? "any" : clusterPeerSet(rule.peers, source);
  if (rule.ports === "any") return hasPeers(peers) ? [made(peers, "any")] : [];
  const numbered: PortRange[] = rule.ports.filter(isNumbered).map(({ protocol, from, to }) => ({ protocol, from, to }));
  const named = rule.ports.filter(isNamed);
  if (direction === "ingress") {
    const ports = normalizePorts([...numbered, ...resolveNames(named, target.ports)]);
    return ports.length > 0 && hasPeers(peers) ? [made(peers, ports)] : [];
  }
  const rules = numbered.length > 0 && hasPeers(peers) ? [made(peers, normalizePorts(numbered))] : [];
  if (named.length > 0 && rule.peers !== "any") {
    const groups = namedPortGroups(rule.peers, named, source);
    // Canonical: by their ports, as NetworkPolicy's rules are (one action: the order decides nothing).
    groups.sort((a, b) => (portsKey(a.ports) < portsKey(b.ports) ? -1 : 1));
    for (const group of groups) rules.push(made(group.peers, group.ports));
  }
  return rules;
}

function clusterPeerSet(peers: readonly ClusterPeer[], source: CompileSource): Map<string, SortedPeer> {
  const set = new Map<string, SortedPeer>();
  for (const peer of peers) {
    if (peer.kind === "block") {
      const block = sortedPeer(peer.cidr, peer.except);
      set.set(block.sortKey, block);
    } else if (peer.kind === "nodes") {
      for (const ip of source.nodeAddresses?.(peer) ?? []) addHost(set, ip);
    } else {
      for (const pod of source.peerPods(peer)) if (isPeerCandidate(pod)) for (const ip of pod.ips) addHost(set, ip);
    }
  }
  return set;
}

// ---- one rule's drafts -------------------------------------------------------------------

/** A peer with the key that orders it (family, address, length, excepts). */
interface SortedPeer extends PeerBlock {
  sortKey: string;
}
type PeerSet = Map<string, SortedPeer> | "any";

interface Draft {
  origin: string;
  peers: PeerSet;
  ports: PortRange[] | "any";
}

const isNamed = (p: ParsedPort): p is NamedPort => "name" in p;
const isNumbered = (p: ParsedPort): p is NumberedPorts => !("name" in p);
const hasPeers = (peers: PeerSet) => peers === "any" || peers.size > 0;

function draftsOf(direction: Direction, rule: ParsedRule, target: PolicyPod, source: CompileSource): Draft[] {
  const { origin } = rule;
  const peers = rule.peers === "any" ? "any" : peerSet(rule, source);
  if (rule.ports === "any") return hasPeers(peers) ? [{ origin, peers, ports: "any" }] : [];
  const numbered: PortRange[] = rule.ports.filter(isNumbered).map(({ protocol, from, to }) => ({ protocol, from, to }));
  const named = rule.ports.filter(isNamed);
  if (direction === "ingress") {
    const ports = [...numbered, ...resolveNames(named, target.ports)];
    return ports.length > 0 && hasPeers(peers) ? [{ origin, peers, ports }] : [];
  }
  const drafts: Draft[] = numbered.length > 0 && hasPeers(peers) ? [{ origin, peers, ports: numbered }] : [];
  if (named.length > 0) drafts.push(...namedPortDrafts(rule, named, source));
  return drafts;
}

/** The named ports' numbers on a pod whose container ports have that name and protocol. */
function resolveNames(named: NamedPort[], podPorts: readonly PodPort[]): PortRange[] {
  const ranges: PortRange[] = [];
  for (const n of named) {
    for (const p of podPorts) {
      if (p.name === n.name && p.protocol === n.protocol)
        ranges.push({ protocol: p.protocol, from: p.port, to: p.port });
    }
  }
  return ranges;
}

/** An egress rule's named ports: its destination pods, grouped by what the names are on each. */
function namedPortDrafts(rule: ParsedRule, named: NamedPort[], source: CompileSource): Draft[] {
  const podPeers = rule.peers === "any" ? [rule.namedPortPods] : rule.peers;
  return namedPortGroups(podPeers, named, source).map(({ peers, ports }) => ({ origin: rule.origin, peers, ports }));
}

/** The pods its selector peers choose, grouped by the numbers the names take on each (none: left out). */
function namedPortGroups(
  podPeers: readonly (ClusterPeer | undefined)[],
  named: NamedPort[],
  source: CompileSource,
): { peers: Map<string, SortedPeer>; ports: PortRange[] }[] {
  const pods = new Map<string, PolicyPod>();
  for (const peer of podPeers) {
    if (peer?.kind !== "pods") continue;
    for (const pod of source.peerPods(peer)) if (isPeerCandidate(pod)) pods.set(`${pod.namespace}/${pod.name}`, pod);
  }
  const groups = new Map<string, { peers: Map<string, SortedPeer>; ports: PortRange[] }>();
  for (const pod of pods.values()) {
    const ports = normalizePorts(resolveNames(named, pod.ports));
    if (ports.length === 0 || pod.ips.length === 0) continue;
    const group = getOrMake(groups, portsKey(ports), () => ({ peers: new Map(), ports }));
    for (const ip of pod.ips) addHost(group.peers, ip);
  }
  return [...groups.values()];
}

function peerSet(rule: ParsedRule, source: CompileSource): Map<string, SortedPeer> {
  const peers = new Map<string, SortedPeer>();
  if (rule.peers === "any") return peers;
  for (const peer of rule.peers) {
    if (peer.kind === "block") {
      const block = sortedPeer(peer.cidr, peer.except);
      peers.set(block.sortKey, block);
      continue;
    }
    for (const pod of source.peerPods(peer)) {
      if (isPeerCandidate(pod)) for (const ip of pod.ips) addHost(peers, ip);
    }
  }
  return peers;
}

function addHost(peers: Map<string, SortedPeer>, ip: string): void {
  const address = parseAddress(ip);
  if (!address) return;
  const host = sortedPeer(
    { family: address.family, network: address.value, prefixLength: addressBits(address.family) },
    [],
  );
  peers.set(host.sortKey, host);
}

const subnetKey = (s: Subnet) =>
  `${s.family === AF_INET ? 4 : 6}:${s.network.toString(16).padStart(32, "0")}/${String(s.prefixLength).padStart(3, "0")}`;

function sortedPeer(cidr: Subnet, except: readonly Subnet[]): SortedPeer {
  const excepts = new Map(except.map((s) => [subnetKey(s), s]));
  const keys = [...excepts.keys()].sort();
  return {
    cidr: formatSubnet(cidr),
    except: keys.map((k) => formatSubnet(excepts.get(k) as Subnet)),
    sortKey: `${subnetKey(cidr)}|${keys.join(",")}`,
  };
}

// ---- canonical form ------------------------------------------------------------------------

const PROTOCOL_ORDER: Record<PolicyProtocol, number> = { TCP: 0, UDP: 1, SCTP: 2 };

/** Sorted by protocol and start; overlapping and adjacent ranges of one protocol joined. */
export function normalizePorts(ranges: readonly PortRange[]): PortRange[] {
  const sorted = [...ranges].sort((a, b) => PROTOCOL_ORDER[a.protocol] - PROTOCOL_ORDER[b.protocol] || a.from - b.from);
  const out: PortRange[] = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && last.protocol === r.protocol && r.from <= last.to + 1) last.to = Math.max(last.to, r.to);
    else out.push({ ...r });
  }
  return out;
}

const pad5 = (n: number) => String(n).padStart(5, "0");

/** Orders port sets: "any" first, then by protocol and numbers. */
const portsKey = (ports: PortRange[] | "any") =>
  ports === "any" ? "" : ports.map((r) => `${PROTOCOL_ORDER[r.protocol]}:${pad5(r.from)}-${pad5(r.to)}`).join(",");

function mergeByPorts(drafts: Draft[]): CompiledRule[] {
  const merged = new Map<string, { origins: string[]; peers: PeerSet; ports: PortRange[] | "any" }>();
  for (const draft of drafts) {
    const ports: PortRange[] | "any" = draft.ports === "any" ? "any" : normalizePorts(draft.ports);
    const into = getOrMake(merged, portsKey(ports), () => ({ origins: [], peers: new Map(), ports }));
    if (!into.origins.includes(draft.origin)) into.origins.push(draft.origin);
    into.peers = unionPeers(into.peers, draft.peers);
  }
  const rules = [...merged.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([, m]): CompiledRule => ({ origin: m.origins.join(", "), peers: finalPeers(m.peers), ports: m.ports }));
  const allowAll = rules.find((r) => r.peers === "any" && r.ports === "any");
  return allowAll ? [allowAll] : rules;
}

function unionPeers(into: PeerSet, from: PeerSet): PeerSet {
  if (into === "any" || from === "any") return "any";
  for (const [key, peer] of from) into.set(key, peer);
  return into;
}

function finalPeers(peers: PeerSet): PeerBlock[] | "any" {
  if (peers === "any") return "any";
  return [...peers.values()]
    .sort((a, b) => (a.sortKey < b.sortKey ? -1 : a.sortKey > b.sortKey ? 1 : 0))
    .map(({ cidr, except }) => ({ cidr, except }));
}

function overBounds(
  rules: CompiledRule[],
  admin: TierRule[] = [],
  baseline: TierRule[] = [],
): { kind: PolicyProblem["kind"]; reason: string } | undefined {
  const count = admin.length + rules.length + baseline.length;
  if (count > MAX_RULES) {
    const tiers = count > rules.length ? ` (Admin ${admin.length}, Baseline ${baseline.length})` : "";
    return { kind: "rules-bound", reason: `${count} rules after merging${tiers}, the datapath holds ${MAX_RULES}` };
  }
  for (const rule of [...admin, ...rules, ...baseline]) {
    if (rule.ports !== "any" && rule.ports.length > MAX_PORT_RANGES) {
      const reason = `${rule.origin} has ${rule.ports.length} port ranges, the datapath holds ${MAX_PORT_RANGES} a rule`;
      return { kind: "port-ranges-bound", reason };
    }
  }
  return undefined;
}

/**
 * Names a compiled policy: equal policies, equal names, whatever the order of their
 * objects' keys (the datapath keeps one copy per name).
 */
export function policyFingerprint(policy: CompiledPolicy): string {
  const rule = (r: CompiledRule) => [
    r.origin,
    r.peers === "any" ? "any" : r.peers.map((p) => [p.cidr, p.except]),
    r.ports === "any" ? "any" : r.ports.map((p) => [p.protocol, p.from, p.to]),
  ];
  const tierRule = (r: TierRule) => [...rule(r), r.action, r.policy, r.rule];
  const direction = (d: DirectionPolicy | undefined) => {
    if (!d) return null;
    const rules = d.rules.map(rule);
    // NetworkPolicy alone: named as before the tiers.
    if (!d.unisolated && !d.admin && !d.baseline) return rules;
    const tiers = { unisolated: d.unisolated === true, admin: d.admin?.map(tierRule) ?? [] };
    return { rules, ...tiers, baseline: d.baseline?.map(tierRule) ?? [] };
  };
  return sha256Hex([JSON.stringify([direction(policy.ingress), direction(policy.egress)])]);
}

/** The unreadable policies among `parses` that select the pod: their pod selector selects it, or could not be read. */
export function unreadableSelecting(pod: PolicyPod, parses: Iterable<PolicyParse>) {
  const selecting: Extract<PolicyParse, { ok: false }>[] = [];
  for (const parse of parses) {
    if (parse.ok || parse.namespace !== pod.namespace) continue;
    if (parse.podSelector && !selectorMatches(parse.podSelector, pod.labels)) continue;
    selecting.push(parse);
  }
  return selecting;
}

/** The problems of the unreadable policies that select the pod (unreadableSelecting). */
export function unreadableProblems(pod: PolicyPod, parses: Iterable<PolicyParse>): PolicyProblem[] {
  return unreadableSelecting(pod, parses).flatMap((parse) => parse.problems);
}
