/**
 * Entering a network namespace and coming back. setns() moves only the calling thread,
 * and Node runs our JavaScript on the main thread, so `inNetns` runs a *synchronous*
 * callback inside the namespace and always restores the original one before returning.
 * It must never be given an async function: an await inside would let other code run
 * in the wrong namespace. Sockets opened inside stay bound to that namespace after we
 * leave, which is how the rest of the code talks to a pod's netns without staying in it.
 */
import * as fs from "node:fs";
import { CLONE_NEWNET, ErrnoError, getsockoptU64, namespaceType, setns } from "./libc";

export class NetnsNotFoundError extends Error {
  constructor(
    readonly netnsPath: string,
    reason: string,
  ) {
    super(`network namespace ${netnsPath}: ${reason}`);
    this.name = "NetnsNotFoundError";
  }
}

/** Opens a netns file, refusing anything that is not a network namespace. */
export function openNetns(netnsPath: string): number {
  let fd: number;
  try {
    fd = fs.openSync(netnsPath, fs.constants.O_RDONLY);
  } catch (e) {
    throw new NetnsNotFoundError(netnsPath, (e as NodeJS.ErrnoException).code ?? String(e));
  }
  try {
    // setns with CLONE_NEWNET on a non-netns fd fails with EINVAL; check first so the
    // caller gets a clear message rather than a failed switch half-way through.
    if (!isNetnsFd(fd)) throw new NetnsNotFoundError(netnsPath, "not a network namespace");
    return fd;
  } catch (e) {
    fs.closeSync(fd);
    throw e;
  }
}

const isNetnsFd = (fd: number) => namespaceType(fd) === CLONE_NEWNET;

/** Runs `fn` with the calling thread inside the namespace open on `netnsFd`. */
export function inNetnsFd<T>(netnsFd: number, fn: () => T): T {
  const home = fs.openSync("/proc/thread-self/ns/net", fs.constants.O_RDONLY);
  try {
    setns(netnsFd, CLONE_NEWNET);
    try {
      const result = fn();
      if (result instanceof Promise) {
        throw new Error("inNetns callback must be synchronous");
      }
      return result;
    } finally {
      restore(home);
    }
  } finally {
    fs.closeSync(home);
  }
}

/** Runs `fn` inside the namespace at `netnsPath` (a /proc/<pid>/ns/net or /run/netns file). */
export function inNetns<T>(netnsPath: string, fn: () => T): T {
  const fd = openNetns(netnsPath);
  try {
    return inNetnsFd(fd, fn);
  } finally {
    fs.closeSync(fd);
  }
}

function restore(home: number): void {
  try {
    setns(home, CLONE_NEWNET);
  } catch (e) {
    // Staying in the pod's namespace would make every later step act on the wrong
    // network; there is no safe way to continue.
    const why = e instanceof ErrnoError ? e.message : String(e);
    process.stderr.write(`netkit-cni: cannot return to the host network namespace (${why})\n`);
    process.exit(70);
  }
}

/**
 * Whether the netns open on `netnsFd` is the one this process runs in: the node's own,
 * however it is named (/proc/1/ns/net, /proc/self/ns/net, a bind mount of either). A
 * namespace is its nsfs inode, so the device and inode numbers decide, not the path.
 */
export function isOwnNetns(netnsFd: number): boolean {
  const theirs = fs.fstatSync(netnsFd);
  const ours = fs.statSync("/proc/self/ns/net");
  return theirs.dev === ours.dev && theirs.ino === ours.ino;
}

const SOL_SOCKET = 1;
const SO_NETNS_COOKIE = 71;

/**
 * The cookie of the network namespace the socket open on `socketFd` was created in
 * (SO_NETNS_COOKIE, Linux 5.14+): the kernel's own name for a namespace, never reused
 * while the system runs, and what bpf_get_netns_cookie() gives BPF programs.
 */
export function netnsCookieOf(socketFd: number): bigint {
  return getsockoptU64(socketFd, SOL_SOCKET, SO_NETNS_COOKIE);
}
