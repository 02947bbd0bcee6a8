/**
 * Retired devices: DEL with `"teardown": "deferred"` leaves the pod's device pair for
 * someone else to delete, because deleting it costs RCU grace periods under RTNL (the
 * largest part of DEL's time) that nobody needs to wait for once the pod is cut off.
 *
 * Retiring is one message: the host end goes down (which removes every route through it,
 * both families, and stops it passing frames either way) and its alias changes from the
 * owner's to the retired form (naming.ts). DEL has freed the pod's addresses before it,
 * and removes its pins and map entries right after, so a new pod may take the same
 * address at once: the routes it adds point at its own device.
 *
 * Whoever comes first deletes the pair: the pod's netns teardown (the kernel deletes both
 * ends with it, in its own worker), the agent's sweep, GC, or an ADD of the same
 * attachment (a runtime that disconnects and reconnects a live container), which needs
 * the names back.
 */
import { log } from "../log";
import { deleteLink, type Link, listLinks, setLinkDown } from "../netlink/links";
import type { RtnlSocket } from "../netlink/socket";
import { isRetiredDevice, networkToken, parseRetiredAlias, retiredAlias } from "./naming";

export interface AttachmentName {
  network: string;
  containerId: string;
  ifname: string;
}

/** Cuts the pod's host end off and labels it retired, in one request. */
export async function retireHostDevice(host: RtnlSocket, link: Link, owner: AttachmentName): Promise<void> {
  await setLinkDown(host, link, retiredAlias(owner.network, owner.containerId, owner.ifname));
}

/** Whether `link` is the device a DEL of this attachment retired. */
export function retiredFor(link: Link, owner: AttachmentName): boolean {
  const was = parseRetiredAlias(link.alias);
  return (
    isRetiredDevice(link) &&
    was?.network === networkToken(owner.network) &&
    was.containerId === owner.containerId &&
    was.ifname === owner.ifname
  );
}

export interface RetiredSweep {
  deleted: string[];
  failures: string[];
}

/**
 * Deletes the node's retired devices, all of them or one network's. One at a time: each
 * holds RTNL through its grace periods, and a burst would stall every ADD meanwhile.
 * The event loop gets a turn after each: netlink calls block (sys/netlink-fd.ts), and in
 * the agent the sweep shares its thread with the verbs plugins hand over, which a sweep
 * of a storm's pairs kept waiting for seconds.
 */
export async function deleteRetiredDevices(host: RtnlSocket, network?: string): Promise<RetiredSweep> {
  const token = network === undefined ? undefined : networkToken(network);
  const sweep: RetiredSweep = { deleted: [], failures: [] };
  for (const link of await listLinks(host)) {
    if (!isRetiredDevice(link)) continue;
    if (token !== undefined && parseRetiredAlias(link.alias)?.network !== token) continue;
    try {
      // By index: an ADD of the same attachment may delete this one and make a live
      // device of the same name meanwhile. One gone meanwhile (its netns went) was not
      // ours to count.
      if (await deleteLink(host, link)) sweep.deleted.push(link.name);
    } catch (e) {
      sweep.failures.push(`${link.name}: ${(e as Error).message}`);
    }
    await new Promise((resolve) => setImmediate(resolve));
  }
  if (sweep.deleted.length > 0) log.info(`deleted retired device(s) ${sweep.deleted.join(", ")}`);
  return sweep;
}
