/**
 * The node's WireGuard device, as `--encryption=wireguard` starts it: made (or taken
 * over, after a restart) under its fixed name, given the node's private key and the
 * fixed port, an MTU of the uplink's less WireGuard's overhead, and up; then, before any
 * controller runs, a route of ours through it for each cluster CIDR, so from the first
 * moment nothing to another node's pods leaves in clear: until a peer is configured, what
 * the device has no peer for is dropped there, counted (its tx_errors), and answered
 * with ICMP unreachable. A kernel without WireGuard is refused, saying why.
 *
 * Peers are changed through the generic netlink family (netlink/wireguard.ts).
 */
import * as fs from "node:fs";
import { uplinkPin } from "../../bpf/index";
import { parseCidr } from "../../cni/address";
import { FALLBACK_MTU, resolveUplink, WIREGUARD_DEVICE, WIREGUARD_READY_ALIAS } from "../../datapath/uplink";
import { createLink, deleteLinkByName, getLinkByName, isUp, setLinkMtu, setLinkUp } from "../../netlink/links";
import { addRoute } from "../../netlink/routes";
import { NetlinkError, RtnlSocket } from "../../netlink/socket";
import { type WgDevice, type WgPeerChange, WireguardGenl } from "../../netlink/wireguard";
import { agentLog } from "../log";
import { type AgentOptions, installOptionsFor } from "../options";
import { AGENT_ROUTE_PROTOCOL } from "../routes/table";
import { loadOrCreateKey, type NodeKey } from "./keys";

/** The port every node's device listens on: a peer's endpoint is its InternalIP and this. */
export const WIREGUARD_PORT = 51871;
/** Outer IPv6 (40) + UDP (8) + WireGuard's header and tag (32): what a pod's packet must leave room for. */
export const WIREGUARD_OVERHEAD = 80;

const EOPNOTSUPP = 95;
const EEXIST = 17;

/** What the WireGuard controller needs of the kernel (tests give it a fake). */
export interface WireguardKernel {
  readonly ifindex: number;
  read(): Promise<WgDevice>;
  change(peers: WgPeerChange[]): Promise<void>;
}

export interface WireguardStart {
  kernel: WireguardKernel;
  /** The pods' MTU: the uplink's less the overhead. */
  podMtu: number;
  close(): void;
}

class KernelWireguard implements WireguardKernel {
  constructor(
    readonly ifindex: number,
    private readonly genl: WireguardGenl,
  ) {}

  read(): Promise<WgDevice> {
    return this.genl.get(WIREGUARD_DEVICE);
  }

  change(peers: WgPeerChange[]): Promise<void> {
    return this.genl.set({ ifname: WIREGUARD_DEVICE, peers });
  }
}

const refusal = (why: string) => new Error(`--encryption=wireguard cannot run on this node: ${why}`);

/** The device, ready; an Error (nothing changed) when this kernel cannot. */
export async function startWireguard(
  host: RtnlSocket,
  nodeKey: () => NodeKey,
  hostInterface: string | undefined,
  clusterCidrs: readonly string[],
): Promise<WireguardStart | Error> {
  const uplink = await resolveUplink(host, hostInterface);
  const podMtu = (uplink?.mtu ?? FALLBACK_MTU) - WIREGUARD_OVERHEAD;
  let link = await getLinkByName(host, WIREGUARD_DEVICE);
  if (link && link.kind !== "wireguard")
    return refusal(`a device named ${WIREGUARD_DEVICE} exists and is not WireGuard`);
  if (!link) {
    try {
      await createLink(host, "wireguard", WIREGUARD_DEVICE, podMtu);
    } catch (e) {
      if (e instanceof NetlinkError && e.errno === EOPNOTSUPP)
        return refusal(`the kernel has no WireGuard (no "wireguard" link kind, and no module to load for it)`);
      throw e;
    }
    link = await getLinkByName(host, WIREGUARD_DEVICE);
    if (!link) throw new Error(`${WIREGUARD_DEVICE} vanished right after it was made`);
  }
  const genl = await WireguardGenl.open();
  if (!genl) return refusal(`the kernel has no WireGuard generic netlink family`);
  try {
    const key = nodeKey();
    await genl.set({ ifname: WIREGUARD_DEVICE, privateKey: key.privateKey, listenPort: WIREGUARD_PORT });
    if (link.mtu !== podMtu) await setLinkMtu(host, link, podMtu);
    if (!isUp(link)) await setLinkUp(host, link);
    await coverCluster(host, link.index, clusterCidrs);
    // Only now may the plugin add pods (requireEncryption).
    if (link.alias !== WIREGUARD_READY_ALIAS) await setLinkUp(host, link, WIREGUARD_READY_ALIAS);
  } catch (e) {
    genl.close();
    throw e;
  }
  return { kernel: new KernelWireguard(link.index, genl), podMtu, close: () => genl.close() };
}

/** The cluster CIDRs through the device, unless a route has the destination already (ours from before, or someone's). */
async function coverCluster(host: RtnlSocket, ifindex: number, clusterCidrs: readonly string[]): Promise<void> {
  for (const dst of clusterCidrs) {
    try {
      await addRoute(host, { family: parseCidr(dst).family, dst, ifindex, protocol: AGENT_ROUTE_PROTOCOL });
    } catch (e) {
      if (!(e instanceof NetlinkError && e.errno === EEXIST)) throw e;
    }
  }
}

/** The covering routes as the route controller plans them (controller.ts). */
export const coveringRoutes = (clusterCidrs: readonly string[], ifindex: number) =>
  clusterCidrs.map((dst) => ({ node: "", dst, family: parseCidr(dst).family, ifindex }));

/**
 * --encryption=wireguard at the agent's start: the device (the key is read or made only
 * once the kernel has shown it can), and the pods' MTU for the conflist: the uplink's
 * less the overhead, or --mtu when that is smaller.
 */
export type EncryptionStart = WireguardStart & { publicKey: string };

export async function startEncryption(opts: AgentOptions): Promise<EncryptionStart | Error> {
  const install = installOptionsFor(opts, ["192.0.2.0/24"]).generate;
  const host = RtnlSocket.open();
  try {
    let key: NodeKey | undefined;
    const start = await startWireguard(
      host,
      () => {
        key = loadOrCreateKey(opts.dataDir);
        if (key.created) agentLog.info(`wireguard: made a new key in ${opts.dataDir}`);
        return key;
      },
      install.hostInterface,
      opts.clusterCidrs,
    );
    if (start instanceof Error || !key) return start instanceof Error ? start : new Error("no key");
    const podMtu = install.mtu !== undefined ? Math.min(install.mtu, start.podMtu) : start.podMtu;
    return { ...start, podMtu, publicKey: key.publicKey };
  } finally {
    host.close();
  }
}

/**
 * An agent started without --encryption takes down what an encrypting run left: the
 * device (the kernel removes the routes through it and detaches its programs) and the
 * pins of those programs' links, which would otherwise be reported as defunct. True when
 * there was a device; its Node's key annotation is the caller's to withdraw.
 */
export async function removeWireguard(bpffsRoot: string): Promise<boolean> {
  const host = RtnlSocket.open();
  try {
    const link = await getLinkByName(host, WIREGUARD_DEVICE);
    if (link?.kind !== "wireguard") return false;
    await deleteLinkByName(host, WIREGUARD_DEVICE);
  } finally {
    host.close();
  }
  for (const direction of ["ingress", "egress"] as const) {
    fs.rmSync(uplinkPin(bpffsRoot, WIREGUARD_DEVICE, direction), { force: true });
  }
  return true;
}
