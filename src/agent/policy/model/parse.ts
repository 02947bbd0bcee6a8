/**
 * A NetworkPolicy's spec read and checked once, when it changes: its pod selector, the
 * rules of each direction it isolates, their peers and ports in canonical form. Pure.
 *
 * The reading follows networking.k8s.io/v1 as documented:
 * - policyTypes, when absent or empty, defaults as the API server defaults it: Ingress
 *   always, Egress when the policy has at least one egress rule. Only the directions in
 *   policyTypes are read: the other's rules have no effect.
 * - A rule's `from`/`to` absent or empty means every peer, and `ports` absent or empty
 *   every port and protocol: "If this field is empty or missing, this rule matches all
 *   sources" (NetworkPolicyIngressRule.from; likewise `to` and `ports`). An empty list
 *   cannot even be told from a missing one once the API server has stored the object.
 * - A peer is podSelector alone (pods of the policy's namespace), namespaceSelector alone
 *   (every pod of the namespaces it selects), both (the pods it selects in those
 *   namespaces), or ipBlock alone.
 * - A port is a number, a number and endPort (an inclusive range), a name (resolved
 *   against pods' container ports by compile.ts), or only a protocol (all its ports);
 *   protocol TCP unless given.
 * - ipBlock CIDRs are read as the API server reads them (netutils.ParseCIDRSloppy, legacy
 *   validation): IPv4 octets and prefix lengths with leading zeros are decimal, bits past
 *   the prefix are ignored ("10.1.2.3/8" is 10.0.0.0/8), an IPv4-mapped IPv6 prefix of
 *   /96 or longer is the IPv4 prefix it maps. These forms pass the API server's checks
 *   unless StrictIPCIDRValidation is on, and a policy stored before it stays valid, so
 *   they do reach us.
 *
 * What it cannot read makes the whole policy unreadable, with every reason named
 * (`problems`): an unknown protocol, a port out of 1..65535, endPort below port or
 * without a numeric port, a malformed CIDR, an except that is not strictly inside its
 * cidr, an invalid selector, an unknown policyType, a peer with no kind or two kinds, or
 * a field NetworkPolicy does not define in a rule, peer, ipBlock or port (a newer API's
 * field, whose meaning this agent would otherwise drop). The API server's validation
 * (ValidateNetworkPolicySpec) rejects each of these at admission, so they reach us only
 * from an API newer than this agent or from objects written around validation. Of an
 * unreadable policy what can be read is kept: the pods it selects (unknown when its
 * podSelector is unreadable: all of its namespace's) and the directions it isolates
 * (both when policyTypes is unreadable), which compile.ts isolates with nothing allowed.
 */
import { AF_INET, AF_INET6, addressBits, hostMask, parseAddress, type Subnet } from "../../../cni/address";
import type { KeptPolicy } from "./objects";
import { EVERYTHING, parseSelector, type Selector, selectorText } from "./selectors";

export type PolicyProtocol = "TCP" | "UDP" | "SCTP";
export const PROTOCOLS: readonly PolicyProtocol[] = ["TCP", "UDP", "SCTP"];
export type Direction = "ingress" | "egress";

/** Pods chosen by labels: of the policy's namespace, or of the namespaces `namespaces` selects. */
export interface SelectorPeer {
  kind: "pods";
  /** Equal keys, equal pods: the index keeps one set of matches per key. */
  key: string;
  pods: Selector;
  /** Undefined: the policy's own namespace. */
  namespaces?: Selector;
  /** The policy's namespace. */
  namespace: string;
}

export interface BlockPeer {
  kind: "block";
  cidr: Subnet;
  except: Subnet[];
}

export type ParsedPeer = SelectorPeer | BlockPeer;

export interface NumberedPorts {
  protocol: PolicyProtocol;
  from: number;
  to: number;
}

export interface NamedPort {
  protocol: PolicyProtocol;
  name: string;
}

export type ParsedPort = NumberedPorts | NamedPort;

export interface ParsedRule {
  /** "namespace/name ingress[2]": which policy and rule. */
  origin: string;
  peers: ParsedPeer[] | "any";
  ports: ParsedPort[] | "any";
  /**
   * An egress rule to any peer with named ports: the pods those names are resolved
   * against (every pod of every namespace; a name never matches an address outside).
   */
  namedPortPods?: SelectorPeer;
}

export interface ParsedPolicy {
  key: string;
  namespace: string;
  name: string;
  podSelector: Selector;
  /** Present when the policy isolates the pods it selects in that direction. */
  ingress?: ParsedRule[];
  egress?: ParsedRule[];
  /** Audit mode (objects.ts, AUDIT_ANNOTATION): compiled only into what a pod's audit reads. */
  audit?: true;
}

/** What makes a policy unreadable (parse.ts); then what makes a pod's direction deny all (compile.ts, the controller). */
export const UNREADABLE_KINDS = [
  "shape",
  "unknown-field",
  "policy-types",
  "selector",
  "peer",
  "cidr",
  "except",
  "protocol",
  "port",
] as const;
/**
 * What ClusterNetworkPolicy adds (cluster-parse.ts), besides the kinds above: an
 * unreadable subject, tier, priority or action, and `domainNames`, which is refused.
 */
export const CLUSTER_UNREADABLE_KINDS = ["subject", "tier", "priority", "action", "domain-names"] as const;
export const BOUND_KINDS = ["rules-bound", "port-ranges-bound"] as const;
/** A pod's policy the agent could not write in full into the datapath's tables (a full map, a write error). */
export const INCOMPLETE = "incomplete";
export type ProblemKind =
  | (typeof UNREADABLE_KINDS)[number]
  | (typeof CLUSTER_UNREADABLE_KINDS)[number]
  | (typeof BOUND_KINDS)[number]
  | typeof INCOMPLETE;

export interface PolicyProblem {
  /** The policy ("namespace/name"; a ClusterNetworkPolicy's "cnp:name"), or the policies, the problem is about. */
  policy: string;
  kind: ProblemKind;
  reason: string;
  /** A bound's: the direction it denies whole. */
  direction?: Direction;
}

export type PolicyParse =
  | { ok: true; policy: ParsedPolicy }
  | {
      ok: false;
      key: string;
      namespace: string;
      /** The pods it would have selected, when that much could be read. */
      podSelector?: Selector;
      /** The directions it isolates as far as could be read: both when policyTypes could not. */
      isolates: Direction[];
      problems: PolicyProblem[];
      audit?: true;
    };

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;
const isPort = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 65535;

/** Collects the problems of one policy, each at its place ("spec.ingress[0].ports[1]"). */
class Reader {
  readonly problems: PolicyProblem[] = [];
  constructor(
    readonly policy: string,
    readonly namespace: string,
  ) {}
  problem(kind: ProblemKind, at: string, reason: string): undefined {
    this.problems.push({ policy: this.policy, kind, reason: `${at}: ${reason}` });
    return undefined;
  }
  /** Names a field `allowed` does not list; true when there is none. */
  onlyKnown(object: Record<string, unknown>, allowed: readonly string[], at: string): boolean {
    const unknown = Object.keys(object).filter((k) => !allowed.includes(k) && present(object[k]));
    for (const field of unknown) this.problem("unknown-field", at, `field ${JSON.stringify(field)} is not understood`);
    return unknown.length === 0;
  }
}

export function parsePolicy(kept: KeptPolicy): PolicyParse {
  const key = `${kept.namespace}/${kept.name}`;
  const reader = new Reader(key, kept.namespace);
  const spec = kept.spec;
  const selector = parseSelector(spec.podSelector);
  if (!selector.ok) reader.problem("selector", "spec.podSelector", selector.reason);
  const types = policyTypes(spec, reader);
  const policy: ParsedPolicy = {
    key,
    namespace: kept.namespace,
    name: kept.name,
    podSelector: selector.ok ? selector.selector : EVERYTHING,
  };
  if (types?.has("Ingress")) policy.ingress = readRules(spec.ingress, "ingress", reader);
  if (types?.has("Egress")) policy.egress = readRules(spec.egress, "egress", reader);
  if (kept.audit) policy.audit = true;
  if (reader.problems.length === 0) return { ok: true, policy };
  const failed: PolicyParse = {
    ok: false,
    key,
    namespace: kept.namespace,
    isolates: isolatedBy(spec, types),
    problems: reader.problems,
  };
  if (selector.ok) failed.podSelector = selector.selector;
  if (kept.audit) failed.audit = true;
  return failed;
}

/**
 * The directions an unreadable policy isolates, read so as to err on the side of
 * isolation: policyTypes when it could be read, else both; with policyTypes absent,
 * egress too when spec.egress is there in any shape (the API server would have counted
 * it as rules).
 */
function isolatedBy(spec: KeptPolicy["spec"], types: Set<string> | undefined): Direction[] {
  if (!types) return ["ingress", "egress"];
  const given = (v: unknown) => present(v) && !(Array.isArray(v) && v.length === 0);
  const out: Direction[] = [];
  if (types.has("Ingress")) out.push("ingress");
  if (types.has("Egress") || (!given(spec.policyTypes) && given(spec.egress))) out.push("egress");
  return out;
}

function policyTypes(spec: KeptPolicy["spec"], reader: Reader): Set<string> | undefined {
  const raw = spec.policyTypes;
  if (!present(raw) || (Array.isArray(raw) && raw.length === 0)) {
    const egressRules = Array.isArray(spec.egress) && spec.egress.length > 0;
    return new Set(egressRules ? ["Ingress", "Egress"] : ["Ingress"]);
  }
  if (!Array.isArray(raw)) return reader.problem("policy-types", "spec.policyTypes", "must be a list");
  const unknown = raw.filter((t) => t !== "Ingress" && t !== "Egress");
  if (unknown.length > 0) {
    return reader.problem("policy-types", "spec.policyTypes", `unknown ${JSON.stringify(unknown)}`);
  }
  return new Set(raw as string[]);
}

function readRules(raw: unknown, direction: Direction, reader: Reader): ParsedRule[] {
  if (!present(raw)) return [];
  if (!Array.isArray(raw)) return reader.problem("shape", `spec.${direction}`, "must be a list") ?? [];
  const rules: ParsedRule[] = [];
  for (const [i, entry] of raw.entries()) {
    const rule = readRule(entry, direction, i, reader);
    if (rule) rules.push(rule);
  }
  return rules;
}

function readRule(raw: unknown, direction: Direction, index: number, reader: Reader): ParsedRule | undefined {
  const at = `spec.${direction}[${index}]`;
  const peersField = direction === "ingress" ? "from" : "to";
  if (!isRecord(raw)) return reader.problem("shape", at, "a rule must be an object");
  if (!reader.onlyKnown(raw, [peersField, "ports"], at)) return undefined;
  const peers = readList(raw[peersField], `${at}.${peersField}`, reader, readPeer);
  const ports = readList(raw.ports, `${at}.ports`, reader, readPort);
  if (peers === undefined || ports === undefined) return undefined;
  const rule: ParsedRule = { origin: `${reader.policy} ${direction}[${index}]`, peers, ports };
  if (direction === "egress" && peers === "any" && ports !== "any" && ports.some((p) => "name" in p)) {
    rule.namedPortPods = selectorPeer(EVERYTHING, EVERYTHING, reader.namespace);
  }
  return rule;
}

/** Absent or empty: "any". Undefined when an item could not be read. */
function readList<T>(
  raw: unknown,
  at: string,
  reader: Reader,
  readItem: (item: unknown, at: string, reader: Reader) => T | undefined,
): T[] | "any" | undefined {
  if (!present(raw) || (Array.isArray(raw) && raw.length === 0)) return "any";
  if (!Array.isArray(raw)) return reader.problem("shape", at, "must be a list");
  const items = raw.map((item, i) => readItem(item, `${at}[${i}]`, reader));
  return items.every((item) => item !== undefined) ? (items as T[]) : undefined;
}

function readPeer(raw: unknown, at: string, reader: Reader): ParsedPeer | undefined {
  if (!isRecord(raw)) return reader.problem("peer", at, "a peer must be an object");
  if (!reader.onlyKnown(raw, ["podSelector", "namespaceSelector", "ipBlock"], at)) return undefined;
  const { podSelector, namespaceSelector, ipBlock } = raw;
  if (present(ipBlock)) {
    if (present(podSelector) || present(namespaceSelector)) {
      return reader.problem("peer", at, "ipBlock cannot be combined with a selector");
    }
    return readBlock(ipBlock, `${at}.ipBlock`, reader);
  }
  if (!present(podSelector) && !present(namespaceSelector)) {
    return reader.problem("peer", at, "names no podSelector, namespaceSelector or ipBlock");
  }
  const pods = parseSelector(podSelector);
  const namespaces = present(namespaceSelector) ? parseSelector(namespaceSelector) : undefined;
  if (!pods.ok) return reader.problem("selector", `${at}.podSelector`, pods.reason);
  if (namespaces && !namespaces.ok) return reader.problem("selector", `${at}.namespaceSelector`, namespaces.reason);
  return selectorPeer(pods.selector, namespaces?.selector, reader.namespace);
}

export function selectorPeer(pods: Selector, namespaces: Selector | undefined, namespace: string): SelectorPeer {
  // The policy's namespace is part of the key only when it is the peer's scope.
  const scope = namespaces ? { namespaces: namespaces.key } : { namespace };
  const key = JSON.stringify([scope, pods.key]);
  const peer: SelectorPeer = { kind: "pods", key, pods, namespace };
  if (namespaces) peer.namespaces = namespaces;
  return peer;
}

function readBlock(raw: unknown, at: string, reader: Reader): BlockPeer | undefined {
  if (!isRecord(raw)) return reader.problem("peer", at, "must be an object");
  if (!reader.onlyKnown(raw, ["cidr", "except"], at)) return undefined;
  const cidr = readPolicyCidr(raw.cidr);
  if (!cidr) return reader.problem("cidr", `${at}.cidr`, `${JSON.stringify(raw.cidr)} is not a CIDR`);
  const exceptRaw = raw.except ?? [];
  if (!Array.isArray(exceptRaw)) return reader.problem("shape", `${at}.except`, "must be a list");
  const except: Subnet[] = [];
  for (const [i, text] of exceptRaw.entries()) {
    const inner = readPolicyCidr(text);
    if (!inner) return reader.problem("cidr", `${at}.except[${i}]`, `${JSON.stringify(text)} is not a CIDR`);
    if (!strictlyInside(inner, cidr)) {
      return reader.problem("except", `${at}.except[${i}]`, `${JSON.stringify(text)} is not strictly inside the cidr`);
    }
    except.push(inner);
  }
  return { kind: "block", cidr, except };
}

export function strictlyInside(inner: Subnet, outer: Subnet): boolean {
  if (inner.family !== outer.family || inner.prefixLength <= outer.prefixLength) return false;
  return (inner.network & ~hostMask(outer.family, outer.prefixLength)) === outer.network;
}

function readPort(raw: unknown, at: string, reader: Reader): ParsedPort | undefined {
  if (!isRecord(raw)) return reader.problem("shape", at, "a port must be an object");
  if (!reader.onlyKnown(raw, ["protocol", "port", "endPort"], at)) return undefined;
  const protocol = raw.protocol ?? "TCP";
  if (!PROTOCOLS.includes(protocol as PolicyProtocol)) {
    return reader.problem("protocol", `${at}.protocol`, `${JSON.stringify(protocol)} is not TCP, UDP or SCTP`);
  }
  const proto = protocol as PolicyProtocol;
  const { port, endPort } = raw;
  if (present(endPort) && typeof port !== "number") {
    return reader.problem("port", `${at}.endPort`, "needs a numeric port");
  }
  if (!present(port)) return { protocol: proto, from: 1, to: 65535 };
  if (typeof port === "string" && port !== "") return { protocol: proto, name: port };
  if (!isPort(port)) return reader.problem("port", `${at}.port`, `${JSON.stringify(port)} is not a port (1-65535)`);
  if (!present(endPort)) return { protocol: proto, from: port, to: port };
  if (!isPort(endPort) || endPort < port) {
    return reader.problem("port", `${at}.endPort`, `${JSON.stringify(endPort)} is not a port from ${port} to 65535`);
  }
  return { protocol: proto, from: port, to: endPort };
}

// ---- CIDRs as the API server reads them -------------------------------------------------

const IPV4_SLOPPY = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/;
const IPV4_MAPPED = 0xffffn;

/** Dotted decimal whose octets may have leading zeros (read as decimal, as Go's old parser did). */
function sloppyIPv4(text: string): bigint | undefined {
  const octets = IPV4_SLOPPY.exec(text)
    ?.slice(1)
    .map((o) => (o.length > 12 ? 256 : Number(o)));
  if (!octets || octets.some((o) => o > 255)) return undefined;
  return octets.reduce((value, o) => (value << 8n) | BigInt(o), 0n);
}

/** A CIDR as the API server accepts it, as the network it names; undefined when it is none. */
export function readPolicyCidr(text: unknown): Subnet | undefined {
  if (typeof text !== "string") return undefined;
  const slash = text.indexOf("/");
  const lengthText = text.slice(slash + 1);
  if (slash === -1 || !/^\d{1,10}$/.test(lengthText)) return undefined;
  const addressText = text.slice(0, slash);
  const parsed = parseAddress(addressText);
  const v4 = parsed ? undefined : sloppyIPv4(addressText);
  const family = parsed?.family ?? (v4 === undefined ? undefined : AF_INET);
  const value = parsed?.value ?? v4;
  const length = Number(lengthText);
  if (family === undefined || value === undefined || length > addressBits(family)) return undefined;
  const network = value & ~hostMask(family, length);
  if (family === AF_INET6 && length >= 96 && network >> 32n === IPV4_MAPPED) {
    return { family: AF_INET, network: network & 0xffffffffn, prefixLength: length - 96 };
  }
  return { family, network, prefixLength: length };
}

/** Every selector peer of a policy: what the index keeps matches for. */
export function selectorPeersOf(policy: ParsedPolicy): SelectorPeer[] {
  const peers: SelectorPeer[] = [];
  for (const rule of [...(policy.ingress ?? []), ...(policy.egress ?? [])]) {
    if (rule.peers !== "any") for (const p of rule.peers) if (p.kind === "pods") peers.push(p);
    if (rule.namedPortPods) peers.push(rule.namedPortPods);
  }
  return peers;
}

/** A peer as people read it, for reports and tests. */
export function peerText(peer: SelectorPeer): string {
  const pods = selectorText(peer.pods);
  return peer.namespaces
    ? `pods ${pods} in namespaces ${selectorText(peer.namespaces)}`
    : `pods ${pods} in ${peer.namespace}`;
}
