/**
 * Who an address is, for flow records: a pod (namespace/name), a node, a Service's
 * ClusterIP, else the world. Read from the agent's informers, rebuilt at most once a
 * `refreshMs` (a flood of new flows costs no more than one walk of them a period), and
 * an address that left keeps its last owner's name for `keepDepartedMs` (a record of a
 * pod deleted a minute ago still names it), unless someone else holds it now.
 */
import type { FlowEnd } from "../../flows/record";

/** The informers' view, as the book reads it. */
export interface AddressSources {
  pods(): Iterable<{ namespace: string; name: string; ips: string[]; hostNetwork: boolean; terminal?: true }>;
  nodes(): Iterable<{ name: string; addresses: string[] }>;
  services(): Iterable<{ namespace: string; name: string; clusterIPs: string[] }>;
}

type Owner = Omit<FlowEnd, "ip" | "port">;

export class AddressBook {
  private current = new Map<string, Owner>();
  private readonly departed = new Map<string, { owner: Owner; until: number }>();
  private builtAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly sources: AddressSources,
    private readonly options: { refreshMs: number; keepDepartedMs: number; now?: () => number } = {
      refreshMs: 2000,
      keepDepartedMs: 300_000,
    },
  ) {}

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  /** Rebuilds from the informers when the last build is older than refreshMs. */
  refresh(): void {
    const now = this.now();
    if (now - this.builtAt < this.options.refreshMs) return;
    this.builtAt = now;
    const next = new Map<string, Owner>();
    // Nodes first: a host-network pod's address is its node's, and named so.
    for (const n of this.sources.nodes()) for (const ip of n.addresses) next.set(ip, { kind: "node", node: n.name });
    for (const s of this.sources.services())
      for (const ip of s.clusterIPs) next.set(ip, { kind: "service", namespace: s.namespace, service: s.name });
    for (const p of this.sources.pods()) {
      if (p.hostNetwork || p.terminal) continue;
      for (const ip of p.ips) next.set(ip, { kind: "pod", namespace: p.namespace, pod: p.name });
    }
    for (const [ip, owner] of this.current) {
      if (!next.has(ip)) this.departed.set(ip, { owner, until: now + this.options.keepDepartedMs });
    }
    for (const [ip, d] of this.departed) if (d.until <= now || next.has(ip)) this.departed.delete(ip);
    this.current = next;
  }

  end(ip: string, port: number): FlowEnd {
    const owner = this.current.get(ip) ?? this.departed.get(ip)?.owner ?? { kind: "world" as const };
    return { ip, port, ...owner };
  }
}
