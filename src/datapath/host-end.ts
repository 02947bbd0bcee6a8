/**
 * Configures the host's end of a device pair: ownership alias and link up in one
 * message, a host route (/32, /128) to each pod address through the device, and the
 * forwarding switches the node needs to route pod traffic. Shared by every datapath kind.
 */
import { AF_INET, AF_INET6, formatCidr, hostPrefix } from "../cni/address";
import { type Link, setLinkUp } from "../netlink/links";
import { addRoute } from "../netlink/routes";
import type { RtnlSocket } from "../netlink/socket";
import { ensureSysctl } from "./sysctl";

export async function configureHostEnd(host: RtnlSocket, hostLink: Link, alias: string, addresses: string[]) {
  // Duplicate address detection would hold the device's link-local address (the source
  // of its neighbour solicitations) tentative for a second or more, leaving the pod
  // unreachable over IPv6 from the host until then. Nothing else uses this link.
  if (addresses.some((a) => hostPrefix(a).family === AF_INET6)) {
    ensureSysctl(`net/ipv6/conf/${hostLink.name}/accept_dad`, "0");
  }
  await setLinkUp(host, hostLink, alias);
  for (const cidr of addresses) {
    const ip = hostPrefix(cidr);
    await addRoute(host, { family: ip.family, dst: formatCidr(ip), ifindex: hostLink.index });
  }
}

/** Node-wide: the node must forward between pods and its uplinks. */
export function enableForwarding(addresses: string[]): void {
  const families = new Set(addresses.map((a) => hostPrefix(a).family));
  if (families.has(AF_INET)) ensureSysctl("net/ipv4/ip_forward", "1");
  if (families.has(AF_INET6)) ensureSysctl("net/ipv6/conf/all/forwarding", "1");
}
