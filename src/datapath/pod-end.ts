/**
 * Configures the pod's end of a device pair, from the host namespace through a socket
 * opened in the pod netns: link up, each address as a host prefix (/32, /128), the
 * fixed gateways pinned to the host device's MAC, and default routes via them.
 * Shared by every datapath kind.
 */
import { AF_INET, familyOf, formatCidr, hostPrefix, isHostPrefix } from "../cni/address";
import { addAddress, listAddresses } from "../netlink/addrs";
import { type Link, setLinkUp } from "../netlink/links";
import { addPermanentNeighbor } from "../netlink/neighbors";
import { addRoute, addSourceRule, deleteSourceRule, listRoutes } from "../netlink/routes";
import type { RtnlSocket } from "../netlink/socket";
import { GATEWAY_V4, GATEWAY_V6 } from "./gateway";

/** The default routes a pod gets, one per address family it has. */
export function podDefaultRoutes(addresses: string[]): { dst: string; gw: string }[] {
  const families = new Set(addresses.map((a) => hostPrefix(a).family));
  const routes: { dst: string; gw: string }[] = [];
  if (families.has(AF_INET)) routes.push({ dst: "0.0.0.0/0", gw: GATEWAY_V4 });
  if (families.size > (families.has(AF_INET) ? 1 : 0)) routes.push({ dst: "::/0", gw: GATEWAY_V6 });
  return routes;
}

/**
 * `gatewayMac`: the host end's MAC, pinned as the gateways' neighbour entry on devices
 * that resolve neighbours; undefined for devices that do not (netkit L3, NOARP).
 */
export async function configurePodEnd(
  pod: RtnlSocket,
  podLink: Link,
  gatewayMac: string | undefined,
  addresses: string[],
): Promise<{ dst: string; gw: string }[]> {
  await setLinkUp(pod, podLink);
  for (const cidr of addresses) {
    const ip = hostPrefix(cidr);
    await addAddress(pod, podLink.index, ip.address, ip.prefixLength);
  }
  // The first interface of a family gets the pod's default route. A further one (e.g. a
  // runtime's "network connect") leaves that alone and gets a default route in a table of
  // its own, chosen by source address: replies from its addresses must leave through it,
  // or the fast path would rightly drop them as spoofed on the other interface.
  const mainDefaults = new Set((await listRoutes(pod)).map((r) => r.dst));
  const installed: { dst: string; gw: string }[] = [];
  for (const route of podDefaultRoutes(addresses)) {
    const family = familyOf(route.gw);
    if (gatewayMac) await addPermanentNeighbor(pod, podLink.index, route.gw, gatewayMac);
    const onlink = family === AF_INET; // no prefix on the device covers 169.254.1.1
    if (!mainDefaults.has(route.dst)) {
      await addRoute(pod, { family, dst: route.dst, gateway: route.gw, ifindex: podLink.index }, onlink);
      installed.push(route);
      continue;
    }
    const table = secondaryTable(podLink.index);
    await addRoute(pod, { family, dst: route.dst, gateway: route.gw, ifindex: podLink.index, table }, onlink);
    for (const cidr of addresses.filter((a) => hostPrefix(a).family === family)) {
      await addSourceRule(pod, hostPrefix(cidr).address, table);
    }
  }
  return installed;
}

/** The table (and rule priority) of a secondary interface: 10000 + its ifindex in the pod. */
const secondaryTable = (podIfindex: number) => 10_000 + podIfindex;

/**
 * Removes the source rules a secondary interface got (the device's own routes go with the
 * device, rules do not). Runs before the device is deleted, while its addresses are known.
 */
export async function removePodEndRules(pod: RtnlSocket, podLink: Link): Promise<void> {
  const addresses = (await listAddresses(pod, podLink.index)).filter(isHostPrefix);
  await removeSourceRules(pod, podLink.index, addresses.map(formatCidr));
}

/** Removes the source rules `addresses` (CIDRs) got on the pod's device `podIfindex`, those that exist. */
export async function removeSourceRules(pod: RtnlSocket, podIfindex: number, addresses: string[]): Promise<void> {
  for (const cidr of addresses) {
    await deleteSourceRule(pod, hostPrefix(cidr).address, secondaryTable(podIfindex));
  }
}
