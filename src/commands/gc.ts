/**
 * GC (spec 1.1.0): remove what this plugin made for attachments the runtime no longer
 * knows. Every host device we create carries its owner (container ID + ifname) in its
 * alias; a device whose owner is not among `cni.dev/valid-attachments` is deleted. GC
 * keeps going past individual failures and reports them all at the end. The IPAM
 * plugin gets the same GC request.
 */
import { CniError, ErrorCode, invalidConfig } from "../cni/errors";
import { hostDeviceName, parseOwnerAlias } from "../datapath/naming";
import { log } from "../log";
import { deleteLinkByName, listLinks } from "../netlink/links";
import { RtnlSocket } from "../netlink/socket";
import type { Invocation } from "./invocation";
import { ipamBackend } from "./ipam-backend";

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
