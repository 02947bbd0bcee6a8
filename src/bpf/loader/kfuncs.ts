/**
 * Kernel function ids from the kernel's BTF, for kfunc calls: a program calls a kernel
 * function by the id of its BTF_KIND_FUNC type, in vmlinux's BTF or in a module's
 * (split BTF, whose ids and string offsets continue vmlinux's; the call then names the
 * module's BTF object through the fd_array of BPF_PROG_LOAD). Only reads type names
 * (btf.ts): no type graphs, no CO-RE.
 */
import * as fs from "node:fs";
import { btfGetFdById, btfGetNextId, btfName, closeFd } from "../../sys/bpf-syscall";
import { findFunctions } from "./btf";

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
