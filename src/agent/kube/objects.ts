/**
 * What the agent keeps of each API object: the fields its controllers read, copied out
 * of the object as it arrives (informer.ts), so the object itself is garbage at once.
 * A Service is kept in a few hundred bytes instead of the kilobytes of its JSON (managed
 * fields, annotations, status), and a change to anything else is no change at all.
 *
 * The kept shapes are subsets of the API's types: the planners read them as they would
 * read the objects. Every field is copied only when it has the type the API gives it;
 * the planners check values.
 */
import { SERVICE_NAME_LABEL, type ServiceObject, type SliceObject } from "../services/plan";
import { objectKey, type Transformed } from "./informer";
import { type NodeFacts, nodeFacts } from "./node-facts";

type Raw = Record<string, unknown>;

/**
 * One copy of each small value that repeats across objects (a node's name in every
 * endpoint on it, the few shapes of an endpoint's conditions, a slice's ports): JSON.parse
 * makes a new string or object for each, tens of thousands in a large cluster. Bounded:
 * a value seen more often than the table holds is simply not shared.
 */
class Interner {
  private readonly values = new Map<string, unknown>();
  constructor(private readonly max = 100_000) {}
  share<T>(key: string, value: T): T {
    const known = this.values.get(key);
    if (known !== undefined) return known as T;
    if (this.values.size < this.max) this.values.set(key, value);
    return value;
  }
}
const shared = new Interner();
const sharedRecord = (r: Raw): Raw => shared.share(`r${JSON.stringify(r)}`, r);
const sharedString = (s: string): string => shared.share(`s${s}`, s);
const record = (v: unknown): Raw | undefined =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Raw) : undefined;
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
/** Copies the fields named whose values are strings or numbers; others stay out. */
function pick(from: unknown, fields: readonly string[]): Raw {
  const src = record(from) ?? {};
  const out: Raw = {};
  for (const f of fields) {
    const v = src[f];
    if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") out[f] = v;
  }
  return out;
}

function meta(object: unknown, labels?: readonly string[]): { namespace?: string; name: string; labels?: Raw } {
  const m = record(record(object)?.metadata) ?? {};
  const out: { namespace?: string; name: string; labels?: Raw } = { name: str(m.name) ?? "" };
  const namespace = str(m.namespace);
  if (namespace) out.namespace = sharedString(namespace);
  if (labels) {
    const kept = pick(m.labels, labels);
    if (Object.keys(kept).length > 0) out.labels = kept;
  }
  return out;
}

export function nodeObject(raw: unknown): Transformed<NodeFacts> | undefined {
  const facts = nodeFacts(raw as Parameters<typeof nodeFacts>[0]);
  return facts ? { key: facts.name, object: facts } : undefined;
}

export function serviceObject(raw: unknown): Transformed<ServiceObject> | undefined {
  const key = objectKey(raw);
  if (key === undefined) return undefined;
  const spec = record(record(raw)?.spec) ?? {};
  const kept: Raw = pick(spec, ["type", "clusterIP", "sessionAffinity", "internalTrafficPolicy"]);
  const ips = list(spec.clusterIPs).filter((ip) => typeof ip === "string");
  if (ips.length > 0) kept.clusterIPs = ips;
  if (Array.isArray(spec.ports)) kept.ports = spec.ports.map((p) => pick(p, ["name", "protocol", "port"]));
  const timeout = record(record(record(spec.sessionAffinityConfig)?.clientIP))?.timeoutSeconds;
  if (timeout !== undefined) kept.sessionAffinityConfig = { clientIP: { timeoutSeconds: timeout } };
  return { key, object: { metadata: meta(raw), spec: kept } as ServiceObject };
}

export function sliceObject(raw: unknown): Transformed<SliceObject> | undefined {
  const key = objectKey(raw);
  if (key === undefined) return undefined;
  const r = record(raw) ?? {};
  const object: Raw = { metadata: meta(raw, [SERVICE_NAME_LABEL]) };
  const addressType = str(r.addressType);
  if (addressType) object.addressType = addressType;
  if (Array.isArray(r.ports)) {
    const ports = r.ports.map((p) => pick(p, ["name", "protocol", "port"]));
    object.ports = shared.share(`p${JSON.stringify(ports)}`, ports);
  }
  if (Array.isArray(r.endpoints)) {
    object.endpoints = r.endpoints.map((e) => {
      const ep = record(e) ?? {};
      const kept: Raw = {};
      const nodeName = str(ep.nodeName);
      if (nodeName !== undefined) kept.nodeName = sharedString(nodeName);
      const addresses = list(ep.addresses).filter((a) => typeof a === "string");
      // Every address of an endpoint is the same backend: the planner takes the first.
      if (addresses.length > 0) kept.addresses = addresses.slice(0, 1);
      const conditions = pick(ep.conditions, ["ready", "serving", "terminating"]);
      if (Object.keys(conditions).length > 0) kept.conditions = sharedRecord(conditions);
      return kept;
    });
  }
  return { key, object: object as SliceObject };
}

/** The Service an EndpointSlice serves, as "namespace/name"; undefined for none. */
export function sliceService(slice: SliceObject | undefined): string | undefined {
  const name = slice?.metadata?.labels?.[SERVICE_NAME_LABEL];
  return name ? `${slice?.metadata?.namespace ?? ""}/${name}` : undefined;
}
