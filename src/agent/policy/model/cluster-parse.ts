/**
 * A ClusterNetworkPolicy's spec (policy.networking.k8s.io v1alpha2 and v1beta1, one spec
 * shape) read and checked once, when it changes: its tier and priority, the pods its
 * subject selects, and each direction's rules in written order with their action, peers
 * and ports. Pure.
 *
 * The reading follows the API's Go types (clusternetworkpolicy_types.go):
 * - `tier` Admin or Baseline; `priority` 0..1000, lower first. Policies of one tier and
 *   priority are ordered by name here (the API leaves their order to the implementation).
 * - `subject`: exactly one of `namespaces` (every pod of the namespaces it selects) or
 *   `pods` {namespaceSelector (absent: every namespace), podSelector (required)}.
 *   hostNetwork pods are never subjects nor peers (compile.ts).
 * - A rule: `name?`, `action` Accept, Deny or Pass (Pass only in the Admin tier), `from`
 *   (ingress) or `to` (egress), at least one peer, and `protocols?` (absent: every
 *   protocol and port, ICMP too).
 * - A peer is exactly one of `namespaces` (every pod of the selected namespaces), `pods`
 *   (as the subject's), and for egress `nodes` (the selected Nodes' InternalIP and
 *   ExternalIP addresses), `networks` (CIDRs, IPv4 or IPv6, without bits past the prefix)
 *   or `domainNames`. Peers chosen by labels are SelectorPeers scoped by a namespace
 *   selector, so the index's cross-namespace peers serve them.
 * - A protocol entry is exactly one of `tcp`, `udp`, `sctp` ({destinationPort?:
 *   {number} | {range: {start, end}}, start < end}; no destinationPort: every port of
 *   the protocol) or `destinationNamedPort`, a container port's name of any protocol,
 *   resolved by compile.ts (ingress: the subject pod's; egress: each destination pod's);
 *   an egress rule with one and a `nodes`, `networks` or `domainNames` peer is one the
 *   API refuses (those have no named ports), so it is unreadable as below.
 *
 * What cannot be read fails closed as the API tells implementations to (for a peer with
 * no field it knows: "For Accept rules, fail closed means treat the rule as matching no
 * traffic. For Deny and Pass rules, fail closed means treat the rule as a Deny all
 * rule"), applied to every unreadable part of a rule (a peer or protocol entry of no kind,
 * two kinds or a field not known here, a malformed selector, CIDR or port, a missing or
 * empty `from`/`to`, an unknown action, Pass in the Baseline tier): an Accept rule is
 * dropped; a Deny or Pass rule becomes Deny for every peer and port; a rule whose action
 * cannot be read becomes Deny for every peer and port too. Each is a problem, named.
 * `domainNames` is not implemented: such a peer matches nothing (kind "domain-names"),
 * which the API allows only in Accept rules, so the rule matches less, never more; in a
 * Deny or Pass rule it is unreadable as above. An unreadable subject selects every pod
 * (as an unreadable NetworkPolicy podSelector selects its whole namespace): its readable
 * rules apply to all, its unreadable ones fail closed. An unreadable tier or priority is
 * read as tier Admin, priority 0, with every rule read as denying at most: Deny rules as
 * written, Pass rules as Deny of what they match, Accept rules dropped; so the policy
 * denies at least what it could have denied, and allows nothing it might not have.
 *
 * Problems name the policy "cnp:<name>", which no NetworkPolicy's "namespace/name" can
 * be (object names hold neither ':' nor '/').
 */
import { hostMask, parseAddress } from "../../../cni/address";
import type { Tier, TierAction } from "./compile";
import type { KeptClusterPolicy } from "./objects";
import {
  type BlockPeer,
  type Direction,
  type NamedPort,
  type NumberedPorts,
  type ParsedPort,
  type PolicyProblem,
  PROTOCOLS,
  type ProblemKind,
  readPolicyCidr,
  type SelectorPeer,
  selectorPeer,
} from "./parse";
import { EVERYTHING, parseSelector, type Selector, selectorText } from "./selectors";

/** The Nodes whose labels a selector matches, as their addresses. */
export interface NodePeer {
  kind: "nodes";
  /** Equal keys, equal nodes: the index keeps one set of matches per key. */
  key: string;
  nodes: Selector;
}

export type ClusterPeer = SelectorPeer | BlockPeer | NodePeer;

/** The pods of the namespaces `namespaces` selects whose labels `pods` selects. */
export interface ClusterSubject {
  namespaces: Selector;
  pods: Selector;
}

export interface ParsedClusterRule {
  /** "cnp:name ingress[2]": which policy and rule. */
  origin: string;
  /** The rule's name, or "ingress[2]" when it has none. */
  name: string;
  action: TierAction;
  /** "any" only for a rule failed closed (Deny for every peer and port). */
  peers: ClusterPeer[] | "any";
  ports: ParsedPort[] | "any";
}

export interface ParsedClusterPolicy {
  /** "cnp:<name>": the index's key for it among NetworkPolicies' "namespace/name". */
  key: string;
  name: string;
  tier: Tier;
  priority: number;
  subject: ClusterSubject;
  /** Written order, failed-closed rules in place, dropped ones gone. */
  ingress: ParsedClusterRule[];
  egress: ParsedClusterRule[];
  /** What could not be read, and what was made of it. None: read as written. */
  problems: PolicyProblem[];
  /** Audit mode (objects.ts, AUDIT_ANNOTATION): compiled only into what a pod's audit reads. */
  audit?: true;
}

export const clusterPolicyKey = (name: string) => `cnp:${name}`;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;
const isPort = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 65535;
const ACTIONS: readonly string[] = ["Accept", "Deny", "Pass"];
export const MAX_PRIORITY = 1000;

/** Collects one policy's problems, each at its place ("spec.ingress[0].from[1]"). */
class Reader {
  readonly problems: PolicyProblem[] = [];
  constructor(readonly policy: string) {}
  problem(kind: ProblemKind, at: string, reason: string): undefined {
    this.problems.push({ policy: this.policy, kind, reason: `${at}: ${reason}` });
    return undefined;
  }
  /** Names each field `allowed` does not list; true when there is none. */
  onlyKnown(object: Record<string, unknown>, allowed: readonly string[], at: string): boolean {
    const unknown = Object.keys(object).filter((k) => !allowed.includes(k) && present(object[k]));
    for (const field of unknown) this.problem("unknown-field", at, `field ${JSON.stringify(field)} is not understood`);
    return unknown.length === 0;
  }
  /** Exactly one of `kinds` set (and nothing else): its name, else a problem. */
  oneOf(object: Record<string, unknown>, kinds: readonly string[], at: string, kind: ProblemKind): string | undefined {
    if (!this.onlyKnown(object, kinds, at)) return undefined;
    const set = kinds.filter((k) => present(object[k]));
    if (set.length === 1) return set[0];
    const reason = set.length === 0 ? `sets none of ${kinds.join(", ")}` : `sets ${set.join(" and ")}: one only`;
    return this.problem(kind, at, reason);
  }
}

export function parseClusterPolicy(kept: KeptClusterPolicy): ParsedClusterPolicy {
  const key = clusterPolicyKey(kept.name);
  const reader = new Reader(key);
  const { spec } = kept;
  const tier = spec.tier === "Admin" || spec.tier === "Baseline" ? spec.tier : undefined;
  const priority = readPriority(spec.priority);
  // An unreadable tier or priority: the strongest place, and only what denies.
  const strict = tier === undefined || priority === undefined;
  const strictly = "read as tier Admin, priority 0: Deny rules as written, Pass rules as Deny, Accept rules dropped";
  if (!tier) reader.problem("tier", "spec.tier", `${JSON.stringify(spec.tier)} is not Admin or Baseline; ${strictly}`);
  if (priority === undefined) {
    reader.problem("priority", "spec.priority", `${JSON.stringify(spec.priority)} is not 0 to 1000; ${strictly}`);
  }
  const subject = readSubject(spec.subject, reader);
  const read: Tier = strict ? "Admin" : (tier as Tier);
  const context: RuleContext = { reader, tier: read, strict };
  const parsed: ParsedClusterPolicy = {
    key,
    name: kept.name,
    tier: read,
    priority: strict ? 0 : (priority as number),
    subject,
    ingress: readRules(spec.ingress, "ingress", context),
    egress: readRules(spec.egress, "egress", context),
    problems: reader.problems,
  };
  if (kept.audit) parsed.audit = true;
  return parsed;
}

function readPriority(raw: unknown): number | undefined {
  return typeof raw === "number" && Number.isInteger(raw) && raw >= 0 && raw <= MAX_PRIORITY ? raw : undefined;
}

/** The subject's pods; every pod when it cannot be read. */
function readSubject(raw: unknown, reader: Reader): ClusterSubject {
  const all: ClusterSubject = { namespaces: EVERYTHING, pods: EVERYTHING };
  const at = "spec.subject";
  const unreadable = () => reader.problem("subject", at, "cannot be read: the policy selects every pod") ?? all;
  if (!isRecord(raw)) return unreadable();
  const kind = reader.oneOf(raw, ["namespaces", "pods"], at, "subject");
  if (kind === undefined) return unreadable();
  const chosen = kind === "namespaces" ? namespacesOnly(raw.namespaces, `${at}.namespaces`, reader) : undefined;
  const read = chosen ?? (kind === "pods" ? namespacedPods(raw.pods, `${at}.pods`, reader) : undefined);
  return read ?? unreadable();
}

function namespacesOnly(raw: unknown, at: string, reader: Reader): ClusterSubject | undefined {
  const namespaces = parseSelector(raw);
  if (!namespaces.ok) return reader.problem("selector", at, namespaces.reason);
  return { namespaces: namespaces.selector, pods: EVERYTHING };
}

/** NamespacedPod: namespaceSelector (absent: every namespace) AND podSelector (required). */
function namespacedPods(raw: unknown, at: string, reader: Reader): ClusterSubject | undefined {
  if (!isRecord(raw)) return reader.problem("shape", at, "must be an object");
  if (!reader.onlyKnown(raw, ["namespaceSelector", "podSelector"], at)) return undefined;
  if (!present(raw.podSelector)) return reader.problem("selector", `${at}.podSelector`, "is required");
  const namespaces = parseSelector(raw.namespaceSelector);
  if (!namespaces.ok) return reader.problem("selector", `${at}.namespaceSelector`, namespaces.reason);
  const pods = parseSelector(raw.podSelector);
  if (!pods.ok) return reader.problem("selector", `${at}.podSelector`, pods.reason);
  return { namespaces: namespaces.selector, pods: pods.selector };
}

// ---- rules -------------------------------------------------------------------------------

interface RuleContext {
  reader: Reader;
  tier: Tier;
  /** Tier or priority unreadable: Accept dropped, Pass read as Deny. */
  strict: boolean;
}

function readRules(raw: unknown, direction: Direction, context: RuleContext): ParsedClusterRule[] {
  if (!present(raw)) return [];
  if (!Array.isArray(raw)) {
    // Rules of this direction were written, but not as a list: whatever they denied, deny.
    context.reader.problem("shape", `spec.${direction}`, "must be a list; read as one rule denying everything");
    return [
      { origin: `${context.reader.policy} ${direction}`, name: direction, action: "Deny", peers: "any", ports: "any" },
    ];
  }
  const rules: ParsedClusterRule[] = [];
  for (const [i, entry] of raw.entries()) {
    const rule = readRule(entry, direction, i, context);
    if (rule) rules.push(rule);
  }
  return rules;
}

function readRule(
  raw: unknown,
  direction: Direction,
  index: number,
  context: RuleContext,
): ParsedClusterRule | undefined {
  const { reader } = context;
  const at = `spec.${direction}[${index}]`;
  const origin = `${reader.policy} ${direction}[${index}]`;
  const first = reader.problems.length;
  let name = `${direction}[${index}]`;
  let action: TierAction | undefined;
  let read: Pick<ParsedClusterRule, "peers" | "ports"> | undefined;
  if (!isRecord(raw)) reader.problem("shape", at, "a rule must be an object");
  else {
    if (typeof raw.name === "string" && raw.name !== "") name = raw.name;
    action = typeof raw.action === "string" && ACTIONS.includes(raw.action) ? (raw.action as TierAction) : undefined;
    if (!action) reader.problem("action", `${at}.action`, `${JSON.stringify(raw.action)} is not Accept, Deny or Pass`);
    else if (action === "Pass" && context.tier === "Baseline" && !context.strict) {
      reader.problem("action", `${at}.action`, "Pass is not allowed in the Baseline tier");
    }
    const peersField = direction === "ingress" ? "from" : "to";
    const known = reader.onlyKnown(raw, ["name", "action", peersField, "protocols"], at);
    // Read whatever is there, so that every reason is named.
    const peers = readPeers(raw[peersField], `${at}.${peersField}`, direction, action ?? "Deny", reader);
    const ports = readProtocols(raw.protocols, `${at}.protocols`, reader);
    if (direction === "egress" && namedPortsBeside(raw.to, raw.protocols)) {
      reader.problem(
        "port",
        `${at}.protocols`,
        "destinationNamedPort cannot be used with nodes, networks or domainNames peers",
      );
    }
    const failed = reader.problems.slice(first).some((p) => p.kind !== "domain-names");
    if (known && !failed && peers && ports) read = { peers, ports };
  }
  if (read && action) {
    if (context.strict && action === "Accept") return undefined;
    return { origin, name, action: context.strict && action === "Pass" ? "Deny" : action, ...read };
  }
  const dropped = action === "Accept";
  for (const p of reader.problems.slice(first)) {
    if (p.kind !== "domain-names") {
      p.reason += dropped ? "; the Accept rule matches nothing" : "; the rule denies every peer and port";
    }
  }
  return dropped ? undefined : { origin, name, action: "Deny", peers: "any", ports: "any" };
}

/** An egress rule naming ports beside peers that have none, which the API refuses. */
function namedPortsBeside(peers: unknown, protocols: unknown): boolean {
  const some = (list: unknown, test: (item: Record<string, unknown>) => boolean) =>
    Array.isArray(list) && list.some((item) => isRecord(item) && test(item));
  const named = some(protocols, (p) => present(p.destinationNamedPort));
  return named && some(peers, (p) => present(p.nodes) || present(p.networks) || present(p.domainNames));
}

/** A rule's peers: undefined when one cannot be read; a domainNames peer is left out (matches nothing). */
function readPeers(
  raw: unknown,
  at: string,
  direction: Direction,
  action: TierAction,
  reader: Reader,
): ClusterPeer[] | undefined {
  if (!Array.isArray(raw) || raw.length === 0) return reader.problem("peer", at, "must list at least one peer");
  const kinds =
    direction === "ingress" ? ["namespaces", "pods"] : ["namespaces", "pods", "nodes", "networks", "domainNames"];
  const peers: ClusterPeer[] = [];
  let readable = true;
  for (const [i, entry] of raw.entries()) {
    const peerAt = `${at}[${i}]`;
    if (!isRecord(entry)) {
      readable = reader.problem("peer", peerAt, "a peer must be an object") ?? false;
      continue;
    }
    const kind = reader.oneOf(entry, kinds, peerAt, "peer");
    const read = kind === undefined ? undefined : readPeer(kind, entry[kind], `${peerAt}.${kind}`, action, reader);
    if (read === undefined) readable = false;
    else if (read !== "nothing") peers.push(...read);
  }
  return readable ? peers : undefined;
}

function readPeer(
  kind: string,
  raw: unknown,
  at: string,
  action: TierAction,
  reader: Reader,
): ClusterPeer[] | "nothing" | undefined {
  switch (kind) {
    case "namespaces": {
      const subject = namespacesOnly(raw, at, reader);
      return subject && [selectorPeer(subject.pods, subject.namespaces, "")];
    }
    case "pods": {
      const subject = namespacedPods(raw, at, reader);
      return subject && [selectorPeer(subject.pods, subject.namespaces, "")];
    }
    case "nodes": {
      const nodes = parseSelector(raw);
      if (!nodes.ok) return reader.problem("selector", at, nodes.reason);
      return [{ kind: "nodes", key: JSON.stringify(["nodes", nodes.selector.key]), nodes: nodes.selector }];
    }
    case "networks":
      return readNetworks(raw, at, reader);
    default:
      if (action !== "Accept") return reader.problem("peer", at, "domainNames is only allowed in Accept rules");
      reader.problem("domain-names", at, "domainNames is not implemented: the rule matches no domain");
      return "nothing";
  }
}

/** CIDRs as the API's isCIDR reads them: strict address text; here also no bits past the prefix. */
function readNetworks(raw: unknown, at: string, reader: Reader): BlockPeer[] | undefined {
  if (!Array.isArray(raw) || raw.length === 0) return reader.problem("peer", at, "must list at least one CIDR");
  const blocks: BlockPeer[] = [];
  for (const [i, text] of raw.entries()) {
    const cidr = readPolicyCidr(text);
    const slash = typeof text === "string" ? text.indexOf("/") : -1;
    const written = slash > 0 ? parseAddress((text as string).slice(0, slash)) : undefined;
    if (!cidr || !written) return reader.problem("cidr", `${at}[${i}]`, `${JSON.stringify(text)} is not a CIDR`);
    const length = Number((text as string).slice(slash + 1));
    if ((written.value & hostMask(written.family, length)) !== 0n) {
      return reader.problem("cidr", `${at}[${i}]`, `${JSON.stringify(text)} has bits set past its prefix length`);
    }
    blocks.push({ kind: "block", cidr, except: [] });
  }
  return blocks;
}

const PROTOCOL_FIELDS = { tcp: "TCP", udp: "UDP", sctp: "SCTP" } as const;

/** Absent: "any". Undefined when an entry cannot be read. */
function readProtocols(raw: unknown, at: string, reader: Reader): ParsedPort[] | "any" | undefined {
  if (!present(raw)) return "any";
  if (!Array.isArray(raw) || raw.length === 0) return reader.problem("shape", at, "must list at least one protocol");
  const ports: ParsedPort[] = [];
  let readable = true;
  for (const [i, entry] of raw.entries()) {
    const read = readProtocol(entry, `${at}[${i}]`, reader);
    if (read) ports.push(...read);
    else readable = false;
  }
  return readable ? ports : undefined;
}

function readProtocol(raw: unknown, at: string, reader: Reader): ParsedPort[] | undefined {
  if (!isRecord(raw)) return reader.problem("protocol", at, "must be an object");
  const kind = reader.oneOf(raw, ["tcp", "udp", "sctp", "destinationNamedPort"], at, "protocol");
  if (kind === undefined) return undefined;
  if (kind === "destinationNamedPort") {
    const name = raw.destinationNamedPort;
    if (typeof name !== "string" || name === "") return reader.problem("port", `${at}.${kind}`, "must be a name");
    // A container port's name, whatever its protocol: one named port per protocol.
    return PROTOCOLS.map((protocol): NamedPort => ({ protocol, name }));
  }
  const protocol = PROTOCOL_FIELDS[kind as keyof typeof PROTOCOL_FIELDS];
  const body = raw[kind];
  if (!isRecord(body)) return reader.problem("protocol", `${at}.${kind}`, "must be an object");
  if (!reader.onlyKnown(body, ["destinationPort"], `${at}.${kind}`)) return undefined;
  if (!present(body.destinationPort)) return [{ protocol, from: 1, to: 65535 }];
  const port = readPort(body.destinationPort, `${at}.${kind}.destinationPort`, reader);
  return port && [{ protocol, ...port }];
}

function readPort(raw: unknown, at: string, reader: Reader): Omit<NumberedPorts, "protocol"> | undefined {
  if (!isRecord(raw)) return reader.problem("port", at, "must be an object");
  const kind = reader.oneOf(raw, ["number", "range"], at, "port");
  if (kind === "number") {
    if (!isPort(raw.number))
      return reader.problem("port", `${at}.number`, `${JSON.stringify(raw.number)} is not a port (1-65535)`);
    return { from: raw.number, to: raw.number };
  }
  if (kind !== "range") return undefined;
  const range = raw.range;
  if (!isRecord(range) || !reader.onlyKnown(range, ["start", "end"], `${at}.range`)) {
    return isRecord(range) ? undefined : reader.problem("port", `${at}.range`, "must be an object");
  }
  const { start, end } = range;
  if (!isPort(start) || !isPort(end) || start >= end) {
    return reader.problem("port", `${at}.range`, `${JSON.stringify(range)} is not start < end, both ports (1-65535)`);
  }
  return { from: start, to: end };
}

/** Every selector peer of a policy (both directions): what the index keeps matches for. */
export function clusterSelectorPeersOf(policy: ParsedClusterPolicy): SelectorPeer[] {
  return [...policy.ingress, ...policy.egress].flatMap((rule) =>
    rule.peers === "any" ? [] : rule.peers.filter((p): p is SelectorPeer => p.kind === "pods"),
  );
}

export function clusterNodePeersOf(policy: ParsedClusterPolicy): NodePeer[] {
  return [...policy.ingress, ...policy.egress].flatMap((rule) =>
    rule.peers === "any" ? [] : rule.peers.filter((p): p is NodePeer => p.kind === "nodes"),
  );
}

/** The subject as people read it, for reports and tests. */
export function subjectText(subject: ClusterSubject): string {
  return `pods ${selectorText(subject.pods)} in namespaces ${selectorText(subject.namespaces)}`;
}
