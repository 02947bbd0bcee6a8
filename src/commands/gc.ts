/**
 * GC (spec 1.1.0): remove what this plugin made for attachments the runtime no longer
 * knows. Every host device we create carries its owner (container ID + ifname) in its
 * alias; a device whose owner is not among `cni.dev/valid-attachments` is deleted. GC
 * keeps going past individual failures and reports them all at the end. The IPAM
 * plugin gets the same GC request.
 */

import type { Attachment } from "../cni/config";
import { CniError, ErrorCode, invalidConfig } from "../cni/errors";
import { pinnedEndpointDevices, pruneDeadEndpoints, unpinEndpoint } from "../datapath/fastpath";
import { hostDeviceName, parseOwnerAlias } from "../datapath/naming";
import { liveIfindexes } from "../datapath/uplink";
import { log } from "../log";
import { deleteLinkByName, listLinks } from "../netlink/links";
import { RtnlSocket } from "../netlink/socket";
import type { Invocation } from "./invocation";
import { ipamBackend } from "./ipam-backend";

/** Endpoint pins of attachments not kept, and map entries of devices that are gone. */
async function collectFastPathGarbage(root: string, host: RtnlSocket, valid: Attachment[]): Promise<string[]> {
  const failures: string[] = [];
  const keptDevices = new Set(valid.map((a) => hostDeviceName(a.containerId, a.ifname)));
  for (const device of pinnedEndpointDevices(root)) {
    if (keptDevices.has(device)) continue;
    try {
      unpinEndpoint(root, device);
      log.info(`gc: removed pins of ${device}`);
    } catch (e) {
      failures.push(`pins of ${device}: ${(e as Error).message}`);
    }
  }
  try {
    const removed = await pruneDeadEndpoints(root, () => liveIfindexes(host));
    if (removed.length > 0) log.info(`gc: removed endpoint entries ${removed.join(", ")}`);
  } catch (e) {
    failures.push(`endpoint map: ${(e as Error).message}`);
  }
  return failures;
}

export async function cmdGc(inv: Invocation): Promise<void> {
  const valid = inv.conf.validAttachments;
  // Without the list every attachment would look stale; refuse rather than wipe the node.
  if (!valid) throw invalidConfig(`GC needs "cni.dev/valid-attachments"`);
  const keep = new Set(valid.map((a) => `${a.containerId}\0${a.ifname}`));
  const failures: string[] = [];

  const host = RtnlSocket.open();
  try {
    for (const link of await listLinks(host)) {
      const owner = parseOwnerAlias(link.alias);
      if (!owner || keep.has(`${owner.containerId}\0${owner.ifname}`)) continue;
      // Only a device whose name matches its alias is ours; anything else was relabelled by hand.
      if (link.name !== hostDeviceName(owner.containerId, owner.ifname)) continue;
      try {
        await deleteLinkByName(host, link.name);
        log.info(`gc: deleted ${link.name} of ${owner.containerId}/${owner.ifname}`);
      } catch (e) {
        failures.push(`${link.name}: ${(e as Error).message}`);
      }
    }
    failures.push(...(await collectFastPathGarbage(inv.conf.fastPath.bpffsRoot, host, valid)));
  } finally {
    host.close();
  }

  const ipam = ipamBackend(inv);
  if (ipam) {
    try {
      log.info(`gc: ${ipam.name}: ${ipam.gc(valid)}`);
    } catch (e) {
      failures.push((e as Error).message);
    }
  }
  if (failures.length > 0) {
    throw new CniError(ErrorCode.IoFailure, `GC could not remove ${failures.length} item(s)`, failures.join("; "));
  }
}
