/**
 * foreign.ts's functions through ffi-rs, for Node. ffi-rs copies the Buffers it passes, so
 * memory the kernel writes into (verifier logs, looked-up values, attr fields the kernel
 * fills) is calloc()ed: a zero-copy Buffer view of it comes from ffi-rs
 * createExternalBuffer, and its numeric address from memset(p, 0, 0), which returns its
 * first argument.
 */
import type * as FfiRs from "ffi-rs";
import { type CArg, type CResult, type ForeignBackend, LIBC_FUNCTIONS, type LibcFunction } from "./libc-functions";

const LIBRARY = "libc";

export function ffiRsBackend(): ForeignBackend {
  // Required here, not imported: the module loads the addon, which only Node uses.
  const ffi = require("ffi-rs") as typeof FfiRs;
  ffi.open({ library: LIBRARY, path: "libc.so.6" });
  const T = ffi.DataType;
  const ARG_TYPE: Record<CArg, FfiRs.DataType> = {
    i32: T.I32,
    i64: T.I64,
    u64: T.U64,
    address: T.BigInt,
    bytes: T.U8Array,
    cstring: T.String,
  };
  const signatures = Object.fromEntries(
    Object.entries(LIBC_FUNCTIONS).map(([name, sig]) => [
      name,
      { paramsType: sig.args.map((a) => ARG_TYPE[a]), retType: sig.returns === "i64" ? T.I64 : T.I32 },
    ]),
  ) as Record<LibcFunction, { paramsType: FfiRs.DataType[]; retType: FfiRs.DataType }>;

  const load = (funcName: string, retType: FfiRs.DataType, paramsType: FfiRs.DataType[], paramsValue: unknown[]) =>
    ffi.load({ library: LIBRARY, funcName, retType, paramsType, paramsValue });

  return {
    name: "ffi-rs",
    call(fn: LibcFunction, args: readonly unknown[]): CResult {
      const sig = signatures[fn];
      const r = ffi.load({
        library: LIBRARY,
        funcName: fn,
        retType: sig.retType,
        paramsType: sig.paramsType,
        paramsValue: [...args],
        errno: true,
      }) as unknown as { value: number; errnoCode: number };
      return { value: r.value, errno: r.value < 0 ? r.errnoCode : 0 };
    },
    alloc(size: number) {
      const pointer = load("calloc", T.External, [T.U64, T.U64], [1, size]) as FfiRs.JsExternal;
      if (ffi.isNullPointer(pointer)) throw new Error(`calloc(${size}) failed`);
      const bytes = ffi.createExternalBuffer(pointer, size);
      const address = load("memset", T.BigInt, [T.External, T.I32, T.U64], [pointer, 0, 0]) as unknown as bigint;
      let released = false;
      return {
        bytes,
        address,
        release: () => {
          if (released) return;
          released = true;
          load("free", T.Void, [T.External], [pointer]);
        },
      };
    },
    describe(errno: number): string {
      return load("strerror", T.String, [T.I32], [errno]) as unknown as string;
    },
  };
}
