/**
 * foreign.ts's functions through bun:ffi, Bun's own interface: dlopen() compiles a
 * trampoline per function once (about half a millisecond for all of them), and a call
 * costs well under a microsecond. A Buffer passes as a pointer to its own bytes, so native
 * memory is a Buffer whose address bun:ffi reports; the garbage collector does not move
 * it while it is referenced, and NativeBuffer keeps that reference.
 */
import { type CArg, type CResult, type ForeignBackend, LIBC_FUNCTIONS, type LibcFunction } from "./libc-functions";

/** The part of bun:ffi we use (Bun's types are not a dependency). */
interface BunFfi {
  dlopen(
    path: string,
    symbols: Record<string, { args: string[]; returns: string }>,
  ): { symbols: Record<string, (...args: unknown[]) => number> };
  ptr(view: ArrayBufferView): number;
  read: { i32(address: number, offset: number): number };
}

/** bun:ffi's name of each C type; a pointer passes as a Buffer or as a number. */
const ARG_TYPE: Record<CArg, string> = {
  i32: "i32",
  i64: "i64",
  u64: "u64",
  address: "ptr",
  bytes: "ptr",
  cstring: "ptr",
};

/** Our values as bun:ffi takes them: addresses as numbers, strings NUL-terminated. */
function converter(type: CArg): ((v: unknown) => unknown) | undefined {
  if (type === "address") return (v) => Number(v as bigint);
  if (type === "cstring") return (v) => Buffer.from(`${v as string}\0`, "utf8");
  return undefined;
}

export function bunBackend(): ForeignBackend {
  const ffi = require("bun:ffi") as BunFfi;
  const symbols: Record<string, { args: string[]; returns: string }> = {
    __errno_location: { args: [], returns: "ptr" },
    strerror: { args: ["i32"], returns: "cstring" },
  };
  for (const [name, sig] of Object.entries(LIBC_FUNCTIONS)) {
    // i64_fast: a number (our results are sizes and descriptors), not a BigInt.
    symbols[name] = { args: sig.args.map((a) => ARG_TYPE[a]), returns: sig.returns === "i64" ? "i64_fast" : "i32" };
  }
  const lib = ffi.dlopen("libc.so.6", symbols).symbols;
  // errno is thread-local; its address for the main thread, where every call is made.
  const errnoAt = (lib.__errno_location as () => number)();
  const converters = Object.fromEntries(
    Object.entries(LIBC_FUNCTIONS).map(([name, sig]) => [name, sig.args.map(converter)]),
  ) as Record<LibcFunction, ((v: unknown) => unknown)[]>;

  return {
    name: "bun:ffi",
    call(fn: LibcFunction, args: readonly unknown[]): CResult {
      const convert = converters[fn];
      const cArgs = args.map((v, i) => {
        const c = convert[i];
        return c ? c(v) : v;
      });
      const value = (lib[fn] as (...a: unknown[]) => number)(...cArgs);
      // Read before anything else runs on this thread and could set errno again.
      const errno = value < 0 ? ffi.read.i32(errnoAt, 0) : 0;
      return { value, errno };
    },
    alloc(size: number) {
      const bytes = Buffer.alloc(size);
      const address = BigInt(ffi.ptr(bytes));
      // The garbage collector frees the bytes once nothing references them.
      return { bytes, address, release: () => {} };
    },
    describe(errno: number): string {
      // A CString: a string read from the C one on return.
      return String((lib.strerror as (e: number) => unknown)(errno));
    },
  };
}
