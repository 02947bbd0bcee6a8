/**
 * The route controller: this node's routes to every other node's pod CIDRs
 * (plan.ts says which, table.ts makes them), kept per node.
 *
 * - A Node event syncs that node's routes only, and the few nodes whose pod CIDRs
 *   overlap its old or new ones (their verdict may change with it); a change of this
 *   node's own CIDRs touches every route, and syncs them all.
 * - The full sync ("*", after the first list and at every resync) reads the kernel's
 *   table and plans every node: what the per-node syncs keep (which routes of ours
 *   belong to which node, everyone else's destinations, the connected routes) comes
 *   from it, and so does the repair of a route someone deleted or a node deleted while
 *   no agent ran. Until it has run once, per-node syncs wait for it.
 * - A new destination is created only where no route has it (NLM_F_EXCL): someone
 *   else's route there is reported, never replaced.
 */

import { AF_INET, parseSubnet, type Subnet } from "../../cni/address";
import type { Route } from "../../netlink/routes";
import { getOrMake } from "../collections";
import type { Informer } from "../kube/informer";
import type { NodeFacts } from "../kube/node-facts";
import type { WorkQueue } from "../kube/workqueue";
import { agentLog } from "../log";
import type { CidrIndex } from "./cidr-index";
import {
  type ConnectedRoute,
  indexCidrs,
  type Peer,
  type PeerRoute,
  type PeerState,
  type PlanContext,
  planPeer,
} from "./plan";
import type { RouteTable } from "./table";

export const ROUTES = "routes";
export const ALL = "*";

/**
 * How routes leave this node when something other than the uplink carries them (the
 * WireGuard device, with --encryption): each node's routes as planned, turned, and
 * routes of no node (the cluster CIDRs, so nothing unplanned leaves in clear).
 */
export interface RouteSteering {
  steer(node: NodeFacts, routes: PeerRoute[]): PeerRoute[];
  readonly extra: PeerRoute[];
}

/** The owner of the steering's own routes: no Node can be named "". */
const NO_NODE = "";

export interface RoutesObserver {
  peers(peers: Iterable<Peer>, routes: { v4: number; v6: number }): void;
  /** A full sync ended: every node's routes are as planned. */
  fullSync(): void;
}

const describe = (r: { dst: string; gateway?: string; ifindex: number }) =>
  r.gateway ? `${r.dst} via ${r.gateway}` : `${r.dst} dev #${r.ifindex}`;
const sameRoute = (a: PeerRoute, b: Route) => a.gateway === b.gateway && a.ifindex === b.ifindex;

export class RoutesController {
  /** Routes of ours in the kernel, by the node they lead to, by destination. */
  private readonly made = new Map<string, Map<string, Route>>();
  private readonly peers = new Map<string, Peer>();
  /** The problems last logged per node, so each is told once per change. */
  private readonly told = new Map<string, string>();
  private theirs = new Set<string>();
  private connected: ConnectedRoute[] = [];
  private cidrs: CidrIndex;
  private readonly cluster: Subnet[];
  private fullSyncDone = false;
  private byFamily = { v4: 0, v6: 0 };

  constructor(
    private readonly queue: WorkQueue,
    private readonly nodes: Informer<NodeFacts>,
    private readonly table: RouteTable,
    private readonly self: string,
    clusterCidrs: readonly string[],
    private readonly observer: RoutesObserver,
    private readonly steering?: RouteSteering,
  ) {
    this.cluster = clusterCidrs.flatMap((c) => {
      const s = parseSubnet(c);
      return s.ok ? [s.subnet] : [];
    });
    this.cidrs = indexCidrs([]);
    queue.register(ROUTES, (name) => (name === ALL ? this.syncAll() : this.syncNode(name)));
    nodes.onSynced(() => queue.add(ROUTES, ALL));
    nodes.onChange((name, before, after) => this.changed(name, before, after));
  }

  /** The full sync was done once with every node known: the routes are what they should be. */
  get synced(): boolean {
    return this.fullSyncDone;
  }

  /** The periodic safety net. */
  resync(): void {
    if (this.nodes.synced) this.queue.add(ROUTES, ALL);
  }

  get routeCount(): number {
    return this.byFamily.v4 + this.byFamily.v6;
  }

  get status(): { routes: number; peers: Peer[] } {
    return {
      routes: this.routeCount,
      peers: [...this.peers.values()].sort((a, b) => a.node.localeCompare(b.node)),
    };
  }

  private changed(name: string, before: NodeFacts | undefined, after: NodeFacts | undefined): void {
    for (const c of before?.podCidrs ?? []) this.cidrs.remove(c.subnet, name);
    for (const c of after?.podCidrs ?? []) this.cidrs.add(c.subnet, name);
    if (name === this.self) {
      this.queue.add(ROUTES, ALL);
      return;
    }
    this.queue.add(ROUTES, name);
    // Nodes that shared a range with its old or new CIDRs may now be routable, or not.
    for (const c of [...(before?.podCidrs ?? []), ...(after?.podCidrs ?? [])]) {
      for (const other of this.cidrs.overlapping(c.subnet)) if (other !== name) this.queue.add(ROUTES, other);
    }
  }

  private context(): PlanContext | undefined {
    const self = this.nodes.get(this.self);
    if (!self || self.podCidrs.length === 0) return undefined; // the conflist controller says why
    return { self, cidrs: this.cidrs, connected: this.connected, cluster: this.cluster };
  }

  private async syncNode(name: string): Promise<void> {
    if (!this.fullSyncDone || name === this.self) return;
    const ctx = this.context();
    if (!ctx) return;
    const node = this.nodes.get(name);
    if (!node) {
      await this.apply(name, []);
      this.peers.delete(name);
      this.told.delete(name);
    } else {
      this.tell(node);
      const { routes, peer } = this.plan(node, ctx);
      const blocked = await this.apply(name, routes);
      this.record(peer, blocked);
    }
    this.observer.peers(this.peers.values(), this.byFamily);
  }

  private async syncAll(): Promise<void> {
    const view = await this.table.read();
    this.theirs = view.theirs;
    this.connected = view.connected;
    this.cidrs = indexCidrs(this.nodes.values());
    const ctx = this.context();
    if (!ctx) return;
    // Which node each route of ours leads to, as planned now; the rest are stale.
    const planned = new Map<string, { routes: PeerRoute[]; peer: Peer }>();
    const nodeOfDst = new Map<string, string>();
    for (const node of this.nodes.values()) {
      this.tell(node);
      if (node.name === this.self) continue;
      const plan = this.plan(node, ctx);
      planned.set(node.name, plan);
      for (const r of plan.routes) nodeOfDst.set(r.dst, node.name);
    }
    const extra = this.steering?.extra ?? [];
    for (const r of extra) nodeOfDst.set(r.dst, NO_NODE);
    this.made.clear();
    this.byFamily = { v4: 0, v6: 0 };
    for (const r of view.ours) {
      const owner = nodeOfDst.get(r.dst);
      if (owner === undefined) {
        await this.table.remove(r);
        agentLog.info(`route deleted: ${describe(r)}`);
        continue;
      }
      this.remember(owner, r);
    }
    this.peers.clear();
    for (const dst of await this.apply(NO_NODE, extra)) {
      agentLog.warn(`route to ${dst} not made: a route not made by the agent has that destination`);
    }
    for (const [name, plan] of planned) {
      const blocked = await this.apply(name, plan.routes);
      this.record(plan.peer, blocked);
    }
    this.fullSyncDone = true;
    this.observer.peers(this.peers.values(), this.byFamily);
    this.observer.fullSync();
  }

  private plan(node: NodeFacts, ctx: PlanContext): { routes: PeerRoute[]; peer: Peer } {
    const plan = planPeer(node, ctx);
    return this.steering ? { ...plan, routes: this.steering.steer(node, plan.routes) } : plan;
  }

  /** Makes node `name`'s routes of ours exactly `wanted`; returns the destinations taken by others. */
  private async apply(name: string, wanted: PeerRoute[]): Promise<string[]> {
    const held = this.made.get(name) ?? new Map<string, Route>();
    const blocked: string[] = [];
    const keep = new Set<string>();
    for (const p of wanted) {
      const route: Route = { family: p.family, dst: p.dst, gateway: p.gateway, ifindex: p.ifindex };
      const current = held.get(p.dst);
      if (current) {
        keep.add(p.dst);
        if (sameRoute(p, current)) continue;
        await this.table.replace(route);
        this.remember(name, route, current);
        agentLog.info(`route replaced: ${describe(route)}`);
        continue;
      }
      if (this.theirs.has(p.dst) || !(await this.table.create(route))) {
        this.theirs.add(p.dst);
        blocked.push(p.dst);
        continue;
      }
      keep.add(p.dst);
      this.remember(name, route);
      agentLog.info(`route added: ${describe(route)}`);
    }
    for (const [dst, r] of held) {
      if (keep.has(dst)) continue;
      await this.table.remove(r);
      this.forget(name, r);
      agentLog.info(`route deleted: ${describe(r)}`);
    }
    return blocked;
  }

  private remember(node: string, route: Route, replacing?: Route): void {
    if (!replacing) this.count(route, 1);
    getOrMake(this.made, node, () => new Map()).set(route.dst, route);
  }

  private forget(node: string, route: Route): void {
    const held = this.made.get(node);
    if (!held?.delete(route.dst)) return;
    this.count(route, -1);
    if (held.size === 0) this.made.delete(node);
  }

  private count(route: Route, by: number): void {
    if (route.family === AF_INET) this.byFamily.v4 += by;
    else this.byFamily.v6 += by;
  }

  /** Logs what a node's object has wrong with it (once per change). */
  private tell(node: NodeFacts): void {
    const text = node.problems.join("\n");
    if (this.told.get(node.name) === text) return;
    this.told.set(node.name, text);
    for (const p of node.problems) agentLog.warn(`skipped: node ${node.name}: ${p}`);
  }

  private record(peer: Peer, blocked: string[]): void {
    let state: PeerState = peer.state;
    const why = [...peer.why];
    for (const dst of blocked) {
      why.push(`route to ${dst} not made: a route not made by the agent has that destination`);
      state = "conflict";
    }
    const next: Peer = { node: peer.node, state, why };
    const before = this.peers.get(peer.node);
    this.peers.set(peer.node, next);
    if (state !== "routed" && JSON.stringify(before) !== JSON.stringify(next)) {
      agentLog.warn(`node ${peer.node} not routed (${state}): ${why.join("; ")}`);
    }
  }
}
