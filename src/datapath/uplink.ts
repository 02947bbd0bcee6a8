/**
 * The node's uplink: the device whose ingress hands wire traffic to local pods, and whose
 * MTU and GSO/GRO limits pods inherit. Named by the config (`hostInterface`), else the
 * device of the default route (IPv4 first).
 */
import { CniError, ErrorCode } from "../cni/errors";
import { getLinkByIndex, getLinkByName, type Link, listLinks } from "../netlink/links";
import { listRoutes } from "../netlink/routes";
import type { RtnlSocket } from "../netlink/socket";

/** The node's uplink as the verbs use it: resolveUplink's answer. */
export interface Uplink {
  name: string;
  index: number;
  mtu?: number;
  gsoMaxSize?: number;
  groMaxSize?: number;
  /** Transmit queues: pacing puts an fq on each under mq when there are several. */
  txQueues?: number;
  /** The node's WireGuard device, when the agent made one (uplink.ts). */
  wireguard?: { name: string; index: number; ready: boolean };
}

/** MTU for pods when neither the config nor an uplink says. */
export const FALLBACK_MTU = 1500;

/**
 * The WireGuard device `netkit-cni agent --encryption=wireguard` makes: traffic to other
 * nodes' pods leaves through it, and what it decrypts enters by nkc_wg_in, attached next
 * to the uplink's program by the ADD that attaches that.
 */
export const WIREGUARD_DEVICE = "netkit-wg0";
/**
 * The device's alias once the agent has given it its key and routed the cluster CIDRs
 * through it: before that a pod's traffic to another node could leave in clear.
 */
export const WIREGUARD_READY_ALIAS = "netkit-cni: encrypting";

/**
 * A network that encrypts (the agent's conflist says so) gets no pod before the device is
 * ready: after a reboot the conflist is there long before the agent, and a pod's first
 * packets to another node would follow the default route in clear.
 */
export function requireEncryption(encryption: "none" | "wireguard", uplink: Uplink | undefined): void {
  if (encryption === "wireguard" && !uplink?.wireguard?.ready) {
    throw new CniError(
      ErrorCode.TryAgainLater,
      `the network encrypts with WireGuard and ${WIREGUARD_DEVICE} is not ready yet (netkit-cni agent makes it); try again later`,
    );
  }
}

export async function resolveUplink(host: RtnlSocket, configured: string | undefined): Promise<Uplink | undefined> {
  if (configured) {
    const link = await getLinkByName(host, configured);
    if (!link) {
      throw new CniError(ErrorCode.InvalidNetworkConfig, `hostInterface "${configured}" does not exist on this node`);
    }
    return withWireguard(host, uplinkOf(link));
  }
  const routes = await listRoutes(host);
  const dflt =
    routes.find((r) => r.dst === "0.0.0.0/0" && r.ifindex) ?? routes.find((r) => r.dst === "::/0" && r.ifindex);
  if (!dflt) return undefined;
  const link = await getLinkByIndex(host, dflt.ifindex);
  return link ? withWireguard(host, uplinkOf(link)) : undefined;
}

async function withWireguard(host: RtnlSocket, uplink: Uplink): Promise<Uplink> {
  const wg = await getLinkByName(host, WIREGUARD_DEVICE);
  if (wg?.kind !== "wireguard") return uplink;
  return { ...uplink, wireguard: { name: wg.name, index: wg.index, ready: wg.alias === WIREGUARD_READY_ALIAS } };
}

const uplinkOf = (link: Link): Uplink => ({
  name: link.name,
  index: link.index,
  mtu: link.mtu,
  gsoMaxSize: link.gsoMaxSize,
  groMaxSize: link.groMaxSize,
  txQueues: link.txQueues,
});

/** Every ifindex in the namespace: what "still alive" means for endpoint map entries. */
export async function liveIfindexes(host: RtnlSocket): Promise<Set<number>> {
  return new Set((await listLinks(host)).map((l) => l.index));
}
