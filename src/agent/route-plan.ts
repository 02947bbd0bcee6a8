/**
 * Which routes this node needs to the other nodes' pods: for every other node, each of
 * its pod CIDRs via its first InternalIP of the same family, when that address is on a
 * link this node is on (a connected route covers it). Nothing is routed through the
 * default gateway: a node whose address is not directly reachable is reported instead,
 * and so is a pod CIDR that overlaps this node's own (routing it would take this node's
 * pods away) or another node's (two nodes cannot both own it). Pure.
 */
import { type Family, parseAddress, type Subnet, subnetContains } from "../cni/address";
import type { NodeFacts } from "./node-facts";

/** A connected route: a destination prefix on a device, without a gateway. */
export interface ConnectedRoute {
  subnet: Subnet;
  ifindex: number;
}

export interface PeerRoute {
  node: string;
  dst: string;
  family: Family;
  gateway: string;
  ifindex: number;
}

export type PeerState = "routed" | "unreachable" | "no-address" | "conflict" | "no-pod-cidr";

export interface RoutePlan {
  routes: PeerRoute[];
  /** Per other node: how it is handled, and why when not routed. */
  peers: { node: string; state: PeerState; why: string[] }[];
}

export const overlaps = (a: Subnet, b: Subnet): boolean =>
  subnetContains(a, { family: b.family, value: b.network }) ||
  subnetContains(b, { family: a.family, value: a.network });

export function planRoutes(self: NodeFacts, others: NodeFacts[], connected: ConnectedRoute[]): RoutePlan {
  const plan: RoutePlan = { routes: [], peers: [] };

  for (const node of [...others].sort((a, b) => a.name.localeCompare(b.name))) {
    const why = [...node.problems];
    let state: PeerState = "routed";
    const worse = (s: PeerState) => {
      if (state === "routed") state = s;
    };
    if (node.podCidrs.length === 0) {
      plan.peers.push({ node: node.name, state: "no-pod-cidr", why: [...why, "no pod CIDR yet"] });
      continue;
    }
    for (const cidr of node.podCidrs) {
      const own = self.podCidrs.find((c) => overlaps(c.subnet, cidr.subnet));
      if (own) {
        why.push(`pod CIDR ${cidr.text} overlaps this node's ${own.text}`);
        worse("conflict");
        continue;
      }
      // Claimed by two other nodes: nobody's here until the API settles it.
      const shared = others.find((o) => o !== node && o.podCidrs.some((c) => overlaps(c.subnet, cidr.subnet)));
      if (shared) {
        why.push(`pod CIDR ${cidr.text} overlaps node ${shared.name}'s`);
        worse("conflict");
        continue;
      }
      const ip = node.internalIPs.find((a) => a.family === cidr.subnet.family);
      if (!ip) {
        why.push(`no InternalIP of ${cidr.text}'s family`);
        worse("no-address");
        continue;
      }
      const link = onLink(ip.text, connected);
      if (!link) {
        why.push(`InternalIP ${ip.text} is not on a link of this node (not routed via the default gateway)`);
        worse("unreachable");
        continue;
      }
      plan.routes.push({
        node: node.name,
        dst: cidr.text,
        family: cidr.subnet.family,
        gateway: ip.text,
        ifindex: link.ifindex,
      });
    }
    plan.peers.push({ node: node.name, state, why });
  }
  return plan;
}

/** The most specific connected route covering `address`. */
function onLink(address: string, connected: ConnectedRoute[]): ConnectedRoute | undefined {
  const addr = parseAddress(address);
  if (!addr) return undefined;
  return connected
    .filter((r) => r.subnet.prefixLength > 0 && subnetContains(r.subnet, addr))
    .sort((a, b) => b.subnet.prefixLength - a.subnet.prefixLength)[0];
}
