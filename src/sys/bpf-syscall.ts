/**
 * The bpf(2) system call and nothing above it: one typed function per command, each
 * filling a `union bpf_attr` (layouts in bpf-uapi.ts) in native memory (native-memory.ts)
 * and calling the kernel. Knows nothing about ELF, maps by name or programs by purpose.
 * Every call is synchronous; failures throw BpfError with errno.
 */
import * as fs from "node:fs";
import { constants as osConstants } from "node:os";
import { ATTR, BPF_CMD, BPF_MISC, type BpfCmd, SIZEOF, sysBpf } from "./bpf-uapi";
import { callLibc } from "./foreign";
import { type NativeBuffer, type NativeScope, withNative } from "./native-memory";

// ---- errors and the raw call ----

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

/** bpf(cmd, attr, sizeof attr). Returns the kernel's non-negative result or throws. */
export function bpf(cmd: BpfCmd, attr: NativeBuffer, detail = ""): number {
  const r = callLibc("syscall", sysBpf(), BPF_CMD[cmd], attr.address, attr.size);
  if (r.value < 0) throw new BpfError(cmd, r.errno, detail);
  return r.value;
}

/** A zeroed `union bpf_attr`, freed with the scope. */
export function newAttr(mem: NativeScope): NativeBuffer {
  return mem.alloc(SIZEOF["union bpf_attr"]);
}

/** The command's result, or undefined when the kernel answers ENOENT ("no such key/id"). */
function unlessAbsent<T>(command: () => T): T | undefined {
  try {
    return command();
  } catch (e) {
    if (e instanceof BpfError && e.code === "ENOENT") return undefined;
    throw e;
  }
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
  /** Types of key and value, for the map types that must have them (socket storage). */
  btf?: { fd: number; keyTypeId: number; valueTypeId: number };
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
    if (a.btf) {
      b.writeUInt32LE(a.btf.fd, o.btf_fd);
      b.writeUInt32LE(a.btf.keyTypeId, o.btf_key_type_id);
      b.writeUInt32LE(a.btf.valueTypeId, o.btf_value_type_id);
    }
    writeName(b, o.map_name, a.name);
    return bpf("MAP_CREATE", attr, a.name);
  });
}

/** The attr of a map element command: the map and, when given, a copy of the key. */
function mapElemAttr(mem: NativeScope, mapFd: number, key: Buffer | undefined): NativeBuffer {
  const attr = newAttr(mem);
  attr.bytes.writeUInt32LE(mapFd, ATTR.MAP_ELEM.map_fd);
  if (key) attr.bytes.writeBigUInt64LE(mem.from(key).address, ATTR.MAP_ELEM.key);
  return attr;
}

/** The value for `key`, or undefined when absent (ENOENT). */
export function mapLookupElem(mapFd: number, key: Buffer, valueSize: number): Buffer | undefined {
  return withNative((mem) => {
    const attr = mapElemAttr(mem, mapFd, key);
    const v = mem.alloc(valueSize);
    attr.bytes.writeBigUInt64LE(v.address, ATTR.MAP_ELEM.value);
    return unlessAbsent(() => bpf("MAP_LOOKUP_ELEM", attr)) === undefined ? undefined : v.copy(valueSize);
  });
}

/** Pops the oldest value of a queue map (no key); undefined when it is empty (ENOENT). */
export function mapPopElem(mapFd: number, valueSize: number): Buffer | undefined {
  return withNative((mem) => {
    const attr = mapElemAttr(mem, mapFd, undefined);
    const v = mem.alloc(valueSize);
    attr.bytes.writeBigUInt64LE(v.address, ATTR.MAP_ELEM.value);
    return unlessAbsent(() => bpf("MAP_LOOKUP_AND_DELETE_ELEM", attr)) === undefined ? undefined : v.copy(valueSize);
  });
}

/** `key` undefined: a queue or stack map's push (the kernel refuses a key pointer there). */
export function mapUpdateElem(mapFd: number, key: Buffer | undefined, value: Buffer, flags: number): void {
  withNative((mem) => {
    const attr = mapElemAttr(mem, mapFd, key);
    attr.bytes.writeBigUInt64LE(mem.from(value).address, ATTR.MAP_ELEM.value);
    attr.bytes.writeBigUInt64LE(BigInt(flags), ATTR.MAP_ELEM.flags);
    bpf("MAP_UPDATE_ELEM", attr);
  });
}

/** Returns false when the key was not there. */
export function mapDeleteElem(mapFd: number, key: Buffer): boolean {
  return withNative((mem) => unlessAbsent(() => bpf("MAP_DELETE_ELEM", mapElemAttr(mem, mapFd, key))) !== undefined);
}

/**
 * BPF_MAP_UPDATE_BATCH: `keys` and `values` each hold `count` elements end to end. One
 * call, so a map of maps waits for running programs once for all of them (Linux 6.8+;
 * earlier kernels wait per element). Throws like one update would.
 */
export function mapUpdateBatch(mapFd: number, keys: Buffer, values: Buffer, count: number, flags: number): void {
  withNative((mem) => {
    const attr = newAttr(mem);
    const b = attr.bytes;
    const o = ATTR.BATCH;
    b.writeBigUInt64LE(mem.from(keys).address, o.keys);
    b.writeBigUInt64LE(mem.from(values).address, o.values);
    b.writeUInt32LE(count, o.count);
    b.writeUInt32LE(mapFd, o.map_fd);
    b.writeBigUInt64LE(BigInt(flags), o.elem_flags);
    bpf("MAP_UPDATE_BATCH", attr);
  });
}

export interface BatchEntries {
  keys: Buffer[];
  values: Buffer[];
}

/**
 * Every element of a map through BPF_MAP_LOOKUP_BATCH (or, with `andDelete`,
 * BPF_MAP_LOOKUP_AND_DELETE_BATCH, which empties it as it reads): `chunk` elements per
 * call instead of two calls per element. The kernel says ENOENT with the last chunk.
 * With `keep: false` nothing is copied out (emptying a map).
 */
export function mapLookupBatch(
  mapFd: number,
  keySize: number,
  valueSize: number,
  options: { andDelete?: boolean; chunk: number; keep?: boolean },
): BatchEntries {
  const out: BatchEntries = { keys: [], values: [] };
  const cmd = options.andDelete ? "MAP_LOOKUP_AND_DELETE_BATCH" : "MAP_LOOKUP_BATCH";
  withNative((mem) => {
    const attr = newAttr(mem);
    const b = attr.bytes;
    const o = ATTR.BATCH;
    // The position token is opaque: a bucket index for hash maps, a key for others.
    const tokenSize = Math.max(keySize, 8);
    // Each call continues from where the previous one's out_batch says it stopped.
    let from = mem.alloc(tokenSize);
    let to = mem.alloc(tokenSize);
    const keys = mem.alloc(keySize * options.chunk);
    const values = mem.alloc(valueSize * options.chunk);
    b.writeUInt32LE(mapFd, o.map_fd);
    b.writeBigUInt64LE(keys.address, o.keys);
    b.writeBigUInt64LE(values.address, o.values);
    for (let call = 0; ; call++) {
      b.writeBigUInt64LE(call === 0 ? 0n : from.address, o.in_batch);
      b.writeBigUInt64LE(to.address, o.out_batch);
      b.writeUInt32LE(options.chunk, o.count);
      const done = unlessAbsent(() => bpf(cmd, attr)) === undefined;
      const n = options.keep === false ? 0 : b.readUInt32LE(o.count);
      for (let i = 0; i < n; i++) {
        out.keys.push(Buffer.from(keys.bytes.subarray(i * keySize, (i + 1) * keySize)));
        out.values.push(Buffer.from(values.bytes.subarray(i * valueSize, (i + 1) * valueSize)));
      }
      if (done) return;
      [from, to] = [to, from];
    }
  });
  return out;
}

/** The key after `key` (the first key when `key` is undefined); undefined at the end. */
export function mapGetNextKey(mapFd: number, key: Buffer | undefined, keySize: number): Buffer | undefined {
  return withNative((mem) => {
    const attr = mapElemAttr(mem, mapFd, key);
    const next = mem.alloc(keySize);
    attr.bytes.writeBigUInt64LE(next.address, ATTR.MAP_ELEM.next_key);
    return unlessAbsent(() => bpf("MAP_GET_NEXT_KEY", attr)) === undefined ? undefined : next.copy(keySize);
  });
}

/** Loads raw BTF (header, types, strings) into the kernel; its fd. The kernel's
 * complaint, if any, is in the error. */
export function btfLoad(raw: Buffer): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const b = attr.bytes;
    const o = ATTR.BTF_LOAD;
    const data = mem.from(raw);
    const log = mem.alloc(4096);
    b.writeBigUInt64LE(data.address, o.btf);
    b.writeUInt32LE(raw.length, o.btf_size);
    try {
      return bpf("BTF_LOAD", attr);
    } catch (e) {
      if (!(e instanceof BpfError)) throw e;
      // Only now ask again with a log: a load that works never pays for one.
      b.writeBigUInt64LE(log.address, o.btf_log_buf);
      b.writeUInt32LE(log.size, o.btf_log_size);
      b.writeUInt32LE(1, o.btf_log_level);
      try {
        return bpf("BTF_LOAD", attr);
      } catch (again) {
        if (!(again instanceof BpfError)) throw again;
        throw new BpfError("BTF_LOAD", again.errno, log.text().trimEnd());
      }
    }
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
  /** A tracing program's target: the BTF id of the kernel function it attaches to (an
   * iterator's bpf_iter_<name>), in vmlinux. */
  attachBtfId?: number;
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
    b.writeUInt32LE(a.attachBtfId ?? 0, o.attach_btf_id);
    if (a.fdArray && a.fdArray.length > 0) {
      const fds = Buffer.alloc(a.fdArray.length * 4);
      for (const [i, fd] of a.fdArray.entries()) fds.writeInt32LE(fd, i * 4);
      b.writeBigUInt64LE(mem.from(fds).address, o.fd_array);
    }
    try {
      return bpf("PROG_LOAD", attr, a.name);
    } catch (e) {
      if (!(e instanceof BpfError)) throw e;
      throw new ProgLoadError(e.errno, a.name, log ? log.text().trimEnd() : "");
    }
  });
}

// ---- objects: pin, get, info, by id ----

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

/** Fills `info` (native, so the kernel can write it) with the bpf_*_info of `fd`. */
function getInfo(mem: NativeScope, fd: number, info: NativeBuffer): void {
  const attr = newAttr(mem);
  attr.bytes.writeUInt32LE(fd, ATTR.INFO.bpf_fd);
  attr.bytes.writeUInt32LE(info.size, ATTR.INFO.info_len);
  attr.bytes.writeBigUInt64LE(info.address, ATTR.INFO.info);
  bpf("OBJ_GET_INFO_BY_FD", attr);
}

/** The kernel's bpf_*_info for an fd, `infoSize` bytes of it. */
export function objGetInfo(fd: number, infoSize: number): Buffer {
  return withNative((mem) => {
    const info = mem.alloc(infoSize);
    getInfo(mem, fd, info);
    return info.copy();
  });
}

/** The `union bpf_attr` of the *_GET_FD_BY_ID and BTF_GET_NEXT_ID commands, holding `id`. */
function idAttr(mem: NativeScope, id: number): NativeBuffer {
  const attr = newAttr(mem);
  attr.bytes.writeUInt32LE(id, ATTR.GET_ID.start_id);
  return attr;
}

/** A new fd for the map with kernel id `id` (map-in-map lookups return ids). */
export function mapGetFdById(id: number): number {
  return withNative((mem) => bpf("MAP_GET_FD_BY_ID", idAttr(mem, id), `map id ${id}`));
}

/** A new fd for the program with kernel id `id`. */
export function progGetFdById(id: number): number {
  return withNative((mem) => bpf("PROG_GET_FD_BY_ID", idAttr(mem, id), `program id ${id}`));
}

export function btfGetFdById(id: number): number {
  return withNative((mem) => bpf("BTF_GET_FD_BY_ID", idAttr(mem, id), `btf id ${id}`));
}

/** The next BTF object id after `id` (0: the first), or undefined after the last. */
export function btfGetNextId(id: number): number | undefined {
  return withNative((mem) => {
    const attr = idAttr(mem, id);
    return unlessAbsent(() => bpf("BTF_GET_NEXT_ID", attr)) === undefined
      ? undefined
      : attr.bytes.readUInt32LE(ATTR.GET_ID.next_id);
  });
}

/** The name of a BTF object ("vmlinux", a module's name, or "" for a program's). */
export function btfName(fd: number): string {
  return withNative((mem) => {
    const info = mem.alloc(SIZEOF["struct bpf_btf_info"]);
    const name = mem.alloc(64);
    info.bytes.writeBigUInt64LE(name.address, ATTR.BTF_INFO.name);
    info.bytes.writeUInt32LE(name.size, ATTR.BTF_INFO.name_len);
    getInfo(mem, fd, info);
    return name.text();
  });
}

// ---- links ----

export type LinkCreateAttr = {
  progFd: number;
  attachType: number;
  flags?: number;
} & ({ targetIfindex: number } | { targetFd: number });

export function linkCreate(a: LinkCreateAttr): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    const o = ATTR.LINK_CREATE;
    attr.bytes.writeUInt32LE(a.progFd, o.prog_fd);
    if ("targetIfindex" in a) attr.bytes.writeUInt32LE(a.targetIfindex, o.target_ifindex);
    else attr.bytes.writeUInt32LE(a.targetFd, o.target_fd);
    attr.bytes.writeUInt32LE(a.attachType, o.attach_type);
    attr.bytes.writeUInt32LE(a.flags ?? 0, o.flags);
    return bpf("LINK_CREATE", attr, "targetIfindex" in a ? `ifindex ${a.targetIfindex}` : `fd ${a.targetFd}`);
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

/** An fd that runs the iterator link's program over its objects as it is read (the
 * sockets of the caller's network namespace, for the socket iterators). */
export function iterCreate(linkFd: number): number {
  return withNative((mem) => {
    const attr = newAttr(mem);
    attr.bytes.writeUInt32LE(linkFd, ATTR.ITER_CREATE.link_fd);
    return bpf("ITER_CREATE", attr);
  });
}
