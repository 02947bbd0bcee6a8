/**
 * Picks the device kind for an ADD: what the config (or the pod's annotation over it)
 * asks for, with `auto` choosing netkit where the kernel has it. `netkit` on a kernel
 * without it is refused before anything is allocated, naming the missing feature.
 */
import type { DatapathChoice, NetConf } from "../cni/config";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import type { RtnlSocket } from "../netlink/socket";
import { netkitDatapath, WIREGUARD_ROOM } from "./netkit-pair";
import { kernelHasNetkit } from "./probe";
import type { Datapath } from "./types";
import { vethDatapath } from "./veth-pair";

export async function chooseDatapath(kind: DatapathChoice, conf: NetConf, host: RtnlSocket): Promise<Datapath> {
  if (kind === "veth") return vethDatapath;
  if (await kernelHasNetkit(host)) {
    // An encrypting network's pods send through WireGuard: their pairs leave it room.
    return netkitDatapath({ mode: conf.mode, room: conf.encryption === "wireguard" ? WIREGUARD_ROOM : undefined });
  }
  if (kind === "netkit") throw netkitMissing();
  log.info("datapath auto: this kernel has no netkit devices (CONFIG_NETKIT, Linux 6.7+); using veth");
  return vethDatapath;
}

function netkitMissing(): CniError {
  return new CniError(
    ErrorCode.PluginNotAvailable,
    'datapath "netkit" needs netkit devices, which this kernel lacks (CONFIG_NETKIT, Linux 6.7 or later)',
    'use "datapath": "auto" to fall back to veth on such nodes, or "veth"',
  );
}

/** Whether the pod end needs its gateways pinned to the host MAC (devices that do ARP/ND). */
export const podEndUsesNeighbours = (dp: Datapath, conf: NetConf) => dp.kind === "veth" || conf.mode === "l2";
