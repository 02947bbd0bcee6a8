/**
 * STATUS (spec 1.1.0): is this node ready to add pods? The kernel must answer netlink,
 * offer the configured datapath (a `netkit` config on a kernel without netkit is not
 * ready; `auto` is, with veth, and the log says which), and the IPAM, if it can tell,
 * must have addresses left, and a conflist written by `netkit-cni agent` needs the agent
 * to have synced (agent-state.ts). Anything else is code 50 (plugin not available), with why.
 */
import { CniError, ErrorCode } from "../cni/errors";
import { chooseDatapath } from "../datapath/index";
import { log } from "../log";
import { RtnlSocket } from "../netlink/socket";
import { requireAgentSynced } from "./agent-state";
import type { Invocation } from "./invocation";
import { ipamBackend } from "./ipam-backend";

export async function cmdStatus(inv: Invocation): Promise<void> {
  const notReady = (why: string) => new CniError(ErrorCode.PluginNotAvailable, `not ready: ${why}`);
  const host = RtnlSocket.open();
  try {
    const datapath = await chooseDatapath(inv.conf.datapath, inv.conf, host);
    log.info(`ready for ${datapath.kind} pods (datapath "${inv.conf.datapath}")`);
  } catch (e) {
    if (e instanceof CniError) throw e;
    throw notReady(`netlink: ${(e as Error).message}`);
  } finally {
    host.close();
  }
  try {
    ipamBackend(inv)?.status();
  } catch (e) {
    if (e instanceof CniError && e.code === ErrorCode.PluginNotAvailable) throw e;
    throw notReady((e as Error).message);
  }
  // Last: a node whose kernel or IPAM is not ready says so first.
  requireAgentSynced(inv.conf);
}
