/**
 * STATUS (spec 1.1.0): is this node ready to add pods? The kernel must answer netlink
 * and the IPAM plugin, if it has a STATUS verb, must say it is ready. Anything else is
 * code 50 (plugin not available), with the reason.
 */
import { CniError, ErrorCode } from "../cni/errors";
import { listLinks } from "../netlink/links";
import { RtnlSocket } from "../netlink/socket";
import type { Invocation } from "./invocation";
import { ipamBackend } from "./ipam-backend";

export async function cmdStatus(inv: Invocation): Promise<void> {
  const notReady = (why: string) => new CniError(ErrorCode.PluginNotAvailable, `not ready: ${why}`);
  try {
    const host = RtnlSocket.open();
    try {
      await listLinks(host);
    } finally {
      host.close();
    }
  } catch (e) {
    throw notReady(`netlink: ${(e as Error).message}`);
  }
  try {
    ipamBackend(inv)?.status();
  } catch (e) {
    if (e instanceof CniError && e.code === ErrorCode.PluginNotAvailable) throw e;
    throw notReady((e as Error).message);
  }
}
