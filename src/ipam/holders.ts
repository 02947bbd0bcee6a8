/**
 * Who holds addresses in a host-local store, listed by attachment, and which of them the
 * runtime still knows. GC needs this twice: the embedded IPAM frees the addresses of
 * attachments not among `cni.dev/valid-attachments` itself, and a delegated host-local
 * that predates GC (Debian's 1.1.1) must be sent a DEL for each such attachment, or the
 * addresses of a pod that vanished without a DEL stay reserved forever.
 *
 * The store is read with store.ts's reader (`IpStore.scan`), the format both plugins
 * share: a file per address named by the address (any spelling the reader accepts;
 * `lock`, `last_reserved_ip.N` and anything else that is not an address are not
 * reservations), holding "<containerID>\r\n<ifname>" or, from older versions, only the
 * container ID. host-local writes IPv6 names with '_' for ':' only on Windows
 * (GetEscapedPath), so on Linux such a name is no reservation of any version, here as in
 * the embedded IPAM. Reads only, without the lock: a listing is a snapshot, and the DEL
 * that acts on it takes the lock itself and is idempotent.
 */
import * as path from "node:path";
import type { Attachment, IpamConf } from "../cni/config";
import { DEFAULT_DATA_DIR, DEFAULT_LOCK_TIMEOUT_MS } from "./config";
import { IpStore, type Owner } from "./store";

/** The reference IPAM plugin whose store this module reads. */
export const HOST_LOCAL = "host-local";

/** One attachment and every address its reservations name. */
export interface Holder {
  containerId: string;
  /** Undefined for reservations of older versions, which name only the container. */
  ifname: string | undefined;
  /** Canonical addresses, IPv4 first. */
  ips: string[];
}

/**
 * Where host-local keeps this network's reservations: `<ipam.dataDir>/<network name>`,
 * the data directory defaulting as host-local's does (absent or empty). Undefined when
 * `dataDir` is no string: host-local cannot parse that config, so it reserved nothing
 * with it.
 */
export function hostLocalStoreDir(ipam: IpamConf, network: string): string | undefined {
  const dataDir = ipam.dataDir ?? "";
  if (typeof dataDir !== "string") return undefined;
  return path.join(dataDir === "" ? DEFAULT_DATA_DIR : dataDir, network);
}

/**
 * Every attachment holding an address in `storeDir`, once each however many addresses
 * it holds (dual stack: two files, one attachment). A missing directory holds nothing.
 * Reservations that name no container (an empty file, left by a node crash or a writer
 * still at work) name no attachment and are left out. Surrounding whitespace is not part
 * of a name (host-local trims the content it compares), so "<id>\r\n" is an old-format
 * reservation.
 */
export function listHolders(storeDir: string): Holder[] {
  const byAttachment = new Map<string, Holder>();
  for (const r of new IpStore(storeDir, DEFAULT_LOCK_TIMEOUT_MS).scan().values()) {
    const containerId = r.owner.containerId;
    if (containerId === "") continue;
    const ifname = r.owner.ifname?.trim() || undefined;
    const key = JSON.stringify([containerId, ifname ?? null]);
    const holder = byAttachment.get(key) ?? { containerId, ifname, ips: [] };
    holder.ips.push(r.ip);
    byAttachment.set(key, holder);
  }
  const holders = [...byAttachment.values()];
  for (const h of holders) h.ips.sort(byFamilyThenText);
  return holders.sort(
    (a, b) => a.containerId.localeCompare(b.containerId) || (a.ifname ?? "\uffff").localeCompare(b.ifname ?? "\uffff"),
  );
}

const byFamilyThenText = (a: string, b: string) =>
  Number(a.includes(":")) - Number(b.includes(":")) || a.localeCompare(b);

/**
 * The test GC applies to a reservation's owner: does the runtime still know it? An
 * old-format reservation (no ifname) stays while any valid attachment has its container.
 */
export function knownTo(valid: Attachment[]): (owner: Owner) => boolean {
  const attachments = new Set(valid.map((a) => `${a.containerId.trim()}\0${a.ifname}`));
  const containers = new Set(valid.map((a) => a.containerId.trim()));
  return ({ containerId, ifname }) =>
    ifname === undefined ? containers.has(containerId) : attachments.has(`${containerId}\0${ifname}`);
}
