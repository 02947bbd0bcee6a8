/**
 * The same-node socket bypass as the verbs use it ("sockBypass": true): the sock_ops
 * and sock_release programs attached to a cgroup v2 (the node's root unless configured),
 * the sk_msg program attached to the sockhash, all as links pinned under
 * `<bpffsRoot>/sock/`, switched in place with BPF_LINK_UPDATE when a newer build loads,
 * never detached by an ADD. Removing the bpffs root (the node's state) detaches them.
 *
 * Optional by design: where the kernel lacks cgroup v2 or sockmap support, or the
 * configured cgroup is not a cgroup v2 directory, the ADD goes on without it and leaves
 * the reason in a note under /run (bpffs holds no files) that `netkit-cni status` shows.
 * Runs under the node lock (node-datapath.ts calls it there).
 *
 * Pin layout:  <root>/sock/sk_msg   <root>/sock/cgroup-<hash of the cgroup path> (sock_ops)
 *              <root>/sock/release-<hash of the cgroup path>
 *              <root>/sock/programs/<epoch>-<hash>/nkc_sockops, nkc_sk_msg, nkc_sock_release
 */

import * as fs from "node:fs";
import * as path from "node:path";
import {
  attachCgroupSockOps,
  attachCgroupSockRelease,
  attachSkMsg,
  BpfMap,
  loadSockPrograms,
  sockLinkPins,
} from "../bpf/index";
import { log } from "../log";
import { BPF_MAP_TYPE } from "../sys/bpf-uapi";
import { mkdirs } from "../sys/mkdirs";
import { sha256Hex } from "../sys/sha256";
import { ensurePinnedLink, onCgroup } from "./pinned-link";

const CGROUP2_SUPER_MAGIC = 0x63677270;
const LABEL = "socket bypass";

/** Why the last ADD could not run the bypass: the node's bpffs root names it, as the node lock. */
export const sockBypassNotePath = (root: string) =>
  path.join("/run/netkit-cni", `sockbypass-${sha256Hex([root], 12)}.json`);

export interface SockBypassOff {
  /** The cgroup the network asked for (absent: the node's cgroup v2 root). */
  cgroup: string | undefined;
  reason: string;
}

/** Leaves the reason for `status`; only a note, so failing to write it changes nothing. */
export function noteSockBypassOff(root: string, off: SockBypassOff): void {
  try {
    const note = sockBypassNotePath(root);
    mkdirs(path.dirname(note), 0o700);
    fs.writeFileSync(`${note}.${process.pid}`, JSON.stringify(off), { mode: 0o600 });
    fs.renameSync(`${note}.${process.pid}`, note);
  } catch {
    // status then says what it finds on the kernel alone
  }
}

export function readSockBypassOff(root: string): SockBypassOff | undefined {
  try {
    const off = JSON.parse(fs.readFileSync(sockBypassNotePath(root), "utf8")) as Partial<SockBypassOff>;
    return typeof off.reason === "string" ? { cgroup: off.cgroup, reason: off.reason } : undefined;
  } catch {
    return undefined;
  }
}

/** The bypass now runs on `cgroup`: a note about that same cgroup is stale (another's stays). */
export function clearSockBypassOff(root: string, cgroup: string | undefined): void {
  if (!fs.existsSync(sockBypassNotePath(root))) return;
  if (readSockBypassOff(root)?.cgroup === cgroup) fs.rmSync(sockBypassNotePath(root), { force: true });
}

export const isCgroup2 = (dir: string): boolean => {
  try {
    return fs.statfsSync(dir).type === CGROUP2_SUPER_MAGIC;
  } catch {
    return false;
  }
};

/** The node's cgroup v2 root: /sys/fs/cgroup on unified hosts, /sys/fs/cgroup/unified on
 * hybrid ones, else the first cgroup2 mount listed; undefined without one. */
export function cgroup2Root(): string | undefined {
  for (const dir of ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]) if (isCgroup2(dir)) return dir;
  try {
    for (const line of fs.readFileSync("/proc/self/mounts", "utf8").split("\n")) {
      const [, mountPoint, type] = line.split(" ");
      if (type === "cgroup2" && mountPoint) return mountPoint;
    }
  } catch {
    // no /proc: no cgroup v2 we can find
  }
  return undefined;
}

/** Why the bypass cannot run with `cgroup` (the configured one, or the root), or undefined. */
export function sockBypassUnavailable(cgroup: string | undefined): string | undefined {
  const dir = cgroup ?? cgroup2Root();
  if (!dir) return "no cgroup v2 hierarchy is mounted";
  if (!isCgroup2(dir)) return `${dir} is not a cgroup v2 directory`;
  try {
    const probe = { name: "nkc_sock_probe", type: BPF_MAP_TYPE.SOCKHASH, keySize: 4, valueSize: 8, maxEntries: 1 };
    BpfMap.create({ ...probe, flags: 0 }).close();
  } catch (e) {
    return `the kernel has no sockhash maps (${(e as Error).message})`;
  }
  return undefined;
}

export interface SockBypassObjects {
  object: Buffer;
  epoch: number;
}

/**
 * Makes sure the bypass runs on `cgroup` (undefined: the node's cgroup v2 root): loads
 * or opens the programs, then the sk_msg link on the sockhash, the sock_release link and
 * the sock_ops link on the cgroup, each created and pinned, or switched to these
 * programs. Release comes before sock_ops: a socket admitted where nothing sees it
 * closed would stay counted. Throws with the kernel's reason when it cannot; the caller
 * decides that this is not fatal.
 */
export function ensureSockBypass(
  root: string,
  objects: SockBypassObjects,
  endpoints: BpfMap,
  cgroup: string | undefined,
): void {
  const dir = cgroup ?? cgroup2Root();
  const why = sockBypassUnavailable(dir);
  if (why || !dir) throw new Error(why ?? "no cgroup v2 hierarchy is mounted");
  const sock = loadSockPrograms(root, objects.object, objects.epoch, endpoints);
  try {
    if (sock.loaded) log.info(`socket bypass: loaded programs of build ${sock.build}`);
    const switchable = !sock.superseded;
    ensurePinnedLink(LABEL, sockLinkPins.skMsg(root), sock.programs.skMsg, switchable, () =>
      attachSkMsg(sock.programs.skMsg, sock.maps.hash.fd),
    );
    ensurePinnedLink(
      LABEL,
      sockLinkPins.release(root, dir),
      sock.programs.release,
      switchable,
      onCgroup(dir, (fd) => attachCgroupSockRelease(sock.programs.release, fd)),
    );
    ensurePinnedLink(
      LABEL,
      sockLinkPins.cgroup(root, dir),
      sock.programs.sockOps,
      switchable,
      onCgroup(dir, (fd) => attachCgroupSockOps(sock.programs.sockOps, fd)),
    );
  } finally {
    sock.close();
  }
}
