/**
 * This node's routes to the other nodes' pod CIDRs, marked as the agent's by their route
 * protocol (AGENT_ROUTE_PROTOCOL, `proto 235` in `ip route`): made, replaced when a node's
 * address or CIDR changes, deleted when its node goes or no longer qualifies. A route of
 * any other protocol is never replaced or deleted; one in the way of ours is reported.
 * Reconciling compares the kernel's table with the plan each time, so a restarted agent
 * removes the routes of nodes deleted while it was down.
 */
import { parseSubnet } from "../cni/address";
import { deleteRoute, listRoutes, type Route, replaceRoute } from "../netlink/routes";
import type { RtnlSocket } from "../netlink/socket";
import type { ConnectedRoute, PeerRoute } from "./route-plan";

/** Ours: next to the plugin's proxy neighbour entries (233, 234). */
export const AGENT_ROUTE_PROTOCOL = 235;

export interface RouteSync {
  added: string[];
  replaced: string[];
  deleted: string[];
  /** Planned routes left out because a route of someone else's has the destination. */
  blocked: { node: string; dst: string }[];
  /** Our routes in the table after the sync. */
  ours: number;
}

const describe = (r: { dst: string; gateway?: string }) => `${r.dst} via ${r.gateway ?? "-"}`;

/** The connected routes (no gateway) of the main table: where a next hop can be. */
export async function connectedRoutes(host: RtnlSocket): Promise<ConnectedRoute[]> {
  const out: ConnectedRoute[] = [];
  for (const r of await listRoutes(host)) {
    // The kernel's prefix routes for the node's addresses, and any an admin put on a link.
    if (r.gateway || r.protocol === AGENT_ROUTE_PROTOCOL) continue;
    const parsed = parseSubnet(r.dst);
    if (parsed.ok) out.push({ subnet: parsed.subnet, ifindex: r.ifindex });
  }
  return out;
}

export async function syncRoutes(host: RtnlSocket, planned: PeerRoute[]): Promise<RouteSync> {
  const table = await listRoutes(host);
  const ours = new Map(table.filter((r) => r.protocol === AGENT_ROUTE_PROTOCOL).map((r) => [r.dst, r]));
  const theirs = new Set(table.filter((r) => r.protocol !== AGENT_ROUTE_PROTOCOL).map((r) => r.dst));
  const sync: RouteSync = { added: [], replaced: [], deleted: [], blocked: [], ours: 0 };
  const wanted = new Set<string>();
  for (const p of planned) {
    if (theirs.has(p.dst)) {
      sync.blocked.push({ node: p.node, dst: p.dst });
      continue;
    }
    wanted.add(p.dst);
    const route: Route = {
      family: p.family,
      dst: p.dst,
      gateway: p.gateway,
      ifindex: p.ifindex,
      protocol: AGENT_ROUTE_PROTOCOL,
    };
    const current = ours.get(p.dst);
    if (current && current.gateway === p.gateway && current.ifindex === p.ifindex) continue;
    await replaceRoute(host, route);
    (current ? sync.replaced : sync.added).push(describe(route));
  }
  for (const [dst, r] of ours) {
    if (wanted.has(dst)) continue;
    await deleteRoute(host, r); // its protocol makes the kernel delete only ours
    sync.deleted.push(describe(r));
  }
  sync.ours = wanted.size;
  return sync;
}
