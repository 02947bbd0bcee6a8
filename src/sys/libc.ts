/**
 * The few libc calls Node does not offer: setns, setsockopt, getsockopt, flock, ioctl,
 * mount, poll, isatty, made through the runtime's foreign-function backend (foreign.ts). Owns nothing
 * else (bpf(2) is bpf-syscall.ts's). Every call is synchronous and reports failure as an
 * ErrnoError carrying errno and the C function's name.
 */
import { callLibc, describeErrno, type LibcFunction } from "./foreign";
import { withNative } from "./native-memory";

export class ErrnoError extends Error {
  constructor(
    readonly call: string,
    readonly errno: number,
    detail: string,
  ) {
    super(`${call}: ${detail}`);
    this.name = "ErrnoError";
  }
}

/** The ErrnoError for a failed call; `subject` (e.g. a path) goes into its text. */
function errnoError(fn: string, errno: number, subject?: string): ErrnoError {
  const call = subject === undefined ? fn : `${fn}(${subject})`;
  return new ErrnoError(call, errno, describeErrno(errno));
}

/** Calls a libc function and throws ErrnoError when it fails (returns -1). */
export function callOrThrow(fn: LibcFunction, args: unknown[], subject?: string): number {
  const r = callLibc(fn, ...args);
  if (r.value < 0) throw errnoError(fn, r.errno, subject);
  return r.value;
}

export const CLONE_NEWNET = 0x40000000;

export function setns(fd: number, nstype: number): void {
  callOrThrow("setns", [fd, nstype]);
}

export function setsockoptInt(fd: number, level: number, optname: number, value: number): void {
  const buf = Buffer.alloc(4);
  buf.writeInt32LE(value);
  callOrThrow("setsockopt", [fd, level, optname, buf, 4]);
}

/** getsockopt(2) of an option whose value is a u64 (SO_NETNS_COOKIE). */
export function getsockoptU64(fd: number, level: number, optname: number): bigint {
  return withNative((mem) => {
    const value = mem.alloc(8);
    const length = mem.alloc(4);
    length.bytes.writeUInt32LE(8);
    callOrThrow("getsockopt", [fd, level, optname, value.address, length.address]);
    return value.bytes.readBigUInt64LE(0);
  });
}

export const LOCK_SH = 1;
export const LOCK_EX = 2;
export const LOCK_NB = 4;
export const LOCK_UN = 8;

/** flock(2); returns false instead of throwing when LOCK_NB and the lock is held. */
export function flock(fd: number, operation: number): boolean {
  try {
    callOrThrow("flock", [fd, operation]);
    return true;
  } catch (e) {
    if (e instanceof ErrnoError && e.errno === 11 /* EWOULDBLOCK */) return false;
    throw e;
  }
}

const NS_GET_NSTYPE = 0xb703;

/** The CLONE_NEW* type of a namespace file descriptor (ioctl NS_GET_NSTYPE); -1 if not one. */
export function namespaceType(fd: number): number {
  const r = callLibc("ioctl", fd, NS_GET_NSTYPE);
  return r.value < 0 ? -1 : r.value;
}

/** mount -t bpf bpf <target> -o mode=<mode> (the bpf filesystem has no device). */
export function mountBpffs(target: string, mode: number): void {
  callOrThrow("mount", ["bpf", target, "bpf", 0, `mode=${mode.toString(8)}`], target);
}

const POLLIN = 0x001;
const POLLOUT = 0x004;
const EINTR = 4;

/**
 * Waits until `fd` can be read (or written, with `forWrite`): poll(2) on one descriptor,
 * for a descriptor the runtime left non-blocking, where read(2) says EAGAIN instead of
 * waiting. Returns when the descriptor is ready or has hung up.
 */
export function waitReady(fd: number, forWrite = false): void {
  const pollfd = Buffer.alloc(8);
  pollfd.writeInt32LE(fd, 0);
  pollfd.writeInt16LE(forWrite ? POLLOUT : POLLIN, 4);
  for (;;) {
    const r = callLibc("poll", pollfd, 1, -1);
    if (r.value >= 0) return;
    if (r.errno !== EINTR) throw errnoError("poll", r.errno);
  }
}

/** isatty(3): whether `fd` is a terminal. */
export function isTerminal(fd: number): boolean {
  return callLibc("isatty", fd).value === 1;
}
