/**
 * An oracle for ClusterNetworkPolicy (policy.networking.k8s.io v1alpha2/v1beta1) with
 * NetworkPolicy between its tiers: is one connection allowed, read from the API's Go
 * types' comments over the raw objects. Like policy-model.ts (whose NetworkPolicy
 * reading it uses for the middle tier) it shares no code with src/agent/policy.
 *
 * For each end that is a policed pod, its direction (the sender's egress, the
 * receiver's ingress) is judged in tiers:
 * - Admin: the policies whose subject selects the pod, by priority (lower first; equal
 *   priorities by name, this implementation's documented choice), each's rules in
 *   written order; the first rule whose peers and protocols match decides: Accept
 *   allows, Deny denies, Pass skips the rest of the tier.
 * - NetworkPolicy: when one isolates the pod that way, its answer is final.
 * - Baseline: as Admin (Pass has no place there).
 * - Otherwise allowed.
 * A subject is `namespaces` (every pod of the selected namespaces) or `pods`
 * (namespaceSelector AND podSelector); hostNetwork pods are neither subjects nor peers
 * (they are their node). Peers: `namespaces`, `pods` as the subject's; `nodes`, the
 * addresses of the Nodes whose labels match; `networks`, CIDRs; `domainNames`, matched by
 * nothing here (this implementation refuses them). Protocols: absent, everything; each
 * entry one protocol with every port, a number or a range, or a named port (the
 * receiving pod's container port of that name, any protocol; never an address's, and
 * refused in a rule with `nodes`, `networks` or `domainNames` peers).
 *
 * What the API would refuse fails closed as its comments tell implementations: an
 * unreadable Accept rule matches nothing, an unreadable Deny or Pass rule denies
 * everything; a policy whose tier or priority cannot be read counts as Admin priority 0
 * with only its denying part (Deny rules, Pass rules as Deny); an unreadable subject
 * selects every pod. The own node reaching its pod and a pod reaching itself pass, as in
 * policy-model.ts.
 */
import type { V1Pod } from "@kubernetes/client-node";
import {
  addressIn,
  type Cluster,
  type End,
  labelsSelected,
  namedPortOf,
  networkPolicyVerdict,
  type Probe,
  type RawClusterPolicy,
  resolveEnd,
  selectorAcceptable,
} from "./policy-model";

type Raw = Record<string, unknown>;
type Direction = "ingress" | "egress";

const isRaw = (v: unknown): v is Raw => typeof v === "object" && v !== null && !Array.isArray(v);

export function allowedWithTiers(cluster: Cluster, probe: Probe): boolean {
  const family = probe.family ?? 4;
  const from = resolveEnd(cluster, probe.from, family);
  const to = resolveEnd(cluster, probe.to, family);
  if (!from || !to) return false;
  if (from.pod && from.pod === to.pod) return true;
  const out = from.pod ? judged(cluster, from.pod, "egress", to, probe) : true;
  const fromOwnNode = from.node !== undefined && from.node === to.pod?.spec?.nodeName;
  const inward = to.pod && !fromOwnNode ? judged(cluster, to.pod, "ingress", from, probe) : true;
  return out && inward;
}

function judged(cluster: Cluster, pod: V1Pod, direction: Direction, other: End, probe: Probe): boolean {
  const selecting = (cluster.clusterPolicies ?? []).filter((c) => subjectSelects(cluster, c, pod));
  const admin = tierOf(selecting, "Admin");
  const verdict = tierVerdict(cluster, admin, pod, direction, other, probe);
  if (verdict === "Accept" || verdict === "Deny") return verdict === "Accept";
  const np = networkPolicyVerdict(cluster, pod, direction, other, probe);
  if (np !== undefined) return np;
  const last = tierVerdict(cluster, tierOf(selecting, "Baseline"), pod, direction, other, probe);
  return last !== "Deny";
}

const readableTier = (c: RawClusterPolicy) => c.spec.tier === "Admin" || c.spec.tier === "Baseline";
const readablePriority = (c: RawClusterPolicy) =>
  Number.isInteger(c.spec.priority) && (c.spec.priority as number) >= 0 && (c.spec.priority as number) <= 1000;
/** Tier or priority unreadable: Admin, priority 0, denying only. */
const strict = (c: RawClusterPolicy) => !readableTier(c) || !readablePriority(c);

function tierOf(policies: RawClusterPolicy[], tier: "Admin" | "Baseline"): RawClusterPolicy[] {
  const inTier = policies.filter((c) => (strict(c) ? "Admin" : c.spec.tier) === tier);
  const priority = (c: RawClusterPolicy) => (strict(c) ? 0 : (c.spec.priority as number));
  return inTier.sort((a, b) => priority(a) - priority(b) || (a.metadata.name < b.metadata.name ? -1 : 1));
}

/** The first matching rule's action across the tier's policies ("Pass" ends the tier); "none" when none matches. */
function tierVerdict(
  cluster: Cluster,
  policies: RawClusterPolicy[],
  pod: V1Pod,
  direction: Direction,
  other: End,
  probe: Probe,
): "Accept" | "Deny" | "Pass" | "none" {
  for (const policy of policies) {
    const rules = policy.spec[direction];
    if (rules === undefined || rules === null) continue;
    // Rules written but not as a list: one rule denying everything.
    if (!Array.isArray(rules)) return "Deny";
    for (const rule of rules) {
      const action = effectiveAction(policy, rule, direction);
      if (action === undefined) continue;
      if (action === "deny-all") return "Deny";
      const peersField = direction === "ingress" ? "from" : "to";
      const receiver = direction === "ingress" ? pod : other.pod;
      if (!peersMatch(cluster, (rule as Raw)[peersField] as Raw[], other)) continue;
      if (!protocolsMatch((rule as Raw).protocols as Raw[] | undefined, probe, receiver)) continue;
      return action;
    }
  }
  return "none";
}

/** What a rule does: its action; "deny-all" when it fails closed so; undefined when it matches nothing. */
function effectiveAction(
  policy: RawClusterPolicy,
  rule: unknown,
  direction: Direction,
): "Accept" | "Deny" | "Pass" | "deny-all" | undefined {
  const action = isRaw(rule) ? rule.action : undefined;
  const known = action === "Accept" || action === "Deny" || action === "Pass";
  const passInBaseline = action === "Pass" && !strict(policy) && policy.spec.tier === "Baseline";
  const readable = isRaw(rule) && known && !passInBaseline && ruleAcceptable(rule, direction);
  if (!readable) return action === "Accept" ? undefined : "deny-all";
  if (strict(policy)) return action === "Accept" ? undefined : "Deny";
  return action as "Accept" | "Deny" | "Pass";
}

// ---- what the API would refuse ----------------------------------------------------------

const only = (o: Raw, allowed: string[]) => Object.keys(o).every((k) => allowed.includes(k) || o[k] == null);
const setKeys = (o: Raw) => Object.keys(o).filter((k) => o[k] !== undefined && o[k] !== null);
const isPort = (n: unknown) => Number.isInteger(n) && (n as number) >= 1 && (n as number) <= 65535;
const selectorOk = (s: unknown) => s === undefined || s === null || (isRaw(s) && selectorAcceptable(s));

function ruleAcceptable(rule: Raw, direction: Direction): boolean {
  const peersField = direction === "ingress" ? "from" : "to";
  if (!only(rule, ["name", "action", peersField, "protocols"])) return false;
  const peers = rule[peersField];
  if (!Array.isArray(peers) || peers.length === 0) return false;
  const peerKinds =
    direction === "ingress" ? ["namespaces", "pods"] : ["namespaces", "pods", "nodes", "networks", "domainNames"];
  for (const peer of peers) {
    if (!isRaw(peer) || !only(peer, peerKinds) || setKeys(peer).length !== 1) return false;
    const [kind] = setKeys(peer);
    const value = peer[kind as string];
    if (kind === "domainNames" && rule.action !== "Accept") return false;
    if ((kind === "namespaces" || kind === "nodes") && !selectorOk(value)) return false;
    if (kind === "pods" && !namespacedPodOk(value)) return false;
    if (kind === "networks" && !(Array.isArray(value) && value.length > 0 && value.every(maskedCidr))) return false;
  }
  const protocols = rule.protocols;
  if (protocols === undefined || protocols === null) return true;
  // Named ports with peers that have none: the API's validation refuses the rule.
  const named = Array.isArray(protocols) && protocols.some((p) => isRaw(p) && p.destinationNamedPort != null);
  const portless = peers.some((p) => isRaw(p) && (p.nodes != null || p.networks != null || p.domainNames != null));
  if (named && portless) return false;
  return Array.isArray(protocols) && protocols.length > 0 && protocols.every(protocolAcceptable);
}

function namespacedPodOk(value: unknown): boolean {
  if (!isRaw(value) || !only(value, ["namespaceSelector", "podSelector"])) return false;
  return isRaw(value.podSelector) && selectorOk(value.podSelector) && selectorOk(value.namespaceSelector);
}

function protocolAcceptable(p: unknown): boolean {
  if (!isRaw(p) || !only(p, ["tcp", "udp", "sctp", "destinationNamedPort"]) || setKeys(p).length !== 1) return false;
  if (p.destinationNamedPort !== undefined)
    return typeof p.destinationNamedPort === "string" && p.destinationNamedPort !== "";
  const body = p.tcp ?? p.udp ?? p.sctp;
  if (!isRaw(body) || !only(body, ["destinationPort"])) return false;
  const port = body.destinationPort;
  if (port === undefined || port === null) return true;
  if (!isRaw(port) || setKeys(port).length !== 1 || !only(port, ["number", "range"])) return false;
  if (port.number !== undefined) return isPort(port.number);
  const range = port.range;
  return (
    isRaw(range) &&
    only(range, ["start", "end"]) &&
    isPort(range.start) &&
    isPort(range.end) &&
    (range.start as number) < (range.end as number)
  );
}

function maskedCidr(text: unknown): boolean {
  if (typeof text !== "string" || !/^[0-9a-fA-F:.]+\/\d{1,3}$/.test(text)) return false;
  const [base = "", length = ""] = text.split("/");
  // Masked: the address is in the prefix made of its own first `length` bits, and is its first address.
  return (
    addressIn(base, text) &&
    (base.includes(":") ? Number(length) <= 128 : Number(length) <= 32) &&
    firstOf(base, Number(length))
  );
}

function firstOf(base: string, length: number): boolean {
  // The address's bits past `length` are all zero: it is in the /length prefix of "0...0" ones only if so.
  if (base.includes(":")) {
    const value = BigInt(`0x${expand6(base)}`);
    return (value & ((1n << BigInt(128 - length)) - 1n)) === 0n;
  }
  const octets = base.split(".").map(Number);
  if (octets.length !== 4 || octets.some((o) => !(o >= 0 && o <= 255))) return false;
  const value = octets.reduce((v, o) => v * 256 + o, 0);
  return length === 32 || value % 2 ** (32 - length) === 0;
}

function expand6(text: string): string {
  const [head = "", tail = ""] = text.split("::");
  const h = head === "" ? [] : head.split(":");
  const t = tail === "" ? [] : tail.split(":");
  const groups = text.includes("::") ? [...h, ...Array(8 - h.length - t.length).fill("0"), ...t] : h;
  return groups.map((g) => g.padStart(4, "0")).join("");
}

// ---- selection and matching ------------------------------------------------------------

function namespaceLabels(cluster: Cluster, pod: V1Pod): Record<string, string> {
  return cluster.namespaces.find((n) => n.metadata?.name === pod.metadata?.namespace)?.metadata?.labels ?? {};
}

/** Whether the subject selects the pod; an unreadable subject selects every pod. */
function subjectSelects(cluster: Cluster, policy: RawClusterPolicy, pod: V1Pod): boolean {
  const subject = policy.spec.subject;
  const nsLabels = namespaceLabels(cluster, pod);
  if (!isRaw(subject) || !only(subject, ["namespaces", "pods"]) || setKeys(subject).length !== 1) return true;
  if (subject.namespaces != null) {
    return !selectorOk(subject.namespaces) || labelsSelected(subject.namespaces as Raw, nsLabels);
  }
  const pods = subject.pods;
  if (!isRaw(pods) || !only(pods, ["namespaceSelector", "podSelector"]) || !isRaw(pods.podSelector)) return true;
  if (!selectorOk(pods.podSelector) || !selectorOk(pods.namespaceSelector)) return true;
  return (
    labelsSelected((pods.namespaceSelector ?? {}) as Raw, nsLabels) &&
    labelsSelected(pods.podSelector, pod.metadata?.labels ?? {})
  );
}

function peersMatch(cluster: Cluster, peers: Raw[], end: End): boolean {
  return peers.some((peer) => {
    if (peer.networks) return (peer.networks as string[]).some((cidr) => addressIn(end.ip, cidr));
    if (peer.domainNames) return false;
    if (peer.nodes) {
      return (cluster.nodes ?? []).some(
        (n) => labelsSelected(peer.nodes as Raw, n.labels ?? {}) && n.ips.includes(end.ip),
      );
    }
    if (!end.pod) return false;
    const nsLabels = namespaceLabels(cluster, end.pod);
    if (peer.namespaces) return labelsSelected(peer.namespaces as Raw, nsLabels);
    const pods = peer.pods as Raw;
    return (
      labelsSelected((pods.namespaceSelector ?? {}) as Raw, nsLabels) &&
      labelsSelected(pods.podSelector as Raw, end.pod.metadata?.labels ?? {})
    );
  });
}

function protocolsMatch(protocols: Raw[] | undefined, probe: Probe, receiver: V1Pod | undefined): boolean {
  if (!protocols) return true;
  return protocols.some((p) => {
    if (typeof p.destinationNamedPort === "string") {
      return receiver !== undefined && namedPortOf(receiver, p.destinationNamedPort, probe.protocol) === probe.port;
    }
    const body = (probe.protocol === "TCP" ? p.tcp : probe.protocol === "UDP" ? p.udp : p.sctp) as Raw | undefined;
    if (!body) return false;
    const port = body.destinationPort as Raw | undefined;
    if (!port) return true;
    if (port.number !== undefined) return port.number === probe.port;
    const range = port.range as { start: number; end: number };
    return probe.port >= range.start && probe.port <= range.end;
  });
}
