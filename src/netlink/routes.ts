/**
 * Routes (struct rtmsg + RTA_* attributes): add, list, delete, in the main table unless
 * a route names another; and source rules that send a source address to a table.
 */
import { AF_INET, AF_INET6, addressBits, type Family, familyOf, ipBytes, ipString, parseCidr } from "../cni/address";
import { attr, attrU32, parseAttrs, readU32 } from "./attrs";
import { NetlinkError, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, type RtnlSocket } from "./socket";

const RTM_NEWROUTE = 24;
const RTM_DELROUTE = 25;
const RTM_GETROUTE = 26;
const RTA_DST = 1;
const RTA_OIF = 4;
const RTA_GATEWAY = 5;
const RTA_TABLE = 15;
const RT_TABLE_MAIN = 254;
const RTPROT_STATIC = 4;
const RTN_UNICAST = 1;
const RT_SCOPE_UNIVERSE = 0;
const RT_SCOPE_LINK = 253;
const RTNH_F_ONLINK = 4;
const ESRCH = 3;

export interface Route {
  family: Family;
  /** Destination prefix, e.g. "0.0.0.0/0" or "10.1.0.5/32". */
  dst: string;
  gateway?: string;
  ifindex: number;
  /** Routing table; the main table when absent. */
  table?: number;
  /** Who made it (rtm_protocol): static when absent; a daemon marks its own with a number of its own. */
  protocol?: number;
}

function rtmsg(family: number, dstLen: number, scope: number, flags: number, protocol = RTPROT_STATIC): Buffer {
  const b = Buffer.alloc(12);
  b.writeUInt8(family, 0);
  b.writeUInt8(dstLen, 1);
  b.writeUInt8(RT_TABLE_MAIN, 4);
  b.writeUInt8(protocol, 5);
  b.writeUInt8(scope, 6);
  b.writeUInt8(RTN_UNICAST, 7);
  b.writeUInt32LE(flags, 8);
  return b;
}

function routeMessage(route: Route, flags = 0): Buffer {
  const { family, address: addr, prefixLength: dstLen } = parseCidr(route.dst);
  // A route without a gateway is "on this link"; one with a gateway is onlink when the
  // gateway is a fixed IPv4 link-local address that no prefix on the device covers.
  const scope = route.gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
  const attrs = [attrU32(RTA_TABLE, route.table ?? RT_TABLE_MAIN), attrU32(RTA_OIF, route.ifindex)];
  if (dstLen > 0) attrs.push(attr(RTA_DST, ipBytes(addr)));
  if (route.gateway) attrs.push(attr(RTA_GATEWAY, ipBytes(route.gateway)));
  return Buffer.concat([rtmsg(family, dstLen, scope, flags, route.protocol), ...attrs]);
}

export async function addRoute(sock: RtnlSocket, route: Route, onlink = false): Promise<void> {
  await sock.request(
    `add route ${route.dst}${route.gateway ? ` via ${route.gateway}` : ""}`,
    RTM_NEWROUTE,
    NLM_F_CREATE | NLM_F_EXCL,
    routeMessage(route, onlink ? RTNH_F_ONLINK : 0),
  );
}

/**
 * Adds a route, or replaces the one with the same destination (and table): the caller
 * has checked that the route it replaces is its own.
 */
export async function replaceRoute(sock: RtnlSocket, route: Route): Promise<void> {
  await sock.request(
    `replace route ${route.dst}${route.gateway ? ` via ${route.gateway}` : ""}`,
    RTM_NEWROUTE,
    NLM_F_CREATE | NLM_F_REPLACE,
    routeMessage(route),
  );
}

/** Deletes a route; returns false if it was not there. */
export async function deleteRoute(sock: RtnlSocket, route: Route): Promise<boolean> {
  try {
    await sock.request(`delete route ${route.dst}`, RTM_DELROUTE, 0, routeMessage(route));
    return true;
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ESRCH) return false;
    throw e;
  }
}

/** Routes of the main table, both families. */
export async function listRoutes(sock: RtnlSocket): Promise<Route[]> {
  const out: Route[] = [];
  for (const family of [AF_INET, AF_INET6] as const) {
    const replies = await sock.dump("list routes", RTM_GETROUTE, rtmsg(family, 0, 0, 0));
    for (const r of replies) {
      if (r.type !== RTM_NEWROUTE) continue;
      const attrs = parseAttrs(r.data, 12);
      const table = readU32(attrs.get(RTA_TABLE)) ?? r.data.readUInt8(4);
      if (table !== RT_TABLE_MAIN) continue;
      const dstLen = r.data.readUInt8(1);
      const dst = attrs.get(RTA_DST);
      const gw = attrs.get(RTA_GATEWAY);
      out.push({
        family,
        dst: `${dst ? ipString(dst) : family === AF_INET ? "0.0.0.0" : "::"}/${dstLen}`,
        gateway: gw ? ipString(gw) : undefined,
        ifindex: readU32(attrs.get(RTA_OIF)) ?? 0,
        protocol: r.data.readUInt8(5),
      });
    }
  }
  return out;
}

const RTM_NEWRULE = 32;
const RTM_DELRULE = 33;
const ENOENT = 2;
const FRA_SRC = 2;
const FRA_PRIORITY = 6;
const FRA_TABLE = 15;
const FR_ACT_TO_TBL = 1;

function sourceRule(address: string, table: number): Buffer {
  const family = familyOf(address);
  const hdr = Buffer.alloc(12); // struct fib_rule_hdr
  hdr.writeUInt8(family, 0);
  hdr.writeUInt8(addressBits(family), 2); // src_len
  hdr.writeUInt8(FR_ACT_TO_TBL, 7);
  // The table doubles as the priority: unique per interface, and easy to find again.
  return Buffer.concat([hdr, attr(FRA_SRC, ipBytes(address)), attrU32(FRA_TABLE, table), attrU32(FRA_PRIORITY, table)]);
}

/** `ip rule add from <address> lookup <table> priority <table>`. */
export async function addSourceRule(sock: RtnlSocket, address: string, table: number): Promise<void> {
  await sock.request(
    `add rule from ${address} lookup ${table}`,
    RTM_NEWRULE,
    NLM_F_CREATE | NLM_F_EXCL,
    sourceRule(address, table),
  );
}

/** Removes what `addSourceRule` added; false when it was not there. */
export async function deleteSourceRule(sock: RtnlSocket, address: string, table: number): Promise<boolean> {
  try {
    await sock.request(`delete rule from ${address} lookup ${table}`, RTM_DELRULE, 0, sourceRule(address, table));
    return true;
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ENOENT) return false;
    throw e;
  }
}
