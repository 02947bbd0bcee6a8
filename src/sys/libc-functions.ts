/**
 * The libc functions the product calls, each declared once with its C types, and the
 * shape of a foreign-function backend that binds them (foreign.ts chooses one).
 * Declarations only: no module here loads an FFI.
 */

/**
 * How a JavaScript value crosses into C:
 * - i32, u64, i64: a number;
 * - address: a bigint, an address in native memory (native-memory.ts);
 * - bytes: a Buffer the function only reads (ffi-rs passes a copy);
 * - cstring: a string, passed NUL-terminated.
 */
export type CArg = "i32" | "i64" | "u64" | "address" | "bytes" | "cstring";

export interface CSignature {
  readonly args: readonly CArg[];
  /** Every function here returns an integer, -1 (or negative) with errno set on failure. */
  readonly returns: "i32" | "i64";
}

export const LIBC_FUNCTIONS = {
  setns: { args: ["i32", "i32"], returns: "i32" },
  setsockopt: { args: ["i32", "i32", "i32", "bytes", "i32"], returns: "i32" },
  getsockopt: { args: ["i32", "i32", "i32", "address", "address"], returns: "i32" },
  flock: { args: ["i32", "i32"], returns: "i32" },
  // Variadic in C; the requests we make take no argument.
  ioctl: { args: ["i32", "u64"], returns: "i32" },
  mount: { args: ["cstring", "cstring", "cstring", "u64", "cstring"], returns: "i32" },
  poll: { args: ["bytes", "u64", "i32"], returns: "i32" },
  isatty: { args: ["i32"], returns: "i32" },
  clock_gettime: { args: ["i32", "address"], returns: "i32" },
  // syscall(SYS_bpf, cmd, attr, size): glibc has no bpf() wrapper.
  syscall: { args: ["i64", "i32", "address", "u64"], returns: "i64" },
  socket: { args: ["i32", "i32", "i32"], returns: "i32" },
  bind: { args: ["i32", "bytes", "i32"], returns: "i32" },
  connect: { args: ["i32", "bytes", "i32"], returns: "i32" },
  send: { args: ["i32", "bytes", "u64", "i32"], returns: "i64" },
  recv: { args: ["i32", "address", "u64", "i32"], returns: "i64" },
  close: { args: ["i32"], returns: "i32" },
} as const satisfies Record<string, CSignature>;

export type LibcFunction = keyof typeof LIBC_FUNCTIONS;

/** What a call returned, and errno (meaningful only when `value` is negative). */
export interface CResult {
  value: number;
  errno: number;
}

/** Zeroed memory both sides see: `bytes` for JavaScript, `address` for C. */
export interface NativeMemory {
  readonly bytes: Buffer;
  readonly address: bigint;
  /** Gives the memory back; `bytes` must not be used after. */
  release(): void;
}

export interface ForeignBackend {
  readonly name: "bun:ffi" | "ffi-rs";
  call(fn: LibcFunction, args: readonly unknown[]): CResult;
  alloc(size: number): NativeMemory;
  /** strerror(3): the C library's text for an errno ("Bad file descriptor"). */
  describe(errno: number): string;
}
