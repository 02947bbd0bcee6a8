/**
 * Who an address is, for flow records: a pod (namespace/name), a node, a Service's
 * ClusterIP, else the world. Kept by the informers' changes, each costing the addresses
 * of the one object that changed (recorder.ts follows them), so that naming a flood of
 * flows reads a map and nothing walks the cluster. An address that left keeps its last
 * holder's name for `keepDepartedMs` (a record of a pod deleted a minute ago still names
 * it), unless someone else holds it now. Where two hold one address, a pod outranks a
 * Service, which outranks a node (a host-network pod's address is its node's, and named
 * so: such pods hold none here).
 */
import type { FlowEnd } from "../../flows/record";

type Owner = Omit<FlowEnd, "ip" | "port">;

/** What holds addresses, and how it ranks where two hold one. */
const RANK = { node: 0, service: 1, pod: 2 } as const;
type Holder = keyof typeof RANK;

/** The fields of a pod, a node and a Service the book reads. */
export interface AddressPod {
  namespace: string;
  name: string;
  ips: string[];
  hostNetwork: boolean;
  terminal?: true;
}
export interface AddressNode {
  name: string;
  addresses: string[];
}
export interface AddressService {
  namespace: string;
  name: string;
  clusterIPs: string[];
}

export class AddressBook {
  /** address → holder key ("pod a/client") → who it is. */
  private readonly holders = new Map<string, Map<string, Owner>>();
  /** holder key → the addresses it holds. */
  private readonly held = new Map<string, readonly string[]>();
  private readonly departed = new Map<string, { owner: Owner; until: number }>();
  private prunedAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: { keepDepartedMs: number; now?: () => number } = { keepDepartedMs: 300_000 }) {}

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  /** A pod's change; undefined: it is gone. A host-network or finished pod holds no address. */
  pod(key: string, pod: AddressPod | undefined): void {
    const holding = pod && !pod.hostNetwork && !pod.terminal;
    this.hold(`pod ${key}`, holding ? pod.ips : [], { kind: "pod", namespace: pod?.namespace, pod: pod?.name });
  }

  node(key: string, node: AddressNode | undefined): void {
    this.hold(`node ${key}`, node?.addresses ?? [], { kind: "node", node: node?.name });
  }

  service(key: string, service: AddressService | undefined): void {
    this.hold(`service ${key}`, service?.clusterIPs ?? [], {
      kind: "service",
      namespace: service?.namespace,
      service: service?.name,
    });
  }

  /** `key` holds `ips` now, as `owner`; what it held before and holds no more departs. */
  private hold(key: string, ips: readonly string[], owner: Owner): void {
    const now = this.now();
    const before = this.held.get(key) ?? [];
    for (const ip of before) {
      if (ips.includes(ip)) continue;
      const of = this.holders.get(ip);
      const last = of?.get(key);
      of?.delete(key);
      if (of && of.size === 0) {
        this.holders.delete(ip);
        if (last) this.departed.set(ip, { owner: last, until: now + this.options.keepDepartedMs });
      }
    }
    for (const ip of ips) {
      let of = this.holders.get(ip);
      if (!of) {
        of = new Map();
        this.holders.set(ip, of);
      }
      of.set(key, owner);
      this.departed.delete(ip);
    }
    if (ips.length > 0) this.held.set(key, [...ips]);
    else this.held.delete(key);
    this.prune(now);
  }

  /** Departed names past their time go, at most ten times per keepDepartedMs. */
  private prune(now: number): void {
    if (now - this.prunedAt < this.options.keepDepartedMs / 10) return;
    this.prunedAt = now;
    for (const [ip, d] of this.departed) if (d.until <= now) this.departed.delete(ip);
  }

  end(ip: string, port: number): FlowEnd {
    let best: Owner | undefined;
    for (const owner of this.holders.get(ip)?.values() ?? []) {
      if (!best || RANK[owner.kind as Holder] > RANK[best.kind as Holder]) best = owner;
    }
    if (!best) {
      const d = this.departed.get(ip);
      if (d && d.until > this.now()) best = d.owner;
    }
    return { ip, port, ...(best ?? { kind: "world" as const }) };
  }
}
