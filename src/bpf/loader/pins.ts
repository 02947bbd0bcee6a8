/**
 * The bpf filesystem: make sure one is mounted at our root, pin objects (maps, links)
 * under it, open and remove pins. A pin keeps its object alive after every fd is closed;
 * removing the pin (and closing fds) releases it. Never decides *what* to pin where
 * beyond the directory layout below the root.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { objGet, objPin } from "../../sys/bpf-syscall";
import { mountBpffs } from "../../sys/libc";
import { mkdirs } from "../../sys/mkdirs";

const BPF_FS_MAGIC = 0xcafe4a11;
const ROOT_MODE = 0o700;

export function isBpffs(dir: string): boolean {
  try {
    return fs.statfsSync(dir).type === BPF_FS_MAGIC;
  } catch {
    return false;
  }
}

/**
 * Makes `root` usable for pins: reused when it is on a bpffs already (/sys/fs/bpf, a
 * directory inside it, or our own earlier mount); created (0700) inside a bpffs parent;
 * otherwise created and given its own bpffs mount (mode 0700). Returns true when this
 * call mounted one. A root below an unmounted /sys/fs/bpf fails at mkdir (sysfs refuses
 * it): ensure /sys/fs/bpf itself first.
 */
export function ensureBpffs(root: string): boolean {
  if (isBpffs(root)) return false;
  mkdirs(root, ROOT_MODE);
  if (isBpffs(root)) return false; // a directory inside an existing bpffs
  mountBpffs(root, ROOT_MODE);
  return true;
}

/** A node's bpffs root made ready: /sys/fs/bpf itself may be unmounted (minimal hosts),
 * and a root inside it needs it mounted. */
export function ensureBpffsRoot(root: string): void {
  if (root.startsWith("/sys/fs/bpf/") && !isBpffs("/sys/fs/bpf")) ensureBpffs("/sys/fs/bpf");
  ensureBpffs(root);
}

/**
 * The agent's side of the root: on a bpffs the node mounted, or a directory made inside
 * one. The agent never mounts one itself: it runs in a container of its own, where a
 * mount stays (HostToContainer), so its maps would be ones no pod's program reads while
 * it reports policies enforced. Systemd mounts /sys/fs/bpf at boot; elsewhere the node's
 * first ADD does, or an admin (docs/agent.md).
 */
export function requireNodeBpffs(root: string): void {
  if (isBpffs(root)) return;
  let dir = path.dirname(root);
  while (!fs.existsSync(dir) && dir !== path.dirname(dir)) dir = path.dirname(dir);
  if (!isBpffs(dir)) {
    throw new Error(
      `${root} is on no bpf filesystem: the node must mount one at /sys/fs/bpf (systemd does at boot; else mount -t bpf bpf /sys/fs/bpf), since one mounted inside the agent's container reaches no pod's programs`,
    );
  }
  mkdirs(root, ROOT_MODE);
}

/** Pins `fd` at `pinPath`, creating parent directories (0700) inside the bpffs. */
export function pinObject(fd: number, pinPath: string): void {
  mkdirs(path.dirname(pinPath), ROOT_MODE);
  objPin(fd, pinPath);
}

/** Pins `fd` at `pinPath`, replacing whatever is pinned there. */
export function replacePin(fd: number, pinPath: string): void {
  unpin(pinPath);
  pinObject(fd, pinPath);
}

/** A new fd for the pinned object. */
export function openPin(pinPath: string): number {
  return objGet(pinPath);
}

/** Removes a pin; false when there was none. */
export function unpin(pinPath: string): boolean {
  try {
    fs.unlinkSync(pinPath);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw e;
  }
}

export function pinExists(pinPath: string): boolean {
  return fs.existsSync(pinPath);
}
