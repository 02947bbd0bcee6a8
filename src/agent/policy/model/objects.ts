/**
 * What the policy index keeps of Pods, Namespaces, Nodes, NetworkPolicies and
 * ClusterNetworkPolicies, copied out of each object as the informer takes it in (the
 * transforms of kube/objects.ts, in its style): a pod's labels, addresses, node, named
 * ports and whether it has finished; a namespace's labels; a node's labels and addresses;
 * a policy's spec. A change to anything else (a pod's conditions, a policy's
 * annotations, a node's conditions) is no change at all.
 *
 * Pods and namespaces keep only well-formed values: an address that is none, a port
 * without a name or number is left out (nothing could select it). A policy's spec is kept
 * as the API wrote it, minus what NetworkPolicy does not define: checking it is the
 * compiler's work (parse.ts), which reports what it cannot read instead of reading less.
 */
import { canonicalAddress } from "../../../cni/address";
import type { PolicyProtocol } from "./parse";
import type { Labels } from "./selectors";

export interface PodPort {
  name: string;
  port: number;
  protocol: PolicyProtocol;
}

export interface PolicyPod {
  namespace: string;
  name: string;
  labels: Labels;
  /** status.podIPs in canonical text, each once; none before the pod has an address. */
  ips: string[];
  /** Unset until the pod is scheduled. */
  nodeName?: string;
  hostNetwork: boolean;
  /** Every container's named ports. */
  ports: PodPort[];
  /** Succeeded or Failed: its containers are gone and its addresses may be someone else's. */
  terminal?: true;
}

export interface PolicyNamespace {
  name: string;
  labels: Labels;
}

/**
 * What each transform gives the informer: an object's key and what is kept of it (the
 * shape of kube/informer.ts's `Transformed`, written out: the model imports nothing of
 * the API side).
 */
interface Kept<T> {
  key: string;
  object: T;
}

/** A NetworkPolicy's spec as the API wrote it (fields NetworkPolicySpec does not have dropped). */
export interface KeptPolicy {
  namespace: string;
  name: string;
  spec: { podSelector?: unknown; policyTypes?: unknown; ingress?: unknown; egress?: unknown };
  /** Annotated AUDIT_ANNOTATION: "true": judged beside the others, enforcing nothing. */
  audit?: true;
}

/**
 * A NetworkPolicy or ClusterNetworkPolicy annotated so, with "true", is tried on live
 * traffic without enforcing it: what it would deny is let through and its flow record
 * says "audit" (docs/flows.md).
 */
export const AUDIT_ANNOTATION = "netkit-cni.io/audit";
const audited = (metadata: Record<string, unknown>): boolean =>
  record(metadata.annotations)?.[AUDIT_ANNOTATION] === "true";

/**
 * A ClusterNetworkPolicy (policy.networking.k8s.io v1alpha2 and v1beta1: one spec shape)
 * as the API wrote it, fields its spec does not have dropped. Cluster-scoped: its key is
 * its name.
 */
export interface KeptClusterPolicy {
  name: string;
  /** metadata.generation: which spec its status speaks of. */
  generation?: number;
  spec: { tier?: unknown; priority?: unknown; subject?: unknown; ingress?: unknown; egress?: unknown };
  /** Annotated AUDIT_ANNOTATION: "true": judged beside the others, enforcing nothing. */
  audit?: true;
}

/** A Node as a ClusterNetworkPolicy's `nodes` peer reads it. */
export interface PolicyNode {
  name: string;
  labels: Labels;
  /**
   * status.addresses of type InternalIP and ExternalIP that are addresses, canonical,
   * each once, sorted: the node's IPs ("the IPs present in the node.Status.Addresses
   * field"). Hostname, InternalDNS and ExternalDNS hold names, which a peer of addresses
   * cannot match; an entry of another type, or none, is not an IP either.
   */
  addresses: string[];
}

type Raw = Record<string, unknown>;

const record = (v: unknown): Raw | undefined =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Raw) : undefined;
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);

/**
 * One copy of each label set and port list that repeats (every replica of a Deployment
 * has the same ones). Bounded: past the bound, values are simply not shared.
 */
const MAX_SHARED = 100_000;
const sharedValues = new Map<string, unknown>();
function shared<T>(kind: string, value: T): T {
  const key = `${kind}${JSON.stringify(value)}`;
  const known = sharedValues.get(key);
  if (known !== undefined) return known as T;
  if (sharedValues.size < MAX_SHARED) sharedValues.set(key, value);
  return value;
}

function labelsOf(metadata: Raw): Labels {
  const out: Record<string, string> = {};
  const labels = record(metadata.labels) ?? {};
  for (const key of Object.keys(labels).sort()) {
    const value = labels[key];
    if (typeof value === "string") out[key] = value;
  }
  return shared("l", out);
}

export function podObject(raw: unknown): Kept<PolicyPod> | undefined {
  const metadata = record(record(raw)?.metadata) ?? {};
  const namespace = str(metadata.namespace);
  const name = str(metadata.name);
  if (namespace === undefined || name === undefined) return undefined;
  const spec = record(record(raw)?.spec) ?? {};
  const status = record(record(raw)?.status) ?? {};
  const pod: PolicyPod = {
    namespace,
    name,
    labels: labelsOf(metadata),
    ips: podIPs(status),
    hostNetwork: spec.hostNetwork === true,
    ports: namedPorts(spec),
  };
  const nodeName = str(spec.nodeName);
  if (nodeName !== undefined) pod.nodeName = nodeName;
  if (status.phase === "Succeeded" || status.phase === "Failed") pod.terminal = true;
  return { key: `${namespace}/${name}`, object: pod };
}

/** status.podIPs (status.podIP alone from an API that predates dual-stack). */
function podIPs(status: Raw): string[] {
  const listed = list(status.podIPs).map((entry) => record(entry)?.ip);
  const texts = listed.length > 0 ? listed : [status.podIP];
  const ips: string[] = [];
  for (const text of texts) {
    const ip = typeof text === "string" ? canonicalAddress(text) : undefined;
    if (ip !== undefined && !ips.includes(ip)) ips.push(ip);
  }
  return ips;
}

const PROTOCOLS: readonly string[] = ["TCP", "UDP", "SCTP"];

/**
 * The containers' ports that have names: a policy's named port is resolved against them.
 * The app containers and the sidecars (init containers with restartPolicy Always, which
 * run beside them); other init containers have finished before the pod serves.
 */
function namedPorts(spec: Raw): PodPort[] {
  const ports: PodPort[] = [];
  const sidecars = list(spec.initContainers).filter((c) => record(c)?.restartPolicy === "Always");
  for (const container of [...list(spec.containers), ...sidecars]) {
    for (const entry of list(record(container)?.ports)) {
      const p = record(entry) ?? {};
      const name = str(p.name);
      const port = p.containerPort;
      const protocol = p.protocol ?? "TCP";
      if (name === undefined || typeof protocol !== "string" || !PROTOCOLS.includes(protocol)) continue;
      if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) continue;
      ports.push({ name, port, protocol: protocol as PolicyProtocol });
    }
  }
  ports.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.protocol < b.protocol ? -1 : 1));
  return ports.length === 0 ? [] : shared("p", ports);
}

export function namespaceObject(raw: unknown): Kept<PolicyNamespace> | undefined {
  const metadata = record(record(raw)?.metadata) ?? {};
  const name = str(metadata.name);
  if (name === undefined) return undefined;
  return { key: name, object: { name, labels: labelsOf(metadata) } };
}

export function networkPolicyObject(raw: unknown): Kept<KeptPolicy> | undefined {
  const metadata = record(record(raw)?.metadata) ?? {};
  const namespace = str(metadata.namespace);
  const name = str(metadata.name);
  if (namespace === undefined || name === undefined) return undefined;
  const spec = record(record(raw)?.spec) ?? {};
  const kept: KeptPolicy["spec"] = {};
  for (const field of ["podSelector", "policyTypes", "ingress", "egress"] as const) {
    if (spec[field] !== undefined) kept[field] = spec[field];
  }
  const object: KeptPolicy = { namespace, name, spec: kept };
  if (audited(metadata)) object.audit = true;
  return { key: `${namespace}/${name}`, object };
}

export function clusterNetworkPolicyObject(raw: unknown): Kept<KeptClusterPolicy> | undefined {
  const metadata = record(record(raw)?.metadata) ?? {};
  const name = str(metadata.name);
  if (name === undefined) return undefined;
  const spec = record(record(raw)?.spec) ?? {};
  const kept: KeptClusterPolicy["spec"] = {};
  for (const field of ["tier", "priority", "subject", "ingress", "egress"] as const) {
    if (spec[field] !== undefined) kept[field] = spec[field];
  }
  const object: KeptClusterPolicy = { name, spec: kept };
  if (typeof metadata.generation === "number") object.generation = metadata.generation;
  if (audited(metadata)) object.audit = true;
  return { key: name, object };
}

const NODE_IP_TYPES: readonly unknown[] = ["InternalIP", "ExternalIP"];

export function nodeObject(raw: unknown): Kept<PolicyNode> | undefined {
  const metadata = record(record(raw)?.metadata) ?? {};
  const name = str(metadata.name);
  if (name === undefined) return undefined;
  const addresses = new Set<string>();
  for (const entry of list(record(record(raw)?.status)?.addresses)) {
    const e = record(entry) ?? {};
    if (!NODE_IP_TYPES.includes(e.type) || typeof e.address !== "string") continue;
    const ip = canonicalAddress(e.address);
    if (ip !== undefined) addresses.add(ip);
  }
  return { key: name, object: { name, labels: labelsOf(metadata), addresses: [...addresses].sort() } };
}
