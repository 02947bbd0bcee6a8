/**
 * The libc functions the product calls (declared in libc-functions.ts), bound by the
 * foreign-function interface of the runtime that runs us:
 * - under Bun, bun:ffi: compiled trampolines, under a microsecond a call and nothing to
 *   load (foreign-bun.ts);
 * - under Node, ffi-rs: a native addon, loaded from the executable's assets
 *   (foreign-ffi-rs.ts).
 * Also native memory: bytes that JavaScript and C share, with the numeric address that
 * structures the kernel reads (bpf attrs) point to.
 * Knows no meaning of any call: libc.ts, bpf-syscall.ts, netlink-fd.ts and clock.ts give
 * them one. Every call is synchronous and made on the main thread.
 */
import { bunBackend } from "./foreign-bun";
import { ffiRsBackend } from "./foreign-ffi-rs";
import type { CResult, ForeignBackend, LibcFunction } from "./libc-functions";

export type { CResult, ForeignBackend, LibcFunction, NativeMemory } from "./libc-functions";

let backend: ForeignBackend | undefined;

function choose(): ForeignBackend {
  // Each backend loads its FFI only when chosen: the Bun executable carries no ffi-rs at
  // all, and Node has no bun:ffi.
  return (globalThis as { Bun?: unknown }).Bun !== undefined ? bunBackend() : ffiRsBackend();
}

/** The backend of this runtime, bound on first use. */
export function foreign(): ForeignBackend {
  backend ??= choose();
  return backend;
}

/** Calls a libc function; the caller turns a negative value and errno into its error. */
export function callLibc(fn: LibcFunction, ...args: unknown[]): CResult {
  return foreign().call(fn, args);
}

/** The C library's text for an errno, as strerror(3) gives it. */
export function describeErrno(errno: number): string {
  return foreign().describe(errno);
}
