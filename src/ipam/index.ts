/**
 * The embedded IPAM, used when `ipam.type` is "netkit-cni": host-local's behaviour and
 * on-disk store without exec'ing another binary. The verbs' IPAM halves live here:
 * allocate (ADD), release (DEL), check (CHECK), gc (GC), status (STATUS). The folder's one
 * face: its config and holders.ts are re-exported here for the rest of src/.
 * Everything is synchronous and every change happens under the store's lock, which every
 * ADD and DEL on the node waits for: a lookup that reads every reservation (what does this
 * attachment hold?) is done before taking it and confirmed under it. Errors carry
 * their CNI code: 7 bad config (config.ts), 11 lock busy, 50 no free address, 5 I/O,
 * 101 CHECK mismatch. Never touches network devices or namespaces.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import { formatAddress, parseAddressOrCidr } from "../cni/address";
import type { Attachment } from "../cni/config";
import { CniError, ErrorCode, invalidEnv } from "../cni/errors";
import type { IpConfig, Result } from "../cni/result";
import { describeSet, pickFree, proposals, rangeFor } from "./allocator";
import type { EmbeddedIpamConfig } from "./config";
import { knownTo } from "./holders";
import { IpStore, type LockedStore, type Owner, type Reservation } from "./store";

export {
  DEFAULT_DATA_DIR,
  DEFAULT_LOCK_TIMEOUT_MS,
  EMBEDDED_IPAM_TYPE,
  type EmbeddedIpamConfig,
  isEmbeddedIpam,
  type ParseOptions,
  parseIpamConfig,
  type RangeSet,
} from "./config";
export { HOST_LOCAL, type Holder, hostLocalStoreDir, knownTo, listHolders } from "./holders";

function storeOf(cfg: EmbeddedIpamConfig): IpStore {
  return new IpStore(cfg.storeDir, cfg.lockTimeoutMs);
}

/** The ID and ifname become file content split by "\r\n"; anything that breaks that is refused. */
function requireAttachment(containerId: string, ifname: string): void {
  if (containerId.trim() === "" || /[\r\n\0]/.test(containerId)) {
    throw invalidEnv(`container ID ${JSON.stringify(containerId)} cannot own an IP address`);
  }
  if (ifname === "" || /[\r\n\0]/.test(ifname)) {
    throw invalidEnv(`interface name ${JSON.stringify(ifname)} cannot own an IP address`);
  }
}

const ownedExactly = (owner: Owner, containerId: string, ifname: string) =>
  owner.ifname === ifname && owner.containerId === containerId.trim();

const ownedLegacy = (owner: Owner, containerId: string) =>
  owner.ifname === undefined && owner.containerId === containerId.trim();

function prefixOf(cfg: EmbeddedIpamConfig, setIndex: number, ip: string): IpConfig {
  const set = cfg.rangeSets[setIndex];
  const range = set && rangeFor(set, ip);
  if (!set || !range) throw new CniError(ErrorCode.Internal, `${ip} is not in range set ${setIndex}`);
  return {
    address: `${ip}/${range.subnet.prefixLength}`,
    gateway: formatAddress(set.family, range.gateway),
  };
}

/**
 * ADD: one address per range set for this attachment. An address the attachment already
 * holds in a set is returned again (an ADD repeated after a crash must not take a second
 * one). If any set cannot be served, the addresses this call reserved are released before
 * the error is thrown.
 */
export function allocate(cfg: EmbeddedIpamConfig, containerId: string, ifname: string): Result {
  requireAttachment(containerId, ifname);
  const store = storeOf(cfg);
  // What the attachment holds is looked up before taking the lock, since that reads every
  // reservation. Nobody else makes or removes its files meanwhile (a runtime never runs
  // two operations on one attachment at once); GC may free one, hence the second look.
  const held = store.exists()
    ? [...store.scan().values()].filter((r) => ownedExactly(r.owner, containerId, ifname))
    : [];
  const ips = store.withLock((locked) => {
    const ours: string[] = [];
    try {
      return cfg.rangeSets.map((set, index) => {
        const mine = held.find((r) => rangeFor(set, r.ip) && stillOwned(locked, r, containerId, ifname));
        if (mine) return prefixOf(cfg, index, mine.ip);
        const ip = reserveIn(locked, index, cfg, containerId, ifname);
        ours.push(ip);
        return prefixOf(cfg, index, ip);
      });
    } catch (e) {
      for (const ip of ours) locked.remove(ip);
      throw e;
    }
  });
  return { interfaces: [], ips, routes: cfg.routes.map((r) => ({ ...r })), dns: { ...cfg.dns } };
}

/** Whether `r`, found without the lock, is still the attachment's. */
function stillOwned(locked: LockedStore, r: Reservation, containerId: string, ifname: string): boolean {
  const now = locked.reservation(r.ip, r.file);
  return now !== undefined && ownedExactly(now.owner, containerId, ifname);
}

function reserveIn(
  store: LockedStore,
  index: number,
  cfg: EmbeddedIpamConfig,
  containerId: string,
  ifname: string,
): string {
  const set = cfg.rangeSets[index];
  if (!set) throw new CniError(ErrorCode.Internal, `no range set ${index}`);
  const tries = proposals(set, store.lastReserved(index), () => store.addresses());
  const ip = store.reserveFirst(tries, containerId, ifname);
  if (ip === undefined) {
    // Code 50, "cannot service ADD requests": the same answer STATUS gives for this
    // state, so a runtime that polls STATUS stops scheduling pods here. Not 11: a full
    // range does not clear up by retrying, only by pods going away. The message is
    // host-local's, so existing alerts keep matching.
    throw new CniError(
      ErrorCode.PluginNotAvailable,
      `no IP addresses available in range set: ${describeSet(set)}`,
      `network ${cfg.networkName}, range set ${index}, store ${cfg.storeDir}`,
    );
  }
  store.setLastReserved(index, ip);
  return ip;
}

/**
 * DEL: frees every address this attachment holds. Like host-local, reservations that
 * name only the container (written by older versions) are freed when none names the
 * attachment exactly. Nothing to free, or no store at all, is success: DEL may repeat.
 * `known` are the addresses the runtime says the attachment has (prevResult): when they
 * account for every range set, only their files are read; otherwise all are.
 */
export function release(cfg: EmbeddedIpamConfig, containerId: string, ifname: string, known: string[] = []): void {
  requireAttachment(containerId, ifname);
  const store = storeOf(cfg);
  if (!store.exists()) return;
  const owns = (r: Reservation) => ownedExactly(r.owner, containerId, ifname) || ownedLegacy(r.owner, containerId);
  // Looked for before taking the lock, and confirmed under it, as in allocate.
  const found = new Map<string, Reservation>();
  for (const text of known) {
    const addr = parseAddressOrCidr(text);
    const r = addr && store.read(formatAddress(addr.family, addr.value));
    if (r && owns(r)) found.set(r.ip, r);
  }
  const accounted = cfg.rangeSets.every((set) => [...found.keys()].some((ip) => rangeFor(set, ip)));
  if (!accounted) {
    const all = [...store.scan().values()];
    let mine = all.filter((r) => ownedExactly(r.owner, containerId, ifname));
    if (mine.length === 0) mine = all.filter((r) => ownedLegacy(r.owner, containerId));
    for (const r of mine) found.set(r.ip, r);
  }
  if (found.size === 0) return;
  store.withLock((locked) => {
    for (const r of found.values()) {
      const now = locked.reservation(r.ip, r.file);
      if (now && owns(now)) locked.remove(now.ip, now.file);
    }
  });
}

/**
 * CHECK: every address in `addresses` (plain or CIDR) is reserved for this attachment.
 * With no addresses given, the attachment must hold at least one (host-local's check).
 */
export function check(cfg: EmbeddedIpamConfig, containerId: string, ifname: string, addresses: string[]): void {
  requireAttachment(containerId, ifname);
  const mismatch = (msg: string) => new CniError(ErrorCode.CheckMismatch, msg);
  const store = storeOf(cfg);
  if (!store.exists())
    throw mismatch(`no IP address is reserved for ${containerId}/${ifname}: ${cfg.storeDir} is missing`);
  store.withLock((locked) => {
    const owns = (r: Reservation | undefined) =>
      r !== undefined && (ownedExactly(r.owner, containerId, ifname) || ownedLegacy(r.owner, containerId));
    if (addresses.length === 0) {
      if (![...locked.reservations().values()].some(owns)) {
        throw mismatch(`no IP address is reserved for ${containerId}/${ifname}`);
      }
      return;
    }
    let all: Map<string, Reservation> | undefined;
    const readAll = () => {
      all ??= locked.reservations();
      return all;
    };
    for (const text of addresses) {
      const addr = parseAddressOrCidr(text);
      if (!addr) throw mismatch(`${JSON.stringify(text)} is not an IP address`);
      const ip = formatAddress(addr.family, addr.value);
      // One file per address; all of them only when one is not under its canonical name.
      const r = locked.reservation(ip) ?? readAll().get(ip);
      if (!r) throw mismatch(`${ip} is not reserved in ${cfg.storeDir}`);
      if (!owns(r)) {
        const holder = r.owner.ifname === undefined ? r.owner.containerId : `${r.owner.containerId}/${r.owner.ifname}`;
        throw mismatch(`${ip} is reserved for ${holder}, not ${containerId}/${ifname}`);
      }
    }
  });
}

/**
 * GC: frees every address whose owner is not among `valid`. A legacy reservation (no
 * ifname) stays while any valid attachment has its container ID. Keeps going past
 * failures and reports them together (code 5).
 */
export function gc(cfg: EmbeddedIpamConfig, valid: Attachment[]): { released: string[] } {
  const store = storeOf(cfg);
  if (!store.exists()) return { released: [] };
  const known = knownTo(valid);
  return store.withLock((locked) => {
    locked.removeTemps();
    const released: string[] = [];
    const failures: string[] = [];
    for (const r of locked.reservations().values()) {
      if (known(r.owner)) continue;
      try {
        locked.remove(r.ip, r.file);
        released.push(r.ip);
      } catch (e) {
        failures.push((e as Error).message);
      }
    }
    if (failures.length > 0) {
      throw new CniError(
        ErrorCode.IoFailure,
        `IPAM GC could not free ${failures.length} address(es)`,
        failures.join("; "),
      );
    }
    return { released };
  });
}

/**
 * STATUS: can an ADD succeed now? Fails with code 50 when the store directory cannot be
 * used or a range set has no free address. Reads only: creates nothing, takes no lock
 * (a busy lock is not unreadiness).
 */
export function status(cfg: EmbeddedIpamConfig): void {
  const notReady = (why: string) => new CniError(ErrorCode.PluginNotAvailable, `IPAM not ready: ${why}`);
  const unusable = storeProblem(cfg.storeDir);
  if (unusable) throw notReady(unusable);
  const reserved = storeOf(cfg).reservedAddresses();
  for (const [index, set] of cfg.rangeSets.entries()) {
    const inSet = [...reserved].filter((ip) => rangeFor(set, ip)).length;
    if (!pickFree(set, undefined, (ip) => reserved.has(ip), inSet)) {
      throw notReady(`no IP addresses available in range set ${index}: ${describeSet(set)}`);
    }
  }
}

/** Why the store directory (or, before the first ADD, the directory it will be made in) is unusable. */
function storeProblem(dir: string): string | undefined {
  let at = dir;
  for (;;) {
    let st: fs.Stats;
    try {
      st = fs.statSync(at);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT" && path.dirname(at) !== at) {
        at = path.dirname(at);
        continue;
      }
      return `cannot use ${at}: ${(e as Error).message}`;
    }
    if (!st.isDirectory()) return `${at} is not a directory`;
    try {
      fs.accessSync(at, fs.constants.W_OK | fs.constants.X_OK);
    } catch (e) {
      return `${at} is not writable: ${(e as Error).message}`;
    }
    return undefined;
  }
}
