/**
 * GC (spec 1.1.0): remove what this plugin made for this network's attachments the
 * runtime no longer knows. Every host device we create carries its owner (network,
 * container ID, ifname) in its alias; a device of this network whose attachment is not
 * among `cni.dev/valid-attachments` is deleted, with its pins. Another network's devices
 * on the node (a second interface, podman networks) and their pins are never touched;
 * pins and endpoint entries whose device is gone are dead for every network, so any GC
 * removes them. GC keeps going past individual failures and reports them all at the end.
 * The IPAM plugin gets the same GC request; one that predates GC gets a DEL per removed
 * attachment instead, and host-local also one for every other attachment its store names
 * that is not valid (a pod that vanished without DEL took its device along, so only the
 * store still knows it). A DEL with `"teardown": "deferred"` leaves its pair retired;
 * GC deletes this network's retired pairs too.
 */

import type { Attachment } from "../cni/config";
import { CniError, ErrorCode, invalidConfig } from "../cni/errors";
import { syncNeighbourProxies } from "../datapath/coexist";
import { pruneDeadEndpoints, unpinEndpoint } from "../datapath/fastpath";
import { hostDeviceName, isRetiredDevice, networkToken, type Owner, parseOwnerAlias } from "../datapath/naming";
import { pinnedEndpointDevices } from "../datapath/node-state";
import { deleteRetiredDevices } from "../datapath/retired";
import { releaseUnusedPacing } from "../datapath/shaping";
import { liveIfindexes } from "../datapath/uplink";
import { log } from "../log";
import { deleteLinkByName, type Link, listLinks } from "../netlink/links";
import { RtnlSocket } from "../netlink/socket";
import type { Invocation } from "./invocation";
import { ipamBackend } from "./ipam-backend";

export async function cmdGc(inv: Invocation): Promise<void> {
  const valid = inv.conf.validAttachments;
  // Without the list every attachment would look stale; refuse rather than wipe the node.
  if (!valid) throw invalidConfig(`GC needs "cni.dev/valid-attachments"`);
  const stale = staleTest(inv.conf.name, valid);
  const root = inv.conf.fastPath.bpffsRoot;
  const failures: string[] = [];
  const removed: Owner[] = [];

  const host = RtnlSocket.open();
  try {
    for (const link of await listLinks(host)) {
      const owner = stale(link);
      if (!owner) continue;
      try {
        await deleteLinkByName(host, link.name);
        removed.push(owner);
        log.info(`gc: deleted ${link.name} of ${owner.containerId}/${owner.ifname}`);
      } catch (e) {
        failures.push(`${link.name}: ${(e as Error).message}`);
      }
    }
    // This network's DEL'd attachments whose pairs nobody deleted yet (retired.ts).
    const retired = await deleteRetiredDevices(host, inv.conf.name);
    failures.push(...retired.failures);
    failures.push(...(await collectFastPathGarbage(root, host, stale)));
    try {
      // The deleted devices' routes are gone: so go the proxy entries only they needed.
      await syncNeighbourProxies(host);
    } catch (e) {
      failures.push(`neighbour proxies: ${(e as Error).message}`);
    }
    try {
      // An uplink whose paced pods are all gone (any network's) gets its default qdisc back.
      await releaseUnusedPacing(host);
    } catch (e) {
      failures.push(`uplink pacing: ${(e as Error).message}`);
    }
  } finally {
    host.close();
  }

  const ipam = ipamBackend(inv);
  if (ipam) {
    try {
      log.info(`gc: ${ipam.name}: ${ipam.gc(valid, removed)}`);
    } catch (e) {
      failures.push((e as Error).message);
    }
  }
  if (failures.length > 0) {
    throw new CniError(ErrorCode.IoFailure, `GC could not remove ${failures.length} item(s)`, failures.join("; "));
  }
}

/** The test for "this device is this network's and its attachment is gone": returns the
 * owner then. */
function staleTest(network: string, valid: Attachment[]): (link: Link) => Owner | undefined {
  const token = networkToken(network);
  const keep = new Set(valid.map((a) => `${a.containerId}\0${a.ifname}`));
  return (link) => {
    const owner = parseOwnerAlias(link.alias);
    if (owner?.network !== token || keep.has(`${owner.containerId}\0${owner.ifname}`)) return undefined;
    // Only a device whose name matches its alias is ours; anything else was relabelled by hand.
    return link.name === hostDeviceName(owner.containerId, owner.ifname) ? owner : undefined;
  };
}

/**
 * Endpoint pins whose device is gone or stale, and map entries of devices that are gone.
 * Pins are listed before the devices: pins come after their device in ADD and before
 * its deletion in DEL, so a pin whose device is missing from the later list is dead, not
 * an ADD in progress.
 */
async function collectFastPathGarbage(
  root: string,
  host: RtnlSocket,
  stale: (link: Link) => Owner | undefined,
): Promise<string[]> {
  const failures: string[] = [];
  const pinned = pinnedEndpointDevices(root);
  const links = await listLinks(host);
  const byName = new Map(links.map((l) => [l.name, l]));
  for (const device of pinned) {
    const link = byName.get(device);
    if (link && !stale(link) && !isRetiredDevice(link)) continue;
    try {
      unpinEndpoint(root, device);
      log.info(`gc: removed pins of ${device}`);
    } catch (e) {
      failures.push(`pins of ${device}: ${(e as Error).message}`);
    }
  }
  try {
    // Lists the endpoint map before asking for the live devices again (see fastpath.ts).
    const removed = await pruneDeadEndpoints(root, () => liveIfindexes(host));
    if (removed.length > 0) log.info(`gc: removed endpoint entries ${removed.join(", ")}`);
  } catch (e) {
    failures.push(`endpoint map: ${(e as Error).message}`);
  }
  return failures;
}
