/**
 * Which proxy neighbour entries the node needs so that pods of another plugin, sharing a
 * subnet with ours, reach our pods. A bridge plugin (the reference `bridge`) gives its
 * pods the whole subnet as on-link and the node its gateway address on the bridge; a pod
 * of ours in that subnet is then reached by ARP or neighbour discovery on the bridge,
 * where nobody answers for it. The node answers instead: a proxy entry for each of our
 * pod addresses on each device of another's whose connected route covers it.
 *
 * Pure: it takes the kernel's truth (routes, which devices are ours, the proxy entries)
 * and returns what to add and remove; coexist.ts reads and applies. Entries are ours by
 * their protocol number, so nothing else's is ever removed, and the plan is recomputed
 * whole each time, so no count can drift.
 */
import {
  AF_INET6,
  addressBits,
  type Family,
  parseAddress,
  parseSubnet,
  type Subnet,
  subnetContains,
} from "../cni/address";

/** A main-table route as listed: a connected one has no gateway. */
export interface RouteFact {
  family: Family;
  dst: string;
  gateway?: string | undefined;
  ifindex: number;
}

export interface ProxyFact {
  address: string;
  ifindex: number;
  protocol: number;
}

/**
 * NDA_PROTOCOL of our proxy entries (`ip neigh show proxy` prints it as a number). The
 * second marks IPv6 entries on a device whose proxy_ndp we switched on: the switch goes
 * back off with the last of them, and stays on when it was on before us.
 */
export const PROXY_PROTOCOL = 0xe9;
export const PROXY_PROTOCOL_NDP_SET = 0xea;
export const isOurProxy = (p: ProxyFact) => p.protocol === PROXY_PROTOCOL || p.protocol === PROXY_PROTOCOL_NDP_SET;

interface Connected {
  subnet: Subnet;
  ifindex: number;
  dst: string;
}

const prefixLength = (dst: string) => Number(dst.slice(dst.lastIndexOf("/") + 1));
const isHostRoute = (r: RouteFact) => !r.gateway && prefixLength(r.dst) === addressBits(r.family);

/** Connected routes (no gateway, not a host prefix, not a default) of devices not ours. */
export function connectedRoutes(routes: RouteFact[], ourDevices: ReadonlySet<number>): Connected[] {
  const out: Connected[] = [];
  for (const r of routes) {
    if (r.gateway || r.ifindex === 0 || ourDevices.has(r.ifindex)) continue;
    const length = prefixLength(r.dst);
    if (length === 0 || length === addressBits(r.family)) continue;
    // Every device has fe80::/64, and no pod address is link-local.
    if (r.dst.toLowerCase().startsWith("fe80:")) continue;
    const parsed = parseSubnet(r.dst);
    if (parsed.ok) out.push({ subnet: parsed.subnet, ifindex: r.ifindex, dst: r.dst });
  }
  return out;
}

/** The devices (and their routes) on which `address` looks on-link to whoever else is there. */
export function coveringRoutes(address: string, connected: Connected[]): { ifindex: number; dst: string }[] {
  const addr = parseAddress(address);
  if (!addr) return [];
  return connected.filter((c) => subnetContains(c.subnet, addr)).map(({ ifindex, dst }) => ({ ifindex, dst }));
}

/** Our pods' addresses: the host routes (/32, /128) through our devices. */
export function podAddresses(routes: RouteFact[], ourDevices: ReadonlySet<number>): string[] {
  return routes
    .filter((r) => isHostRoute(r) && ourDevices.has(r.ifindex))
    .map((r) => r.dst.slice(0, r.dst.lastIndexOf("/")));
}

/**
 * Whether any host route lies inside a connected route of another device, whoever owns
 * either: false means no pod of ours can need an entry, without asking which devices
 * are ours.
 */
export function mayNeedProxies(routes: RouteFact[]): boolean {
  const connected = connectedRoutes(routes, new Set());
  if (connected.length === 0) return false;
  return routes.some(
    (r) =>
      isHostRoute(r) &&
      coveringRoutes(r.dst.slice(0, r.dst.lastIndexOf("/")), connected).some((c) => c.ifindex !== r.ifindex),
  );
}

interface ProxyEntry {
  address: string;
  ifindex: number;
  /** The connected route that makes it needed (for the log). */
  because?: string;
}

interface ProxyPlan {
  add: ProxyEntry[];
  remove: ProxyFact[];
}

const key = (e: { address: string; ifindex: number }) => `${e.ifindex} ${e.address}`;

/**
 * What to add and remove so that exactly the needed entries of ours exist. `without`:
 * pod addresses to leave out although their routes still exist (a failing ADD's own).
 * An address someone else already proxies on a device is left to them.
 */
export function planProxies(facts: {
  routes: RouteFact[];
  ourDevices: ReadonlySet<number>;
  proxies: ProxyFact[];
  without?: ReadonlySet<string>;
}): ProxyPlan {
  const connected = connectedRoutes(facts.routes, facts.ourDevices);
  const wanted = new Map<string, ProxyEntry>();
  for (const address of podAddresses(facts.routes, facts.ourDevices)) {
    if (facts.without?.has(address)) continue;
    for (const { ifindex, dst } of coveringRoutes(address, connected)) {
      wanted.set(key({ address, ifindex }), { address, ifindex, because: dst });
    }
  }
  const existing = new Map(facts.proxies.map((p) => [key(p), p]));
  const add = [...wanted.values()].filter((e) => !existing.has(key(e)));
  const remove = facts.proxies.filter((p) => isOurProxy(p) && !wanted.has(key(p)));
  return { add, remove };
}

/** Per device: what happens to its proxy_ndp switch when the plan is applied. */
interface NdpChange {
  ifindex: number;
  /** The protocol new IPv6 entries get; "ask" when it depends on the switch now. */
  tag: number | "ask";
  /** True when the plan removes the last IPv6 entry of ours and we had switched it on. */
  restore: boolean;
}

export function ndpChanges(plan: ProxyPlan, proxies: ProxyFact[]): NdpChange[] {
  const v6 = (p: { address: string }) => parseAddress(p.address)?.family === AF_INET6;
  const devices = new Set([...plan.add, ...plan.remove].filter(v6).map((p) => p.ifindex));
  const removed = new Set(plan.remove.map(key));
  const changes: NdpChange[] = [];
  for (const ifindex of devices) {
    const ours = proxies.filter((p) => p.ifindex === ifindex && v6(p) && isOurProxy(p));
    const weSet = ours.some((p) => p.protocol === PROXY_PROTOCOL_NDP_SET);
    const staying = ours.filter((p) => !removed.has(key(p)));
    const adding = plan.add.some((p) => p.ifindex === ifindex && v6(p));
    const tag = weSet ? PROXY_PROTOCOL_NDP_SET : ours.length > 0 ? PROXY_PROTOCOL : "ask";
    changes.push({ ifindex, tag, restore: weSet && staying.length === 0 && !adding });
  }
  return changes;
}
