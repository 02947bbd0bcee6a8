/**
 * What the agent needs of a Node object, checked: its name, pod CIDRs (spec.podCIDRs, or
 * the older single spec.podCIDR) and InternalIP addresses. Anything malformed (a CIDR
 * with host bits, an address that is none, fields of the wrong type) is named in
 * `problems` and left out; the rest of the node still counts. Pure.
 */
import type { V1Node } from "@kubernetes/client-node";
import { canonicalAddress, type Family, formatSubnet, parseAddress, parseSubnet, type Subnet } from "../cni/address";

export interface NodeFacts {
  name: string;
  /** Canonical text, e.g. "10.244.1.0/24", "fd00:10:244:1::/64". */
  podCidrs: { text: string; subnet: Subnet }[];
  /** Canonical text, in the order the node lists them. */
  internalIPs: { text: string; family: Family }[];
  problems: string[];
}

const strings = (v: unknown): unknown[] => (Array.isArray(v) ? v : v === undefined || v === null ? [] : [v]);

export function nodeFacts(node: V1Node): NodeFacts | undefined {
  const name = node?.metadata?.name;
  if (typeof name !== "string" || name === "") return undefined;
  const facts: NodeFacts = { name, podCidrs: [], internalIPs: [], problems: [] };
  const spec = (node.spec ?? {}) as { podCIDRs?: unknown; podCIDR?: unknown };
  const cidrs = strings(spec.podCIDRs).length > 0 ? strings(spec.podCIDRs) : strings(spec.podCIDR);
  for (const c of cidrs) {
    const parsed = typeof c === "string" ? parseSubnet(c) : undefined;
    if (!parsed?.ok) {
      facts.problems.push(`pod CIDR ${JSON.stringify(c)} is malformed`);
      continue;
    }
    const text = formatSubnet(parsed.subnet);
    if (!facts.podCidrs.some((p) => p.text === text)) facts.podCidrs.push({ text, subnet: parsed.subnet });
  }
  const addresses = strings((node.status as { addresses?: unknown } | undefined)?.addresses);
  for (const a of addresses) {
    const { type, address } = (a ?? {}) as { type?: unknown; address?: unknown };
    if (type !== "InternalIP") continue;
    const text = typeof address === "string" ? canonicalAddress(address) : undefined;
    const family = text ? parseAddress(text)?.family : undefined;
    if (!text || family === undefined) {
      facts.problems.push(`InternalIP ${JSON.stringify(address)} is malformed`);
      continue;
    }
    facts.internalIPs.push({ text, family });
  }
  return facts;
}
