/**
 * The node's routes as the route controller sees them: the agent's own, marked by their
 * route protocol (AGENT_ROUTE_PROTOCOL, `proto 235` in `ip route`), and the rest only as
 * destinations to keep out of. A route of any other protocol is never replaced or
 * deleted: a new destination is created with NLM_F_EXCL, so a route someone else made
 * meanwhile makes the create fail instead of being replaced, and deletes carry our
 * protocol, which the kernel matches.
 */
import { parseSubnet } from "../../cni/address";
import { addRoute, deleteRoute, listRoutes, type Route, replaceRoute } from "../../netlink/routes";
import { NetlinkError, type RtnlSocket } from "../../netlink/socket";
import type { ConnectedRoute } from "./plan";

/** Ours: next to the plugin's proxy neighbour entries (233, 234). */
export const AGENT_ROUTE_PROTOCOL = 235;
const EEXIST = 17;

export interface RouteTableView {
  /** The agent's routes in the main table. */
  ours: Route[];
  /** Destinations of everyone else's routes. */
  theirs: Set<string>;
  /** The connected routes (no gateway): where a next hop can be. */
  connected: ConnectedRoute[];
}

/** What the route controller needs of the kernel (tests give it a fake). */
export interface RouteTable {
  read(): Promise<RouteTableView>;
  /** Adds a route whose destination has none; false when a route has it already. */
  create(route: Route): Promise<boolean>;
  /** Replaces a route of ours (the caller knows it is). */
  replace(route: Route): Promise<void>;
  /** Deletes a route of ours; false when there was none. */
  remove(route: Route): Promise<boolean>;
}

export class KernelRouteTable implements RouteTable {
  constructor(private readonly host: RtnlSocket) {}

  async read(): Promise<RouteTableView> {
    const view: RouteTableView = { ours: [], theirs: new Set(), connected: [] };
    for (const r of await listRoutes(this.host)) {
      if (r.protocol === AGENT_ROUTE_PROTOCOL) {
        view.ours.push(r);
        continue;
      }
      view.theirs.add(r.dst);
      // The kernel's prefix routes for the node's addresses, and any an admin put on a link.
      if (r.gateway) continue;
      const parsed = parseSubnet(r.dst);
      if (parsed.ok) view.connected.push({ subnet: parsed.subnet, ifindex: r.ifindex });
    }
    return view;
  }

  async create(route: Route): Promise<boolean> {
    try {
      await addRoute(this.host, { ...route, protocol: AGENT_ROUTE_PROTOCOL });
      return true;
    } catch (e) {
      if (e instanceof NetlinkError && e.errno === EEXIST) return false;
      throw e;
    }
  }

  replace(route: Route): Promise<void> {
    return replaceRoute(this.host, { ...route, protocol: AGENT_ROUTE_PROTOCOL });
  }

  remove(route: Route): Promise<boolean> {
    return deleteRoute(this.host, { ...route, protocol: AGENT_ROUTE_PROTOCOL });
  }
}
