/**
 * What the agent needs of a Node object, checked: its name, pod CIDRs (spec.podCIDRs, or
 * the older single spec.podCIDR), InternalIP addresses and the WireGuard public key its
 * agent published (WIREGUARD_KEY_ANNOTATION). Anything malformed (a CIDR
 * with host bits, an address that is none, fields of the wrong type) is named in
 * `problems` and left out; the rest of the node still counts. Pure.
 */
import type { V1Node } from "@kubernetes/client-node";
import { canonicalAddress, type Family, formatSubnet, parseAddress, parseSubnet, type Subnet } from "../../cni/address";

export interface NodeFacts {
  name: string;
  /** Canonical text, e.g. "10.244.1.0/24", "fd00:10:244:1::/64". */
  podCidrs: { text: string; subnet: Subnet }[];
  /** Canonical text, in the order the node lists them. */
  internalIPs: { text: string; family: Family }[];
  problems: string[];
  /** base64, 32 bytes: the node encrypts with this key (its agent runs --encryption=wireguard). */
  wireguardKey?: string;
}

/** Where an agent with --encryption=wireguard publishes its node's public key (as Calico does). */
export const WIREGUARD_KEY_ANNOTATION = "netkit-cni.io/wireguard-public-key";

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
  const key = (node.metadata?.annotations as Record<string, unknown> | undefined)?.[WIREGUARD_KEY_ANNOTATION];
  if (key !== undefined) {
    if (
      typeof key === "string" &&
      Buffer.from(key, "base64").length === 32 &&
      Buffer.from(key, "base64").toString("base64") === key
    )
      facts.wireguardKey = key;
    else facts.problems.push(`annotation ${WIREGUARD_KEY_ANNOTATION} ${JSON.stringify(key)} is not a WireGuard key`);
  }
  return facts;
}
