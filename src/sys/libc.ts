/**
 * The few libc calls Node does not offer, made through ffi-rs: setns, setsockopt, flock,
 * ioctl, mount. Owns nothing else (bpf(2) is bpf-syscall.ts's). Every call is synchronous
 * and reports failure as an ErrnoError carrying errno and the C function's name.
 */
import * as ffi from "ffi-rs";

let opened = false;

/** The ffi-rs name of libc, opened on first use; native-memory.ts and bpf(2) load from it too. */
export function libc(): string {
  if (!opened) {
    ffi.open({ library: "libc", path: "libc.so.6" });
    opened = true;
  }
  return "libc";
}

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

/** Calls an int-returning libc function; `subject` (e.g. a path) goes into the error. */
function callInt(funcName: string, paramsType: ffi.DataType[], paramsValue: unknown[], subject?: string): number {
  const r = ffi.load({
    library: libc(),
    funcName,
    retType: ffi.DataType.I32,
    paramsType,
    paramsValue,
    errno: true,
  }) as unknown as { value: number; errnoCode: number; errnoMessage: string };
  if (r.value === -1) {
    const call = subject === undefined ? funcName : `${funcName}(${subject})`;
    throw new ErrnoError(call, r.errnoCode, r.errnoMessage.replace(/ \(os error \d+\)$/, ""));
  }
  return r.value;
}

export const CLONE_NEWNET = 0x40000000;

export function setns(fd: number, nstype: number): void {
  callInt("setns", [ffi.DataType.I32, ffi.DataType.I32], [fd, nstype]);
}

export function setsockoptInt(fd: number, level: number, optname: number, value: number): void {
  const buf = Buffer.alloc(4);
  buf.writeInt32LE(value);
  callInt(
    "setsockopt",
    [ffi.DataType.I32, ffi.DataType.I32, ffi.DataType.I32, ffi.DataType.U8Array, ffi.DataType.I32],
    [fd, level, optname, buf, 4],
  );
}

export const LOCK_SH = 1;
export const LOCK_EX = 2;
export const LOCK_NB = 4;
export const LOCK_UN = 8;

/** flock(2); returns false instead of throwing when LOCK_NB and the lock is held. */
export function flock(fd: number, operation: number): boolean {
  try {
    callInt("flock", [ffi.DataType.I32, ffi.DataType.I32], [fd, operation]);
    return true;
  } catch (e) {
    if (e instanceof ErrnoError && e.errno === 11 /* EWOULDBLOCK */) return false;
    throw e;
  }
}

const NS_GET_NSTYPE = 0xb703;

/** The CLONE_NEW* type of a namespace file descriptor (ioctl NS_GET_NSTYPE); -1 if not one. */
export function namespaceType(fd: number): number {
  try {
    return callInt("ioctl", [ffi.DataType.I32, ffi.DataType.I32], [fd, NS_GET_NSTYPE]);
  } catch {
    return -1;
  }
}

/** mount -t bpf bpf <target> -o mode=<mode> (the bpf filesystem has no device). */
export function mountBpffs(target: string, mode: number): void {
  const S = ffi.DataType.String;
  callInt("mount", [S, S, S, ffi.DataType.U64, S], ["bpf", target, "bpf", 0, `mode=${mode.toString(8)}`], target);
}

export const MNT_DETACH = 2;

export function unmount(target: string, flags = 0): void {
  callInt("umount2", [ffi.DataType.String, ffi.DataType.I32], [target, flags], target);
}

const POLLIN = 0x001;
const POLLOUT = 0x004;

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
    try {
      callInt("poll", [ffi.DataType.U8Array, ffi.DataType.U64, ffi.DataType.I32], [pollfd, 1, -1]);
      return;
    } catch (e) {
      if (!((e instanceof ErrnoError && e.errno === 4) /* EINTR */)) throw e;
    }
  }
}

/** isatty(3): whether `fd` is a terminal. */
export function isTerminal(fd: number): boolean {
  const r = ffi.load({
    library: libc(),
    funcName: "isatty",
    retType: ffi.DataType.I32,
    paramsType: [ffi.DataType.I32],
    paramsValue: [fd],
  }) as unknown as number;
  return r === 1;
}
