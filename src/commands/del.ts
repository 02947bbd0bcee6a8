/**
 * DEL: remove a pod's network. Written for the worst case, because runtimes call DEL
 * whenever they are unsure and the spec asks plugins to complete DEL without error even
 * when resources are missing: the netns may be gone, the device may be gone, DEL may
 * come twice. Each of those succeeds.
 * Only a device carrying this network's ownership alias for the attachment is deleted,
 * or one with no alias yet: an ADD of the attachment killed before it labelled its device
 * (a live one holds the attachment's lock until it ends, and this DEL waits for it).
 * With `"teardown": "deferred"` the device is retired instead of deleted (datapath/
 * retired.ts): cut off at once, its deletion left to the pod netns's teardown, the agent
 * or GC.
 */
import * as fs from "node:fs";
import { AF_INET, hostPrefix } from "../cni/address";
import { ifnameProblem } from "../cni/env";
import type { Result } from "../cni/result";
import { syncNeighbourProxies } from "../datapath/coexist";
import { removeEndpoint } from "../datapath/fastpath";
import { aliasClaims, hostDeviceName } from "../datapath/naming";
import { removePodEndRules } from "../datapath/pod-end";
import { retiredFor, retireHostDevice } from "../datapath/retired";
import { releasePacing } from "../datapath/shaping";
import { liveIfindexes } from "../datapath/uplink";
import { log } from "../log";
import { deleteLinkByName, getLinkByName } from "../netlink/links";
import { RtnlSocket } from "../netlink/socket";
import { failpoint } from "../sys/failpoints";
import { isOwnNetns, openNetns } from "../sys/netns";
import { withAttachmentLock } from "./attachment-lock";
import type { Invocation } from "./invocation";
import { ipamBackend } from "./ipam-backend";

export async function cmdDel(inv: Invocation): Promise<void> {
  const { env } = inv;
  // A name the kernel refuses was refused by ADD before it made anything (and by every
  // CHECK): there is nothing to delete, and a DEL with nothing to do succeeds.
  const badName = ifnameProblem(env.ifname);
  if (badName) {
    log.info(`nothing to delete: ${badName}`);
    return;
  }
  await withAttachmentLock(env.containerId, env.ifname, () => delPod(inv));
}

async function delPod(inv: Invocation): Promise<void> {
  const { env } = inv;
  // IPs first, as ptp does: an address must not stay allocated because a device is stuck.
  ipamBackend(inv)?.del();
  await failpoint("del-ipam-released");

  const hostDevice = hostDeviceName(env.containerId, env.ifname);
  const host = RtnlSocket.open();
  try {
    const found = await getLinkByName(host, hostDevice);
    // A device an earlier DEL retired is done with but for its deletion (retired.ts); its
    // pins and entries go again below, in case that DEL was killed before they went.
    const owner = { network: inv.conf.name, containerId: env.containerId, ifname: env.ifname };
    const retired = found !== undefined && retiredFor(found, owner);
    const link = retired ? undefined : found;
    if (retired) log.info(`${hostDevice} was retired by an earlier DEL`);
    // A link without our alias is one an ADD created but had not yet labelled (killed
    // mid-way: a live one holds the lock); one with another owner's alias (another
    // network's, say, after a stray DEL for an interface name the pod now has there) is
    // not ours to delete.
    if (link?.alias !== undefined && !aliasClaims(link.alias, inv.conf.name, env.containerId, env.ifname)) {
      log.warn(`${hostDevice} belongs to "${link.alias}", not to ${inv.conf.name}'s ${env.ifname}; left alone`);
      return;
    }
    const deferred = inv.conf.teardown === "deferred";
    if (link && deferred) {
      // Cut off first: the link's release below then holds RTNL in a kernel worker while
      // this process goes on with requests that need none.
      await retireHostDevice(host, link, owner);
      log.info(`retired ${hostDevice}: down, no routes; deleted later, off DEL's path`);
      await failpoint("del-retired");
    }
    // Pins and map entries go whether or not the device is still there, and before it:
    // the last pin of the pod's link releases it in a kernel worker, whose RCU grace
    // period then overlaps the work below instead of lengthening the device's deletion.
    const addresses = (inv.conf.prevResult?.ips ?? []).map((ip) => ip.address);
    // A retired device's own: a DEL killed after retiring it may have left them.
    const gone = { hostIfindex: found?.index, addresses };
    await removeEndpoint(inv.conf.fastPath.bpffsRoot, hostDevice, gone, () => liveIfindexes(host));
    await failpoint("del-endpoint-removed");
    if (link) {
      if (mayHaveSourceRules(inv.conf.prevResult)) await removeSourceRules(env.netns, env.ifname);
      if (!deferred) {
        // Removing the host end removes the pod end (if its netns still exists) and the routes.
        await deleteLinkByName(host, hostDevice);
        log.info(`deleted ${hostDevice}`);
      }
    } else if (!found) {
      log.info(`${hostDevice} already gone`);
    }
    // The last paced pod on an uplink gives it its default qdisc back.
    await releasePacing(host, hostDevice);
    // With its routes gone the pod's proxy entries go too (and the last one on a device
    // undoes what we switched on there). Runs also when the device was already gone: its
    // entries may have outlived it.
    await syncNeighbourProxies(host);
  } finally {
    host.close();
  }
}

/**
 * Whether ADD may have given the interface source rules in the pod netns. Only a further
 * interface gets them: one for whose family the pod already had its default route, so
 * ADD's result lacks that route. Without a result to tell, it may have. Skipping the pod
 * netns otherwise spares DEL several milliseconds.
 */
function mayHaveSourceRules(prev: Result | undefined): boolean {
  if (!prev || prev.ips.length === 0) return true;
  const routed = new Set(prev.routes.map((r) => r.dst));
  return prev.ips.some((ip) => !routed.has(hostPrefix(ip.address).family === AF_INET ? "0.0.0.0/0" : "::/0"));
}

/** A secondary interface's source rules live in the pod netns and outlive its device. */
async function removeSourceRules(netns: string, ifname: string): Promise<void> {
  if (netns === "") return;
  let netnsFd: number;
  try {
    netnsFd = openNetns(netns);
  } catch {
    return; // The netns is gone or going away: so are its rules.
  }
  try {
    // ADD refuses the node's own namespace as a pod's: nothing in it is the pod's to remove.
    if (isOwnNetns(netnsFd)) return;
    const pod = RtnlSocket.open(netnsFd);
    try {
      const podLink = await getLinkByName(pod, ifname);
      if (podLink) await removePodEndRules(pod, podLink);
    } finally {
      pod.close();
    }
  } finally {
    fs.closeSync(netnsFd);
  }
}
