/**
 * Which routes this node needs to another node's pods: each of its pod CIDRs via its
 * first InternalIP of the same family, when that address is on a link this node is on
 * (a connected route covers it). Nothing is routed through the default gateway: a node
 * whose address is not directly reachable is reported instead, and so is a pod CIDR that
 * overlaps this node's own (routing it would take this node's pods away) or another
 * node's (two nodes cannot both own it), or lies outside the cluster CIDRs (its pods'
 * traffic would leave the cluster unmasqueraded, with a source nobody routes back). Pure.
 */
import { type Family, parseAddress, type Subnet, subnetContains } from "../../cni/address";
import type { NodeFacts } from "../kube/node-facts";
import { CidrIndex } from "./cidr-index";

/** A connected route: a destination prefix on a device, without a gateway. */
export interface ConnectedRoute {
  subnet: Subnet;
  ifindex: number;
}

export interface PeerRoute {
  node: string;
  dst: string;
  family: Family;
  /** The node's InternalIP; none through the WireGuard device (wireguard/controller.ts). */
  gateway?: string;
  ifindex: number;
}

export type PeerState = "routed" | "unreachable" | "no-address" | "conflict" | "no-pod-cidr" | "outside-cluster";

export interface Peer {
  node: string;
  state: PeerState;
  why: string[];
}

export interface RoutePlan {
  routes: PeerRoute[];
  /** Per other node: how it is handled, and why when not routed. */
  peers: Peer[];
}

export const overlaps = (a: Subnet, b: Subnet): boolean =>
  subnetContains(a, { family: b.family, value: b.network }) ||
  subnetContains(b, { family: a.family, value: a.network });

/** What planning one node needs to know of the rest. */
export interface PlanContext {
  self: NodeFacts;
  /** Every node's pod CIDRs, by node name (this node's included). */
  cidrs: CidrIndex;
  connected: readonly ConnectedRoute[];
  /** The cluster's pod networks (--cluster-cidr). */
  cluster: readonly Subnet[];
}

/** The routes to `node`'s pods, and how it is handled. */
export function planPeer(node: NodeFacts, ctx: PlanContext): { routes: PeerRoute[]; peer: Peer } {
  const routes: PeerRoute[] = [];
  const why = [...node.problems];
  let state: PeerState = "routed";
  const worse = (s: PeerState) => {
    if (state === "routed") state = s;
  };
  if (node.podCidrs.length === 0) {
    return { routes, peer: { node: node.name, state: "no-pod-cidr", why: [...why, "no pod CIDR yet"] } };
  }
  for (const cidr of node.podCidrs) {
    const own = ctx.self.podCidrs.find((c) => overlaps(c.subnet, cidr.subnet));
    if (own) {
      why.push(`pod CIDR ${cidr.text} overlaps this node's ${own.text}`);
      worse("conflict");
      continue;
    }
    // Claimed by two other nodes: nobody's here until the API settles it.
    const shared = [...ctx.cidrs.overlapping(cidr.subnet)].filter((n) => n !== node.name && n !== ctx.self.name);
    if (shared.length > 0) {
      why.push(`pod CIDR ${cidr.text} overlaps node ${shared.sort()[0]}'s`);
      worse("conflict");
      continue;
    }
    if (!insideCluster(cidr.subnet, ctx.cluster)) {
      why.push(`pod CIDR ${cidr.text} lies outside the cluster CIDRs (--cluster-cidr)`);
      worse("outside-cluster");
      continue;
    }
    const ip = node.internalIPs.find((a) => a.family === cidr.subnet.family);
    if (!ip) {
      why.push(`no InternalIP of ${cidr.text}'s family`);
      worse("no-address");
      continue;
    }
    const link = onLink(ip.text, ctx.connected);
    if (!link) {
      why.push(`InternalIP ${ip.text} is not on a link of this node (not routed via the default gateway)`);
      worse("unreachable");
      continue;
    }
    routes.push({
      node: node.name,
      dst: cidr.text,
      family: cidr.subnet.family,
      gateway: ip.text,
      ifindex: link.ifindex,
    });
  }
  return { routes, peer: { node: node.name, state, why } };
}

/** Is `subnet` inside one of the cluster's pod networks? */
export const insideCluster = (subnet: Subnet, cluster: readonly Subnet[]): boolean =>
  cluster.some(
    (c) => c.prefixLength <= subnet.prefixLength && subnetContains(c, { family: subnet.family, value: subnet.network }),
  );

/** Every node's pod CIDRs, indexed by owner. */
export function indexCidrs(nodes: Iterable<NodeFacts>): CidrIndex {
  const index = new CidrIndex();
  for (const n of nodes) for (const c of n.podCidrs) index.add(c.subnet, n.name);
  return index;
}

/** The plan for every other node at once (the full reconcile). */
export function planRoutes(
  self: NodeFacts,
  others: NodeFacts[],
  connected: readonly ConnectedRoute[],
  cluster: readonly Subnet[],
): RoutePlan {
  const ctx: PlanContext = { self, cidrs: indexCidrs([self, ...others]), connected, cluster };
  const plan: RoutePlan = { routes: [], peers: [] };
  for (const node of [...others].sort((a, b) => a.name.localeCompare(b.name))) {
    const { routes, peer } = planPeer(node, ctx);
    plan.routes.push(...routes);
    plan.peers.push(peer);
  }
  return plan;
}

/** The most specific connected route covering `address`. */
function onLink(address: string, connected: readonly ConnectedRoute[]): ConnectedRoute | undefined {
  const addr = parseAddress(address);
  if (!addr) return undefined;
  let best: ConnectedRoute | undefined;
  for (const r of connected) {
    if (r.subnet.prefixLength === 0 || !subnetContains(r.subnet, addr)) continue;
    if (!best || r.subnet.prefixLength > best.subnet.prefixLength) best = r;
  }
  return best;
}
