/**
 * Pacing on the uplink: the fq qdisc that releases packets at the departure times the
 * pods' programs stamp (EDT, bpf/lib/bandwidth.h), set up by the first ADD of a pod with
 * an egress limit and taken away, giving the device back its default, when the last such
 * pod is gone.
 *
 * The uplink is the node's, shared by every network that routes through it, so the state
 * lives outside any bpffs root: one folder per uplink (named by its network namespace and
 * ifindex) holds one file per paced pod, named by its host device, under one node-wide
 * lock. A file whose device no longer exists is a pod lost without DEL: every release
 * drops those, so a node's fq outlives its last paced pod only until the next DEL or GC.
 *
 * A namespace is named twice: by its nsfs inode, which the kernel hands to the next
 * namespace once this one is gone, and by its cookie, which it never hands out again. A
 * folder or note under this namespace's inode but another cookie is the inode's previous
 * owner's, whose uplinks went with it: it is dropped, never inherited. One under the inode
 * alone was written before cookies were part of the name and is adopted.
 *
 * What is ours to change: the kernel's default root (handle 0: pfifo_fast, noqueue, mq with
 * default children). A device with a single transmit queue gets fq as its root; one with
 * several gets mq with an fq per queue. A root fq, or mq whose children are all fq, already
 * paces, whoever made it, and is used as it is. Any other qdisc is the admin's: it stays,
 * and the pod's egress is policed instead, as it is on a kernel without sch_fq. Whatever
 * was decided, the reason is logged and noted for `status`.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { EgressEnforcement } from "../bpf/index";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import { listLinks } from "../netlink/links";
import { addQdisc, deleteQdisc, listQdiscs, type Qdisc, TC_H_ROOT, tcHandle, tcMajor } from "../netlink/qdisc";
import type { RtnlSocket } from "../netlink/socket";
import { LockTimeoutError, withFileLockAsync } from "../sys/file-lock";
import { mkdirs } from "../sys/mkdirs";
import type { Uplink } from "./uplink";

const RUN_DIR = "/run/netkit-cni";
const PACING_DIR = path.join(RUN_DIR, "pacing");
/** One lock for every network: the uplink is the node's. */
const PACING_LOCK = path.join(RUN_DIR, "pacing.lock");
const LOCK_TIMEOUT_MS = 10_000;
/** The major number of the root qdisc we attach ("NK"): what we may delete again. */
export const OUR_MAJOR = 0x4e4b;

/** What the uplink's qdiscs do for departure times. */
type UplinkPacing =
  | { state: "paces"; ours: boolean; description: string }
  | { state: "default"; description: string }
  | { state: "foreign"; description: string };

/** Reads the uplink's qdiscs: pacing already, the kernel's default, or someone else's. */
export function pacingOf(qdiscs: Qdisc[]): UplinkPacing {
  const root = qdiscs.find((q) => q.parent === TC_H_ROOT);
  if (!root) return { state: "default", description: "no root qdisc" };
  const children = qdiscs.filter((q) => q.parent !== TC_H_ROOT && tcMajor(q.parent) === tcMajor(root.handle));
  const name = `${root.kind} ${tcMajor(root.handle).toString(16)}:`;
  const ours = tcMajor(root.handle) === OUR_MAJOR;
  if (root.kind === "fq") return { state: "paces", ours, description: name };
  if (root.kind === "mq" && children.length > 0 && children.every((c) => c.kind === "fq")) {
    return { state: "paces", ours, description: `${name} with ${children.length} fq` };
  }
  if (root.handle === 0) return { state: "default", description: `the default ${root.kind}` };
  // Ours but not pacing (an mq half made when a process died): ours to make again.
  if (ours) return { state: "default", description: `${name} (ours, not pacing)` };
  return { state: "foreign", description: name };
}

/**
 * This namespace's name in the folder: its inode (what a namespace's next owner shares)
 * and its cookie (what it never does). `host` is a socket in this process's namespace.
 */
function namespaceKey(host: RtnlSocket): NamespaceKey {
  const inode = fs.statSync("/proc/self/ns/net").ino;
  return { inode, prefix: `${inode}-${host.netnsCookie()}-` };
}

interface NamespaceKey {
  inode: number;
  /** What every folder and note of this namespace's starts with: `<inode>-<cookie>-`. */
  prefix: string;
}

const uplinkDir = (ns: NamespaceKey, ifindex: number) => path.join(PACING_DIR, `${ns.prefix}${ifindex}`);
const offNote = (ns: NamespaceKey, ifindex: number) => path.join(PACING_DIR, `${ns.prefix}${ifindex}.off`);
/** `<inode>-<cookie>-<ifindex>` or, written before cookies were named, `<inode>-<ifindex>`. */
const ENTRY_NAME = /^(\d+)-(?:(\d+)-)?(\d+)(\.off)?$/;

/**
 * Makes the uplink pace departures for the pod behind `hostDevice` and says how its egress
 * limit is to be enforced. Never fails the ADD for want of fq: the answer is then policing.
 * The caller registers `releasePacing` as the undo before calling.
 */
export async function paceUplink(host: RtnlSocket, uplink: Uplink, hostDevice: string): Promise<EgressEnforcement> {
  const ns = namespaceKey(host);
  return underPacingLock(async () => {
    settleOwnership(ns);
    const reason = await ensurePacing(host, uplink);
    if (reason) {
      log.warn(`egress limits on ${uplink.name} are policed: ${reason}`);
      writeNote(offNote(ns, uplink.index), { uplink: uplink.name, reason });
      return { mode: "police" };
    }
    mkdirs(uplinkDir(ns, uplink.index), 0o700);
    fs.writeFileSync(path.join(uplinkDir(ns, uplink.index), hostDevice), "", { mode: 0o600 });
    fs.rmSync(offNote(ns, uplink.index), { force: true });
    return { mode: "edt", pacedIfindex: uplink.index };
  });
}

/** undefined once the uplink paces; otherwise why it cannot. */
async function ensurePacing(host: RtnlSocket, uplink: Uplink): Promise<string | undefined> {
  const now = pacingOf(await listQdiscs(host, uplink.index));
  if (now.state === "paces") return undefined;
  if (now.state === "foreign") {
    return `${uplink.name} has the qdisc ${now.description}, which is not ours to replace and does not pace departures`;
  }
  const queues = uplink.txQueues ?? 1;
  try {
    await deleteQdisc(host, uplink.index, TC_H_ROOT, tcHandle(OUR_MAJOR, 0));
    if (queues > 1) {
      await addQdisc(host, { ifindex: uplink.index, parent: TC_H_ROOT, handle: tcHandle(OUR_MAJOR, 0), kind: "mq" });
      for (let q = 1; q <= queues; q++) {
        const parent = tcHandle(OUR_MAJOR, q);
        await addQdisc(host, { ifindex: uplink.index, parent, handle: 0, kind: "fq" }, true);
      }
    } else {
      await addQdisc(host, { ifindex: uplink.index, parent: TC_H_ROOT, handle: tcHandle(OUR_MAJOR, 0), kind: "fq" });
    }
  } catch (e) {
    // Half an mq is no pacing: give the device its default back.
    await deleteQdisc(host, uplink.index, TC_H_ROOT, tcHandle(OUR_MAJOR, 0)).catch(() => false);
    return `cannot attach fq to ${uplink.name}: ${(e as Error).message}`;
  }
  log.info(`uplink ${uplink.name}: ${queues > 1 ? `mq with fq on each of ${queues} queues` : "fq"} paces departures`);
  return undefined;
}

/**
 * The pod behind `hostDevice` no longer needs pacing (DEL, a failed ADD): forget it, and
 * give every uplink that no live pod needs any more its default qdisc back. A pod that
 * was never paced costs one look at the folders.
 */
export async function releasePacing(host: RtnlSocket, hostDevice: string): Promise<void> {
  if (!fs.existsSync(PACING_DIR)) return;
  const ns = namespaceKey(host);
  // A folder from before cookies were named counts too: the pod may have been paced by it.
  const mayHold = (dir: string) => fs.existsSync(path.join(dir, hostDevice));
  if (!pacingDirs(ns).some(mayHold) && !unkeyedDirs(ns).some(mayHold)) return;
  await underPacingLock(async () => {
    settleOwnership(ns);
    for (const dir of pacingDirs(ns)) fs.rmSync(path.join(dir, hostDevice), { force: true });
    await releaseUnused(host, ns);
  });
}

/** GC's half: uplinks whose paced pods are all gone get their default qdisc back. */
export async function releaseUnusedPacing(host: RtnlSocket): Promise<void> {
  if (!fs.existsSync(PACING_DIR)) return;
  const ns = namespaceKey(host);
  await underPacingLock(() => {
    settleOwnership(ns);
    return releaseUnused(host, ns);
  });
}

async function releaseUnused(host: RtnlSocket, ns: NamespaceKey): Promise<void> {
  const dirs = pacingDirs(ns);
  if (dirs.length === 0) return;
  const live = new Set((await listLinks(host)).map((l) => l.name));
  for (const dir of dirs) {
    for (const device of fs.readdirSync(dir)) {
      if (!live.has(device)) fs.rmSync(path.join(dir, device), { force: true });
    }
    if (fs.readdirSync(dir).length > 0) continue;
    const ifindex = Number(path.basename(dir).slice(ns.prefix.length));
    const now = pacingOf(await listQdiscs(host, ifindex));
    // Only our own root goes; an fq someone else attached is theirs.
    if (now.state === "paces" && now.ours) {
      await deleteQdisc(host, ifindex, TC_H_ROOT, tcHandle(OUR_MAJOR, 0));
      log.info(`uplink ifindex ${ifindex}: no paced pod left, default qdisc restored`);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** This namespace's uplink folders. */
function pacingDirs(ns: NamespaceKey): string[] {
  return fs
    .readdirSync(PACING_DIR, { withFileTypes: true })
    .filter((e) => e.isDirectory() && e.name.startsWith(ns.prefix))
    .map((e) => path.join(PACING_DIR, e.name));
}

/** Named by this namespace's inode alone: written before cookies were named. */
function isUnkeyed(name: string, ns: NamespaceKey): boolean {
  const m = ENTRY_NAME.exec(name);
  return m?.[1] === String(ns.inode) && m[2] === undefined;
}

/** This namespace's folders from before cookies were named. */
function unkeyedDirs(ns: NamespaceKey): string[] {
  return fs
    .readdirSync(PACING_DIR, { withFileTypes: true })
    .filter((e) => e.isDirectory() && isUnkeyed(e.name, ns))
    .map((e) => path.join(PACING_DIR, e.name));
}

/**
 * Under the pacing lock: drops what this namespace's inode's previous owners left (their
 * uplinks went with them) and adopts what this namespace wrote before cookies were named,
 * merging it into the cookie's folder. Afterwards every entry under this inode is ours.
 */
function settleOwnership(ns: NamespaceKey): void {
  if (!fs.existsSync(PACING_DIR)) return;
  for (const name of fs.readdirSync(PACING_DIR)) {
    const m = ENTRY_NAME.exec(name);
    if (!m || m[1] !== String(ns.inode) || name.startsWith(ns.prefix)) continue;
    const from = path.join(PACING_DIR, name);
    const [, , cookie, ifindex, off] = m;
    if (cookie !== undefined) {
      log.info(`pacing: dropping ${name}, left by a namespace gone before this one took its inode`);
      fs.rmSync(from, { recursive: true, force: true });
    } else if (off) {
      fs.renameSync(from, offNote(ns, Number(ifindex)));
    } else {
      const to = uplinkDir(ns, Number(ifindex));
      mkdirs(to, 0o700);
      for (const device of fs.readdirSync(from)) fs.renameSync(path.join(from, device), path.join(to, device));
      fs.rmSync(from, { recursive: true, force: true });
    }
  }
}

/** CHECK: a pod paced through `ifindex` needs that device to pace still. */
export async function pacingProblem(host: RtnlSocket, ifindex: number): Promise<string | undefined> {
  const now = pacingOf(await listQdiscs(host, ifindex));
  if (now.state === "paces") return undefined;
  return `egress is paced by departure times through ifindex ${ifindex}, whose qdisc (${now.description}) no longer paces them`;
}

export interface PacingOff {
  uplink: string;
  reason: string;
}

/** Why egress limits on this namespace's uplinks are policed, from the last ADD that tried. */
export function readPacingOff(host: RtnlSocket): PacingOff[] {
  if (!fs.existsSync(PACING_DIR)) return [];
  const ns = namespaceKey(host);
  // Ours, or ours from before cookies were named (the next verb under the lock adopts it).
  return fs
    .readdirSync(PACING_DIR)
    .filter((name) => name.endsWith(".off") && (name.startsWith(ns.prefix) || isUnkeyed(name, ns)))
    .flatMap((name) => {
      try {
        const note = JSON.parse(fs.readFileSync(path.join(PACING_DIR, name), "utf8")) as Partial<PacingOff>;
        return typeof note.reason === "string" ? [{ uplink: note.uplink ?? "?", reason: note.reason }] : [];
      } catch {
        return [];
      }
    });
}

function writeNote(file: string, note: PacingOff): void {
  mkdirs(path.dirname(file), 0o700);
  fs.writeFileSync(`${file}.${process.pid}`, JSON.stringify(note), { mode: 0o600 });
  fs.renameSync(`${file}.${process.pid}`, file);
}

async function underPacingLock<T>(fn: () => Promise<T>): Promise<T> {
  mkdirs(RUN_DIR, 0o700);
  try {
    return await withFileLockAsync(PACING_LOCK, LOCK_TIMEOUT_MS, fn);
  } catch (e) {
    if (e instanceof LockTimeoutError) {
      throw new CniError(ErrorCode.TryAgainLater, `uplink pacing is busy: ${e.message}; try again later`);
    }
    throw e;
  }
}
