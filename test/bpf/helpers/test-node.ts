/**
 * The node namespace the test-run suites share:
 *
 *   pod1  nkbh1 (host side) <-> nkbp1
 *   pod2  nkbh2 (host side) <-> nkbp2
 *   uplink nkbup <-> nkbwire            192.168.50.1/24  fd00:50::1/64
 *     10.244.2.0/24, fd00:244:2::/64 via .2 / ::2   (neighbour entry: FIB SUCCESS)
 *     10.244.3.0/24, fd00:244:3::/64 via .3 / ::3   (no neighbour: FIB NO_NEIGH)
 *
 * Forwarding on, no default route. POD1/POD2 are the addresses the suites give the pods.
 */
import { TestNetns } from "./test-netns";

export const NODE = { v4: "192.168.50.1", v6: "fd00:50::1" };
/** Local pods, and a remote pod in the routed range with a neighbour entry. */
export const POD1 = { v4: "10.244.1.10", v6: "fd00:244:1::10" };
export const POD2 = { v4: "10.244.1.11", v6: "fd00:244:1::11" };
export const REMOTE = { v4: "10.244.2.20", v6: "fd00:244:2::20" };

/** tc verdicts: TC_ACT_UNSPEC (the stack decides), TC_ACT_SHOT, TC_ACT_REDIRECT. */
export const NEXT = -1;
export const DROP = 2;
export const REDIRECT = 7;
export const GATEWAY_MAC = "02:00:00:00:50:02";

export interface TestNode {
  ns: TestNetns;
  h1: number;
  h2: number;
  up: { ifindex: number; mac: string };
}

export function makeTestNode(label: string): TestNode {
  const ns = TestNetns.create(label);
  ns.sysctl("net.ipv4.ip_forward", "1");
  ns.sysctl("net.ipv6.conf.all.forwarding", "1");
  ns.ip("link", "add", "nkbh1", "type", "veth", "peer", "name", "nkbp1");
  ns.ip("link", "add", "nkbh2", "type", "veth", "peer", "name", "nkbp2");
  ns.ip("link", "add", "nkbup", "type", "veth", "peer", "name", "nkbwire");
  for (const dev of ["nkbh1", "nkbp1", "nkbh2", "nkbp2", "nkbup", "nkbwire"]) ns.ip("link", "set", dev, "up");
  ns.ip("addr", "add", `${NODE.v4}/24`, "dev", "nkbup");
  ns.ip("addr", "add", `${NODE.v6}/64`, "dev", "nkbup", "nodad");
  ns.ip("neigh", "replace", "192.168.50.2", "lladdr", GATEWAY_MAC, "dev", "nkbup", "nud", "permanent");
  ns.ip("-6", "neigh", "replace", "fd00:50::2", "lladdr", GATEWAY_MAC, "dev", "nkbup", "nud", "permanent");
  ns.ip("route", "add", "10.244.2.0/24", "via", "192.168.50.2");
  ns.ip("route", "add", "10.244.3.0/24", "via", "192.168.50.3");
  ns.ip("-6", "route", "add", "fd00:244:2::/64", "via", "fd00:50::2");
  ns.ip("-6", "route", "add", "fd00:244:3::/64", "via", "fd00:50::3");
  return { ns, h1: ns.link("nkbh1").ifindex, h2: ns.link("nkbh2").ifindex, up: ns.link("nkbup") };
}
