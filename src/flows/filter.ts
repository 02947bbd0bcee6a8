/**
 * Which flow records to show, as `hubble observe` chooses them: by either end's pod or
 * namespace, verdict, protocol, port, policy, direction, node, and by state (a flow's
 * start, its cut, its end with counts). Each field may hold several
 * values, any of which matches (OR); a record must match every field given (AND).
 *
 * The agent's /flows reads a filter from its query and the CLI writes one there, both
 * through this file (the same keys and checks on both sides). Pure: no I/O.
 */
import type { FlowEnd, FlowRecord, FlowVerdict } from "./record";

export type FlowDirection = FlowRecord["direction"];
export type FlowState = FlowRecord["state"];

export interface FlowFilter {
  /** "namespace/name" of the source pod, or "namespace/": any pod of that namespace. */
  fromPod?: string[];
  /** The same, of the destination. */
  toPod?: string[];
  /** The same, of either end. */
  pod?: string[];
  /** Either end's namespace (a pod's or a Service's). */
  namespace?: string[];
  verdict?: FlowVerdict[];
  /** TCP, UDP, SCTP, ICMP, ICMPv6 (any case), or a protocol's number. */
  protocol?: string[];
  /** Either end's port. */
  port?: number[];
  /** A part of the deciding rule's text or of a policy's name ("b/allow-a", "allow"). */
  policy?: string[];
  direction?: FlowDirection[];
  /** The node whose program judged it. */
  node?: string[];
  state?: FlowState[];
}

/** A filter value that cannot be read; the message names it. */
export class FlowFilterError extends Error {}

const VERDICTS: readonly FlowVerdict[] = ["forwarded", "dropped", "audit"];
const DIRECTIONS: readonly FlowDirection[] = ["ingress", "egress"];
const STATES: readonly FlowState[] = ["new", "revoked", "ended"];
const PROTOCOLS = ["tcp", "udp", "sctp", "icmp", "icmpv6"];
const PROTOCOL_NUMBERS: Record<string, string> = { 1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp" };

/** "TCP", "tcp" and "6" are one protocol. */
const protocolName = (text: string) => PROTOCOL_NUMBERS[text] ?? text.toLowerCase();

const fail = (key: string, text: string, want: string) => new FlowFilterError(`bad ${key} "${text}": ${want}`);

function podPattern(key: string, text: string): string {
  const slash = text.indexOf("/");
  if (slash <= 0 || text.indexOf("/", slash + 1) >= 0)
    throw fail(key, text, "namespace/name, or namespace/ for any of its pods");
  return text;
}

function oneOf<T extends string>(words: readonly T[]) {
  return (key: string, text: string): T => {
    if (!(words as readonly string[]).includes(text)) throw fail(key, text, words.join(" | "));
    return text as T;
  };
}

/** Every field: its query key (and the CLI's flag) and how a value is read and checked. */
export const FILTER_FIELDS = {
  fromPod: { key: "from-pod", read: podPattern },
  toPod: { key: "to-pod", read: podPattern },
  pod: { key: "pod", read: podPattern },
  namespace: {
    key: "namespace",
    read: (key: string, text: string) => {
      if (text.includes("/")) throw fail(key, text, "a namespace, without a pod");
      return text;
    },
  },
  verdict: { key: "verdict", read: oneOf(VERDICTS) },
  protocol: {
    key: "protocol",
    read: (key: string, text: string) => {
      if (!PROTOCOLS.includes(text.toLowerCase()) && !isIntegerIn(text, 0, 255))
        throw fail(key, text, "TCP | UDP | SCTP | ICMP | ICMPv6, or a number up to 255");
      return text;
    },
  },
  port: {
    key: "port",
    read: (key: string, text: string) => {
      if (!isIntegerIn(text, 0, 65535)) throw fail(key, text, "a port number, 0 to 65535");
      return Number(text);
    },
  },
  policy: { key: "policy", read: (_key: string, text: string) => text },
  direction: { key: "direction", read: oneOf(DIRECTIONS) },
  node: { key: "node", read: (_key: string, text: string) => text },
  state: { key: "state", read: oneOf(STATES) },
} as const satisfies {
  [K in keyof FlowFilter]-?: { key: string; read: (key: string, text: string) => NonNullable<FlowFilter[K]>[number] };
};

export type FilterField = keyof typeof FILTER_FIELDS;

const isIntegerIn = (text: string, low: number, high: number) =>
  /^\d+$/.test(text) && Number(text) >= low && Number(text) <= high;

/** One value of a field, read as the query and the CLI's flags read it; throws FlowFilterError. */
export function readFilterValue<K extends FilterField>(field: K, text: string): NonNullable<FlowFilter[K]>[number] {
  const spec = FILTER_FIELDS[field];
  return spec.read(spec.key, text) as NonNullable<FlowFilter[K]>[number];
}

const fields = Object.keys(FILTER_FIELDS) as FilterField[];

/** The filter a query gives: each key as often as it has values ("verdict=dropped&verdict=audit"). */
export function filterFromQuery(query: URLSearchParams): FlowFilter {
  const filter: Record<string, unknown[]> = {};
  for (const field of fields) {
    const values = query.getAll(FILTER_FIELDS[field].key);
    if (values.length > 0) filter[field] = values.map((text) => readFilterValue(field, text));
  }
  return filter as FlowFilter;
}

export function filterToQuery(filter: FlowFilter): URLSearchParams {
  const query = new URLSearchParams();
  for (const field of fields)
    for (const value of filter[field] ?? []) query.append(FILTER_FIELDS[field].key, String(value));
  return query;
}

const podOf = (end: FlowEnd) =>
  end.kind === "pod" && end.namespace && end.pod ? `${end.namespace}/${end.pod}` : undefined;

function podMatches(end: FlowEnd, pattern: string): boolean {
  const pod = podOf(end);
  return pod !== undefined && (pattern.endsWith("/") ? pod.startsWith(pattern) : pod === pattern);
}

/** A field given no values matches everything; one given values matches if any does. */
function any<T>(values: readonly T[] | undefined, matches: (value: T) => boolean): boolean {
  return values === undefined || values.length === 0 || values.some(matches);
}

export function matchesFlow(filter: FlowFilter, record: FlowRecord): boolean {
  const { source, destination } = record;
  const ends = [source, destination];
  return (
    any(filter.fromPod, (p) => podMatches(source, p)) &&
    any(filter.toPod, (p) => podMatches(destination, p)) &&
    any(filter.pod, (p) => ends.some((end) => podMatches(end, p))) &&
    any(filter.namespace, (ns) => ends.some((end) => end.namespace === ns)) &&
    any(filter.verdict, (v) => record.verdict === v) &&
    any(filter.protocol, (p) => protocolName(record.protocol) === protocolName(p)) &&
    any(filter.port, (port) => ends.some((end) => end.port === port)) &&
    any(filter.policy, (p) => record.policy.includes(p) || record.policies.some((name) => name.includes(p))) &&
    any(filter.direction, (d) => record.direction === d) &&
    any(filter.node, (n) => record.node === n) &&
    any(filter.state, (s) => record.state === s)
  );
}
