/**
 * Kernel function ids from the kernel's BTF, for kfunc calls: a program calls a kernel
 * function by the id of its BTF_KIND_FUNC type, in vmlinux's BTF or in a module's
 * (split BTF, whose ids and string offsets continue vmlinux's; the call then names the
 * module's BTF object through the fd_array of BPF_PROG_LOAD). Only reads type names:
 * no type graphs, no CO-RE.
 */
import * as fs from "node:fs";
import { btfGetFdById, btfGetNextId, btfName, closeFd } from "../../sys/bpf-syscall";

const BTF_MAGIC = 0xeb9f;
const KIND_FUNC = 12;

/** Bytes that follow the 12-byte common header of each kind (linux/btf.h). */
function extraBytes(kind: number, vlen: number): number {
  switch (kind) {
    case 1: // INT
    case 14: // VAR
    case 17: // DECL_TAG
      return 4;
    case 3: // ARRAY
      return 12;
    case 4: // STRUCT
    case 5: // UNION
    case 15: // DATASEC
    case 19: // ENUM64
      return vlen * 12;
    case 6: // ENUM
    case 13: // FUNC_PROTO
      return vlen * 8;
    case 2: // PTR
    case 7: // FWD
    case 8: // TYPEDEF
    case 9: // VOLATILE
    case 10: // CONST
    case 11: // RESTRICT
    case 12: // FUNC
    case 16: // FLOAT
    case 18: // TYPE_TAG
      return 0;
    default:
      throw new Error(`BTF: unknown type kind ${kind}`);
  }
}

/** What a split BTF continues: the base's type count and string section length. */
export interface BtfBase {
  typeCount: number;
  stringsLength: number;
}

export interface BtfFunctions {
  /** FUNC type ids by name, for the names asked for that are present. */
  ids: Map<string, number>;
  /** This BTF's own types and strings, for a split BTF built on it. */
  base: BtfBase;
}

/** Finds the FUNC types named `names` in raw BTF (`base` when it is split BTF). */
export function findFunctions(btf: Buffer, names: ReadonlySet<string>, base?: BtfBase): BtfFunctions {
  if (btf.length < 24 || btf.readUInt16LE(0) !== BTF_MAGIC) throw new Error("BTF: bad magic");
  const hdrLen = btf.readUInt32LE(4);
  const typeOff = hdrLen + btf.readUInt32LE(8);
  const typeLen = btf.readUInt32LE(12);
  const strOff = hdrLen + btf.readUInt32LE(16);
  const strLen = btf.readUInt32LE(20);
  if (typeOff + typeLen > btf.length || strOff + strLen > btf.length) throw new Error("BTF: sections past the end");

  // Only a name we look for can match: find its offset(s) once, then compare numbers.
  const wanted = new Map<number, string>();
  const firstOffset = base?.stringsLength ?? 0;
  for (const name of names) {
    const needle = Buffer.from(`\0${name}\0`);
    for (let at = btf.indexOf(needle, strOff); at !== -1 && at < strOff + strLen; at = btf.indexOf(needle, at + 1)) {
      wanted.set(firstOffset + at + 1 - strOff, name);
    }
  }

  const ids = new Map<string, number>();
  let id = (base?.typeCount ?? 0) + 1;
  let pos = typeOff;
  const end = typeOff + typeLen;
  while (pos < end) {
    const nameOff = btf.readUInt32LE(pos);
    const info = btf.readUInt32LE(pos + 4);
    const kind = (info >>> 24) & 0x1f;
    if (kind === KIND_FUNC) {
      const name = wanted.get(nameOff);
      if (name !== undefined && !ids.has(name)) ids.set(name, id);
    }
    pos += 12 + extraBytes(kind, info & 0xffff);
    id += 1;
  }
  return { ids, base: { typeCount: id - 1, stringsLength: firstOffset + strLen } };
}

/** A resolved kernel function: its BTF id and, for a module's, the module's BTF fd. */
export interface KernelFunction {
  btfId: number;
  /** Open BTF object of the module that defines it; undefined for vmlinux. */
  moduleBtfFd?: number;
}

export interface KernelFunctions {
  functions: Map<string, KernelFunction>;
  /** Closes the module BTF fds (after the programs that need them are loaded). */
  close(): void;
}

const SYS_BTF = "/sys/kernel/btf";

/**
 * Resolves `names` in vmlinux's BTF, then in the BTF of `module` (where the kernel
 * built that code as a module). Throws, naming what is missing, unless every name
 * resolves: a program calling an unresolved function could not load anyway.
 */
export function resolveKernelFunctions(names: readonly string[], module: string): KernelFunctions {
  const vmlinuxPath = `${SYS_BTF}/vmlinux`;
  if (!fs.existsSync(vmlinuxPath)) throw new Error(`${vmlinuxPath} missing: kernel built without BTF`);
  const vmlinux = findFunctions(fs.readFileSync(vmlinuxPath), new Set(names));
  const functions = new Map<string, KernelFunction>();
  for (const [name, btfId] of vmlinux.ids) functions.set(name, { btfId });
  const missing = names.filter((n) => !functions.has(n));
  if (missing.length === 0) return { functions, close: () => undefined };

  const modulePath = `${SYS_BTF}/${module}`;
  if (!fs.existsSync(modulePath)) {
    throw new Error(`kernel functions ${missing.join(", ")} not in vmlinux BTF, and module ${module} is not loaded`);
  }
  const inModule = findFunctions(fs.readFileSync(modulePath), new Set(missing), vmlinux.base);
  const stillMissing = missing.filter((n) => !inModule.ids.has(n));
  if (stillMissing.length > 0) throw new Error(`kernel functions ${stillMissing.join(", ")} not found in BTF`);
  const fd = openModuleBtf(module);
  for (const [name, btfId] of inModule.ids) functions.set(name, { btfId, moduleBtfFd: fd });
  return { functions, close: () => closeFd(fd) };
}

/** An fd for the loaded BTF object named `module`. */
function openModuleBtf(module: string): number {
  for (let id = btfGetNextId(0); id !== undefined; id = btfGetNextId(id)) {
    let fd: number;
    try {
      fd = btfGetFdById(id);
    } catch {
      continue; // unloaded meanwhile
    }
    if (btfName(fd) === module) return fd;
    closeFd(fd);
  }
  throw new Error(`no loaded BTF object named ${module}`);
}
