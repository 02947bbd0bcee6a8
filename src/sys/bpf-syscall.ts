/**
 * The bpf(2) system call and nothing above it: the uapi numbers and `union bpf_attr`
 * layouts we use (checked against /usr/include/linux/bpf.h by test/bpf/uapi-layout.test.ts),
 * one typed function per command, and the native memory the kernel reads and writes
 * through the pointers in an attr. Knows nothing about ELF, maps by name or programs by
 * purpose. Every call is synchronous; failures throw BpfError with errno.
 *
 * Native memory: ffi-rs copies Buffers it passes as U8Array, so memory the kernel must
 * write into (verifier log, looked-up values, test-run output, attr fields the kernel
 * fills) cannot be a Node Buffer. NativeBuffer allocates with libc calloc(), exposes a
 * zero-copy Buffer view (ffi-rs createExternalBuffer) and learns the numeric address by
 * passing the pointer through memset(p, 0, 0), which returns its first argument.
 * The view dangles once the memory is freed: copy results out before `free()`.
 */
import * as fs from "node:fs";
import { constants as osConstants } from "node:os";
import * as ffi from "ffi-rs";

const LIBC = "nkc-bpf-libc";
let opened = false;

function libc(): void {
  if (!opened) {
    ffi.open({ library: LIBC, path: "libc.so.6" });
    opened = true;
  }
}

// ---- uapi numbers (enum bpf_cmd, bpf_map_type, bpf_prog_type, bpf_attach_type) ----

export const BPF_CMD = {
  MAP_CREATE: 0,
  MAP_LOOKUP_ELEM: 1,
  MAP_UPDATE_ELEM: 2,
  MAP_DELETE_ELEM: 3,
  MAP_GET_NEXT_KEY: 4,
  PROG_LOAD: 5,
  OBJ_PIN: 6,
  OBJ_GET: 7,
  PROG_TEST_RUN: 10,
  PROG_GET_FD_BY_ID: 13,
  MAP_GET_FD_BY_ID: 14,
  OBJ_GET_INFO_BY_FD: 15,
  BTF_GET_FD_BY_ID: 19,
  BTF_GET_NEXT_ID: 23,
  LINK_CREATE: 28,
  LINK_UPDATE: 29,
  LINK_DETACH: 34,
} as const;
export type BpfCmd = keyof typeof BPF_CMD;

export const BPF_MAP_TYPE = {
  HASH: 1,
  ARRAY: 2,
  PERCPU_HASH: 5,
  PERCPU_ARRAY: 6,
  LRU_HASH: 9,
  LPM_TRIE: 11,
  HASH_OF_MAPS: 13,
} as const;

export const BPF_PROG_TYPE = { SCHED_CLS: 3 } as const;

export const BPF_ATTACH_TYPE = {
  TCX_INGRESS: 46,
  TCX_EGRESS: 47,
  NETKIT_PRIMARY: 54,
  NETKIT_PEER: 55,
} as const;

export const BPF_MISC = {
  PSEUDO_MAP_FD: 1,
  PSEUDO_KFUNC_CALL: 2,
  ANY: 0,
  NOEXIST: 1,
  EXIST: 2,
  F_NO_PREALLOC: 1,
  F_REPLACE: 4,
  OBJ_NAME_LEN: 16,
} as const;

/** tcx verdicts (enum tcx_action_base); netkit's enum netkit_action has the same values. */
export const TCX_VERDICT = { NEXT: -1, PASS: 0, DROP: 2, REDIRECT: 7 } as const;

// ---- layouts: byte offsets inside union bpf_attr and friends ----

export const SIZEOF = {
  "union bpf_attr": 152,
  "struct __sk_buff": 192,
  "struct bpf_map_info": 88,
  "struct bpf_btf_info": 32,
} as const;

export const ATTR = {
  MAP_CREATE: {
    map_type: 0,
    key_size: 4,
    value_size: 8,
    max_entries: 12,
    map_flags: 16,
    inner_map_fd: 20,
    map_name: 28,
  },
  MAP_ELEM: { map_fd: 0, key: 8, value: 16, next_key: 16, flags: 24 },
  PROG_LOAD: {
    prog_type: 0,
    insn_cnt: 4,
    insns: 8,
    license: 16,
    log_level: 24,
    log_size: 28,
    log_buf: 32,
    prog_name: 48,
    expected_attach_type: 68,
    fd_array: 120,
    log_true_size: 140,
  },
  OBJ: { pathname: 0, bpf_fd: 8, file_flags: 12 },
  TEST: {
    prog_fd: 0,
    retval: 4,
    data_size_in: 8,
    data_size_out: 12,
    data_in: 16,
    data_out: 24,
    repeat: 32,
    duration: 36,
    ctx_size_in: 40,
    ctx_size_out: 44,
    ctx_in: 48,
    ctx_out: 56,
  },
  INFO: { bpf_fd: 0, info_len: 4, info: 8 },
  GET_ID: { start_id: 0, next_id: 4, open_flags: 8 },
  PROG_INFO: { id: 4, jited_prog_len: 16, name: 64 },
  BTF_INFO: { btf: 0, btf_size: 8, id: 12, name: 16, name_len: 24, kernel_btf: 28 },
  LINK_CREATE: { prog_fd: 0, target_ifindex: 4, attach_type: 8, flags: 12, relative_fd: 16, expected_revision: 24 },
  LINK_UPDATE: { link_fd: 0, new_prog_fd: 4, flags: 8, old_prog_fd: 12 },
  LINK_DETACH: { link_fd: 0 },
  MAP_INFO: { type: 0, id: 4, key_size: 8, value_size: 12, max_entries: 16, map_flags: 20, name: 24 },
  SK_BUFF: { mark: 8, ingress_ifindex: 36, ifindex: 40 },
} as const;

// ---- errors ----

const errnoNames = new Map<number, string>(Object.entries(osConstants.errno).map(([name, n]) => [n, name]));

export class BpfError extends Error {
  readonly code: string;
  constructor(
    readonly cmd: BpfCmd,
    readonly errno: number,
    detail: string,
  ) {
    const code = errnoNames.get(errno) ?? `errno ${errno}`;
    super(`bpf(${cmd}): ${code}${detail ? `: ${detail}` : ""}`);
    this.name = "BpfError";
    this.code = code;
  }
}

// ---- native memory ----

export class NativeBuffer {
  /** Zero-copy view of the native memory; invalid after free(). */
  readonly bytes: Buffer;
  readonly address: bigint;
  private pointer: ffi.JsExternal | null;

  private constructor(
    pointer: ffi.JsExternal,
    readonly size: number,
  ) {
    this.pointer = pointer;
    this.bytes = ffi.createExternalBuffer(pointer, size);
    this.address = ffi.load({
      library: LIBC,
      funcName: "memset",
      retType: ffi.DataType.BigInt,
      paramsType: [ffi.DataType.External, ffi.DataType.I32, ffi.DataType.U64],
      paramsValue: [pointer, 0, 0],
    }) as unknown as bigint;
  }

  /** Zeroed native memory of `size` bytes (at least 1, so the address is never NULL). */
  static alloc(size: number): NativeBuffer {
    libc();
    const n = Math.max(1, size);
    const pointer = ffi.load({
      library: LIBC,
      funcName: "calloc",
      retType: ffi.DataType.External,
      paramsType: [ffi.DataType.U64, ffi.DataType.U64],
      paramsValue: [1, n],
    });
    if (ffi.isNullPointer(pointer)) throw new Error(`calloc(${n}) failed`);
    return new NativeBuffer(pointer, n);
  }

  static from(bytes: Buffer): NativeBuffer {
    const b = NativeBuffer.alloc(bytes.length);
    bytes.copy(b.bytes);
    return b;
  }

  /** A NUL-terminated copy of `text` (paths, license). */
  static cString(text: string): NativeBuffer {
    return NativeBuffer.from(Buffer.from(`${text}\0`, "utf8"));
  }

  /** A copy of the contents, safe to keep after free(). */
  copy(length = this.size): Buffer {
    return Buffer.from(this.bytes.subarray(0, length));
  }

  free(): void {
    if (this.pointer === null) return;
    ffi.load({
      library: LIBC,
      funcName: "free",
      retType: ffi.DataType.Void,
      paramsType: [ffi.DataType.External],
      paramsValue: [this.pointer],
    });
    this.pointer = null;
  }
}

/** Runs `fn` with an allocator whose buffers are all freed when `fn` returns or throws. */
export function withNative<T>(fn: (mem: NativeScope) => T): T {
  const scope = new NativeScope();
  try {
    return fn(scope);
  } finally {
    scope.freeAll();
  }
}

export class NativeScope {
  private readonly owned: NativeBuffer[] = [];
  alloc(size: number): NativeBuffer {
    return this.keep(NativeBuffer.alloc(size));
  }
  from(bytes: Buffer): NativeBuffer {
    return this.keep(NativeBuffer.from(bytes));
  }
  cString(text: string): NativeBuffer {
    return this.keep(NativeBuffer.cString(text));
  }
  freeAll(): void {
    for (const b of this.owned.splice(0)) b.free();
  }
  private keep(b: NativeBuffer): NativeBuffer {
    this.owned.push(b);
    return b;
  }
}

// ---- the raw call ----

// __NR_bpf differs per architecture (asm/unistd_64.h; arm64 uses the generic table).
const SYS_BPF_BY_ARCH: Partial<Record<NodeJS.Architecture, number>> = { x64: 321, arm64: 280 };

export function sysBpf(): number {
  const nr = SYS_BPF_BY_ARCH[process.arch];
  if (nr === undefined) throw new Error(`bpf(2): unsupported architecture ${process.arch}`);
  return nr;
}

/** bpf(cmd, attr, sizeof attr). Returns the kernel's non-negative result or throws. */
export function bpf(cmd: BpfCmd, attr: NativeBuffer, detail = ""): number {
  libc();
  const r = ffi.load({
    library: LIBC,
    funcName: "syscall",
    retType: ffi.DataType.I64,
    paramsType: [ffi.DataType.I64, ffi.DataType.I32, ffi.DataType.BigInt, ffi.DataType.U32],
    paramsValue: [sysBpf(), BPF_CMD[cmd], attr.address, attr.size],
    errno: true,
  }) as unknown as { value: number; errnoCode: number };
  if (r.value < 0) throw new BpfError(cmd, r.errnoCode, detail);
  return r.value;
}

function newAttr(mem: NativeScope): NativeBuffer {
  return mem.alloc(SIZEOF["union bpf_attr"]);
}

function writeName(buf: Buffer, offset: number, name: string): void {
  // The kernel accepts [A-Za-z0-9_.] and at most BPF_OBJ_NAME_LEN - 1 characters.
  const clean = name.replace(/[^A-Za-z0-9_.]/g, "_").slice(0, BPF_MISC.OBJ_NAME_LEN - 1);
  buf.write(clean, offset, "ascii");
}

export function closeFd(fd: number): void {
  fs.closeSync(fd);
}

// ---- maps ----

export interface MapCreateAttr {
  mapType: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  mapFlags: number;
  name: string;
  /** Map-in-map: a map shaped like the inner maps the new map will hold. */
  innerMapFd?: number;
}

export function mapCreate(a: MapCreateAttr): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const b = attr.bytes;
    const o = ATTR.MAP_CREATE;
    b.writeUInt32LE(a.mapType, o.map_type);
    b.writeUInt32LE(a.keySize, o.key_size);
    b.writeUInt32LE(a.valueSize, o.value_size);
    b.writeUInt32LE(a.maxEntries, o.max_entries);
    b.writeUInt32LE(a.mapFlags, o.map_flags);
    if (a.innerMapFd !== undefined) b.writeUInt32LE(a.innerMapFd, o.inner_map_fd);
    writeName(b, o.map_name, a.name);
    return bpf("MAP_CREATE", attr, a.name);
  });
}

/** The value for `key`, or undefined when absent (ENOENT). */
export function mapLookupElem(mapFd: number, key: Buffer, valueSize: number): Buffer | undefined {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const k = mem.from(key);
    const v = mem.alloc(valueSize);
    attr.bytes.writeUInt32LE(mapFd, ATTR.MAP_ELEM.map_fd);
    attr.bytes.writeBigUInt64LE(k.address, ATTR.MAP_ELEM.key);
    attr.bytes.writeBigUInt64LE(v.address, ATTR.MAP_ELEM.value);
    try {
      bpf("MAP_LOOKUP_ELEM", attr);
    } catch (e) {
      if (e instanceof BpfError && e.code === "ENOENT") return undefined;
      throw e;
    }
    return v.copy(valueSize);
  });
}

export function mapUpdateElem(mapFd: number, key: Buffer, value: Buffer, flags: number): void {
  withNative((mem) => {
    const attr = newAttr(mem);
    const k = mem.from(key);
    const v = mem.from(value);
    attr.bytes.writeUInt32LE(mapFd, ATTR.MAP_ELEM.map_fd);
    attr.bytes.writeBigUInt64LE(k.address, ATTR.MAP_ELEM.key);
    attr.bytes.writeBigUInt64LE(v.address, ATTR.MAP_ELEM.value);
    attr.bytes.writeBigUInt64LE(BigInt(flags), ATTR.MAP_ELEM.flags);
    bpf("MAP_UPDATE_ELEM", attr);
  });
}

/** Returns false when the key was not there. */
export function mapDeleteElem(mapFd: number, key: Buffer): boolean {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const k = mem.from(key);
    attr.bytes.writeUInt32LE(mapFd, ATTR.MAP_ELEM.map_fd);
    attr.bytes.writeBigUInt64LE(k.address, ATTR.MAP_ELEM.key);
    try {
      bpf("MAP_DELETE_ELEM", attr);
      return true;
    } catch (e) {
      if (e instanceof BpfError && e.code === "ENOENT") return false;
      throw e;
    }
  });
}

/** The key after `key` (the first key when `key` is undefined); undefined at the end. */
export function mapGetNextKey(mapFd: number, key: Buffer | undefined, keySize: number): Buffer | undefined {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const next = mem.alloc(keySize);
    attr.bytes.writeUInt32LE(mapFd, ATTR.MAP_ELEM.map_fd);
    if (key) attr.bytes.writeBigUInt64LE(mem.from(key).address, ATTR.MAP_ELEM.key);
    attr.bytes.writeBigUInt64LE(next.address, ATTR.MAP_ELEM.next_key);
    try {
      bpf("MAP_GET_NEXT_KEY", attr);
    } catch (e) {
      if (e instanceof BpfError && e.code === "ENOENT") return undefined;
      throw e;
    }
    return next.copy(keySize);
  });
}

// ---- programs ----

export interface ProgLoadAttr {
  progType: number;
  insns: Buffer;
  license: string;
  name: string;
  expectedAttachType?: number;
  /** 0: no log. 1: the verifier's normal log. */
  logLevel: number;
  logSize: number;
  /** fds that instructions refer to by index: kernel module BTF for kfunc calls. */
  fdArray?: readonly number[];
}

export class ProgLoadError extends BpfError {
  constructor(
    errno: number,
    name: string,
    readonly verifierLog: string,
  ) {
    super("PROG_LOAD", errno, verifierLog ? `${name}: verifier log:\n${verifierLog}` : name);
    this.name = "ProgLoadError";
  }
}

export function progLoad(a: ProgLoadAttr): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const b = attr.bytes;
    const o = ATTR.PROG_LOAD;
    const insns = mem.from(a.insns);
    const license = mem.cString(a.license);
    const log = a.logLevel > 0 ? mem.alloc(a.logSize) : undefined;
    b.writeUInt32LE(a.progType, o.prog_type);
    b.writeUInt32LE(a.insns.length / 8, o.insn_cnt);
    b.writeBigUInt64LE(insns.address, o.insns);
    b.writeBigUInt64LE(license.address, o.license);
    if (log) {
      b.writeUInt32LE(a.logLevel, o.log_level);
      b.writeUInt32LE(log.size, o.log_size);
      b.writeBigUInt64LE(log.address, o.log_buf);
    }
    writeName(b, o.prog_name, a.name);
    b.writeUInt32LE(a.expectedAttachType ?? 0, o.expected_attach_type);
    if (a.fdArray && a.fdArray.length > 0) {
      const fds = Buffer.alloc(a.fdArray.length * 4);
      for (const [i, fd] of a.fdArray.entries()) fds.writeInt32LE(fd, i * 4);
      b.writeBigUInt64LE(mem.from(fds).address, o.fd_array);
    }
    try {
      return bpf("PROG_LOAD", attr, a.name);
    } catch (e) {
      if (!(e instanceof BpfError)) throw e;
      const text = log
        ? log
            .copy()
            .toString("utf8")
            .replace(/\0[\s\S]*$/, "")
        : "";
      throw new ProgLoadError(e.errno, a.name, text.trimEnd());
    }
  });
}

export interface TestRunAttr {
  progFd: number;
  dataIn: Buffer;
  /** Room for the packet after the program ran (ENOSPC if too small). */
  dataOutSize: number;
  /** struct __sk_buff (or another context) passed in as ctx_in. */
  ctxIn?: Buffer;
  repeat?: number;
}

export interface TestRunResult {
  /** The program's return value, as a signed 32-bit number (TCX_NEXT is -1). */
  retval: number;
  dataOut: Buffer;
  durationNs: number;
}

export function progTestRun(a: TestRunAttr): TestRunResult {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const b = attr.bytes;
    const o = ATTR.TEST;
    const dataIn = mem.from(a.dataIn);
    const dataOut = mem.alloc(a.dataOutSize);
    b.writeUInt32LE(a.progFd, o.prog_fd);
    b.writeUInt32LE(a.dataIn.length, o.data_size_in);
    b.writeUInt32LE(dataOut.size, o.data_size_out);
    b.writeBigUInt64LE(dataIn.address, o.data_in);
    b.writeBigUInt64LE(dataOut.address, o.data_out);
    b.writeUInt32LE(a.repeat ?? 1, o.repeat);
    if (a.ctxIn) {
      const ctx = mem.from(a.ctxIn);
      b.writeUInt32LE(a.ctxIn.length, o.ctx_size_in);
      b.writeBigUInt64LE(ctx.address, o.ctx_in);
    }
    bpf("PROG_TEST_RUN", attr);
    return {
      retval: b.readInt32LE(o.retval),
      dataOut: dataOut.copy(b.readUInt32LE(o.data_size_out)),
      durationNs: b.readUInt32LE(o.duration),
    };
  });
}

// ---- objects: pin, get, info ----

export function objPin(fd: number, path: string): void {
  withNative((mem) => {
    const attr = newAttr(mem);
    attr.bytes.writeBigUInt64LE(mem.cString(path).address, ATTR.OBJ.pathname);
    attr.bytes.writeUInt32LE(fd, ATTR.OBJ.bpf_fd);
    bpf("OBJ_PIN", attr, path);
  });
}

export function objGet(path: string): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    attr.bytes.writeBigUInt64LE(mem.cString(path).address, ATTR.OBJ.pathname);
    return bpf("OBJ_GET", attr, path);
  });
}

/** The kernel's bpf_*_info for an fd, `infoSize` bytes of it. */
export function objGetInfo(fd: number, infoSize: number): Buffer {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const info = mem.alloc(infoSize);
    attr.bytes.writeUInt32LE(fd, ATTR.INFO.bpf_fd);
    attr.bytes.writeUInt32LE(infoSize, ATTR.INFO.info_len);
    attr.bytes.writeBigUInt64LE(info.address, ATTR.INFO.info);
    bpf("OBJ_GET_INFO_BY_FD", attr);
    return info.copy();
  });
}

/** A new fd for the map with kernel id `id` (map-in-map lookups return ids). */
export function mapGetFdById(id: number): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    attr.bytes.writeUInt32LE(id, ATTR.GET_ID.start_id);
    return bpf("MAP_GET_FD_BY_ID", attr, `map id ${id}`);
  });
}

/** A new fd for the program with kernel id `id`. */
export function progGetFdById(id: number): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    attr.bytes.writeUInt32LE(id, ATTR.GET_ID.start_id);
    return bpf("PROG_GET_FD_BY_ID", attr, `program id ${id}`);
  });
}

/** The next BTF object id after `id` (0: the first), or undefined after the last. */
export function btfGetNextId(id: number): number | undefined {
  return withNative((mem) => {
    const attr = newAttr(mem);
    attr.bytes.writeUInt32LE(id, ATTR.GET_ID.start_id);
    try {
      bpf("BTF_GET_NEXT_ID", attr);
    } catch (e) {
      if (e instanceof BpfError && e.code === "ENOENT") return undefined;
      throw e;
    }
    return attr.bytes.readUInt32LE(ATTR.GET_ID.next_id);
  });
}

export function btfGetFdById(id: number): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    attr.bytes.writeUInt32LE(id, ATTR.GET_ID.start_id);
    return bpf("BTF_GET_FD_BY_ID", attr, `btf id ${id}`);
  });
}

/** The name of a BTF object ("vmlinux", a module's name, or "" for a program's). */
export function btfName(fd: number): string {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const info = mem.alloc(SIZEOF["struct bpf_btf_info"]);
    const name = mem.alloc(64);
    const o = ATTR.BTF_INFO;
    info.bytes.writeBigUInt64LE(name.address, o.name);
    info.bytes.writeUInt32LE(name.size, o.name_len);
    attr.bytes.writeUInt32LE(fd, ATTR.INFO.bpf_fd);
    attr.bytes.writeUInt32LE(info.size, ATTR.INFO.info_len);
    attr.bytes.writeBigUInt64LE(info.address, ATTR.INFO.info);
    bpf("OBJ_GET_INFO_BY_FD", attr);
    return name
      .copy()
      .toString("utf8")
      .replace(/\0[\s\S]*$/, "");
  });
}

// ---- links ----

export interface LinkCreateAttr {
  progFd: number;
  targetIfindex: number;
  attachType: number;
  flags?: number;
}

export function linkCreate(a: LinkCreateAttr): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const o = ATTR.LINK_CREATE;
    attr.bytes.writeUInt32LE(a.progFd, o.prog_fd);
    attr.bytes.writeUInt32LE(a.targetIfindex, o.target_ifindex);
    attr.bytes.writeUInt32LE(a.attachType, o.attach_type);
    attr.bytes.writeUInt32LE(a.flags ?? 0, o.flags);
    return bpf("LINK_CREATE", attr, `ifindex ${a.targetIfindex}`);
  });
}

/** Swaps the link's program atomically; with oldProgFd, only if that is the current one. */
export function linkUpdate(linkFd: number, newProgFd: number, oldProgFd?: number): void {
  withNative((mem) => {
    const attr = newAttr(mem);
    const o = ATTR.LINK_UPDATE;
    attr.bytes.writeUInt32LE(linkFd, o.link_fd);
    attr.bytes.writeUInt32LE(newProgFd, o.new_prog_fd);
    if (oldProgFd !== undefined) {
      attr.bytes.writeUInt32LE(BPF_MISC.F_REPLACE, o.flags);
      attr.bytes.writeUInt32LE(oldProgFd, o.old_prog_fd);
    }
    bpf("LINK_UPDATE", attr);
  });
}

export function linkDetach(linkFd: number): void {
  withNative((mem) => {
    const attr = newAttr(mem);
    attr.bytes.writeUInt32LE(linkFd, ATTR.LINK_DETACH.link_fd);
    bpf("LINK_DETACH", attr);
  });
}
