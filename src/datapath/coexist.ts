/**
 * Coexistence with another plugin's pods on a shared subnet (see coexist-plan.ts for
 * why): makes the node's proxy entries match its pods, under a node-wide lock, from the
 * kernel's truth each time. ADD, DEL and GC call it after changing devices; a failed
 * ADD calls it again leaving its own addresses out.
 *
 * IPv4 needs only the entries (ARP answers for a proxied address when the node forwards
 * and routes it through another device); the proxy_arp switch, which would answer for
 * every routed address, stays as it is. IPv6 also needs the device's proxy_ndp switch:
 * switched on with our first entry on a device when it was off, and back off with our
 * last (the entries' protocol number remembers which). Devices without a connected route
 * covering one of our pods are never touched.
 */
import * as path from "node:path";
import { AF_INET, AF_INET6, familyOf } from "../cni/address";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import { listLinks } from "../netlink/links";
import { addProxyNeighbor, deleteProxyNeighbor, listProxyNeighbors } from "../netlink/neighbors";
import { listRoutes } from "../netlink/routes";
import type { RtnlSocket } from "../netlink/socket";
import { LockTimeoutError, withFileLockAsync } from "../sys/file-lock";
import { mkdirs } from "../sys/mkdirs";
import {
  isOurProxy,
  mayNeedProxies,
  ndpChanges,
  PROXY_PROTOCOL,
  PROXY_PROTOCOL_NDP_SET,
  planProxies,
} from "./coexist-plan";
import { parseOwnerAlias } from "./naming";
import { ensureSysctl, readSysctl } from "./sysctl";

const LOCK_DIR = "/run/netkit-cni";
/** One lock for every network: the devices they share a subnet with are the node's. */
const COEXIST_LOCK = path.join(LOCK_DIR, "coexist.lock");
const LOCK_TIMEOUT_MS = 10_000;

/**
 * Adds the proxy entries our pods need and removes those no pod needs any more.
 * `without`: addresses whose routes still exist but whose pod is going (a failed ADD).
 */
export async function syncNeighbourProxies(host: RtnlSocket, without: string[] = []): Promise<void> {
  mkdirs(LOCK_DIR, 0o700);
  try {
    await withFileLockAsync(COEXIST_LOCK, LOCK_TIMEOUT_MS, () => sync(host, new Set(without)));
  } catch (e) {
    if (e instanceof LockTimeoutError) {
      throw new CniError(ErrorCode.TryAgainLater, `neighbour proxies are busy: ${e.message}; try again later`);
    }
    throw e;
  }
}

async function sync(host: RtnlSocket, without: ReadonlySet<string>): Promise<void> {
  const routes = await listRoutes(host);
  const proxies = [...(await listProxyNeighbors(host, AF_INET)), ...(await listProxyNeighbors(host, AF_INET6))];
  // Listing the devices costs milliseconds on a node with many pods, and almost every
  // node has nothing to do here: no entry of ours, and no host route inside any
  // connected subnet.
  if (!proxies.some(isOurProxy) && !mayNeedProxies(routes)) return;
  const links = await listLinks(host);
  const names = new Map(links.map((l) => [l.index, l.name]));
  const ourDevices = new Set(links.filter((l) => parseOwnerAlias(l.alias)).map((l) => l.index));
  const plan = planProxies({ routes, ourDevices, proxies, without });
  if (plan.add.length === 0 && plan.remove.length === 0) return;
  const ndp = new Map(ndpChanges(plan, proxies).map((c) => [c.ifindex, c]));
  const name = (ifindex: number) => names.get(ifindex) ?? `ifindex ${ifindex}`;

  for (const p of plan.remove) {
    await deleteProxyNeighbor(host, p.address, p.ifindex);
    log.info(`no pod of ours needs ${p.address} answered on ${name(p.ifindex)} any more: proxy entry removed`);
  }
  for (const change of ndp.values()) {
    if (!change.restore) continue;
    // A device gone meanwhile took its switch along.
    if (readSysctl(ndpKey(name(change.ifindex))) === undefined) continue;
    ensureSysctl(ndpKey(name(change.ifindex)), "0");
    log.info(`proxy_ndp of ${name(change.ifindex)} back off: no pod of ours is on its subnet any more`);
  }

  const switchOn: string[] = [];
  for (const e of plan.add) {
    let protocol = PROXY_PROTOCOL;
    const change = ndp.get(e.ifindex);
    if (familyOf(e.address) === AF_INET6 && change) {
      if (change.tag === "ask") {
        // Decided once per device: later entries of this plan follow the first.
        change.tag = readSysctl(ndpKey(name(e.ifindex))) === "0" ? PROXY_PROTOCOL_NDP_SET : PROXY_PROTOCOL;
      }
      protocol = change.tag;
      if (protocol === PROXY_PROTOCOL_NDP_SET) switchOn.push(name(e.ifindex));
    }
    // The entry first: if switching on fails, its mark still says the switch is ours.
    await addProxyNeighbor(host, { address: e.address, ifindex: e.ifindex, protocol });
    log.info(`answering for ${e.address} on ${name(e.ifindex)}: its connected route ${e.because} covers our pod`);
  }
  for (const device of new Set(switchOn)) ensureSysctl(ndpKey(device), "1");
}

const ndpKey = (device: string) => `net/ipv6/conf/${device}/proxy_ndp`;
