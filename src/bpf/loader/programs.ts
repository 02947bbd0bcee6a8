/**
 * Loading programs: patch each map relocation (ld_imm64 of the map's symbol becomes
 * ld_imm64 src_reg=BPF_PSEUDO_MAP_FD imm=<map fd>) and each kernel function call (call
 * src_reg=BPF_PSEUDO_KFUNC_CALL imm=<BTF id> off=<fd_array index of its module's BTF, 0
 * for vmlinux>), then BPF_PROG_LOAD with the type its ELF section names (programType).
 * A failed load is retried with the verifier log on, so the thrown error carries the
 * log. Owns the program fd until close(); never attaches (links.ts does).
 */
import { closeFd, objGetInfo, ProgLoadError, progGetFdById, progLoad } from "../../sys/bpf-syscall";
import { ATTR, BPF_ATTACH_TYPE, BPF_MISC, BPF_PROG_TYPE } from "../../sys/bpf-uapi";
import type { ProgramSpec } from "./elf";
import type { KernelFunction } from "./kfuncs";
import type { BpfMap } from "./maps";

const BPF_LD_IMM64 = 0x18; // BPF_LD | BPF_IMM | BPF_DW
const FIRST_LOG_SIZE = 1 << 20;
const MAX_LOG_SIZE = 1 << 26;

export class BpfProgram {
  private open = true;

  constructor(
    readonly fd: number,
    readonly name: string,
  ) {}

  /** The kernel's id for this program (struct bpf_prog_info.id). */
  id(): number {
    return objGetInfo(this.fd, 16).readUInt32LE(ATTR.PROG_INFO.id);
  }

  /** How many instructions the verifier walked to accept it (of the 1,000,000 it allows a program). */
  verifiedInstructions(): number {
    const at = ATTR.PROG_INFO.verified_insns;
    return objGetInfo(this.fd, at + 4).readUInt32LE(at);
  }

  /** Whether the kernel JIT-compiled it (else the interpreter runs it). */
  jited(): boolean {
    return objGetInfo(this.fd, ATTR.PROG_INFO.jited_prog_len + 4).readUInt32LE(ATTR.PROG_INFO.jited_prog_len) > 0;
  }

  close(): void {
    if (!this.open) return;
    this.open = false;
    closeFd(this.fd);
  }
}

/** The name the program with kernel id `id` was loaded under (bpf_prog_info.name). */
export function programName(id: number): string {
  const fd = progGetFdById(id);
  try {
    // The kernel fills in as much of bpf_prog_info as we ask for: up to the name is enough.
    const info = objGetInfo(fd, ATTR.PROG_INFO.name + 16);
    const name = info.subarray(ATTR.PROG_INFO.name, ATTR.PROG_INFO.name + 16);
    return name.toString("ascii").replace(/\0.*$/s, "");
  } finally {
    closeFd(fd);
  }
}

export interface LoadOptions {
  license: string;
  /** Maps by name, for the relocations. */
  maps: ReadonlyMap<string, BpfMap>;
  /** Kernel functions by name, for programs that call any (see kfuncs.ts). */
  kernelFunctions?: ReadonlyMap<string, KernelFunction>;
  /** Left 0 (none) by default: tcx and netkit both accept SCHED_CLS programs without one,
   * so one program can serve either hook. */
  expectedAttachType?: number;
  /** A tracing program's target (an iterator's bpf_iter_<name>), by vmlinux BTF id. */
  attachBtfId?: number;
}

/**
 * The program type an ELF section names, libbpf's way: "sockops", "sk_msg" and
 * "cgroup/sock_release" for the socket bypass, "cgroup/connect4" and the other socket
 * address hooks for Service translation, "iter/tcp" and "iter/udp" (tracing programs,
 * socket iterators) for closing a withdrawn backend's sockets; everything else of ours
 * ("tc/...") is SCHED_CLS.
 */
export function programType(section: string): number {
  if (section === "sockops") return BPF_PROG_TYPE.SOCK_OPS;
  if (section === "sk_msg") return BPF_PROG_TYPE.SK_MSG;
  if (section === RELEASE_SECTION) return BPF_PROG_TYPE.CGROUP_SOCK;
  if (Object.hasOwn(SOCK_ADDR_SECTIONS, section)) return BPF_PROG_TYPE.CGROUP_SOCK_ADDR;
  if (section.startsWith(ITER_SECTION)) return BPF_PROG_TYPE.TRACING;
  return BPF_PROG_TYPE.SCHED_CLS;
}

const RELEASE_SECTION = "cgroup/sock_release";
const ITER_SECTION = "iter/";

/** The kernel function an iterator program ("iter/<name>") attaches to, by name. */
export const iteratorTarget = (section: string): string | undefined =>
  section.startsWith(ITER_SECTION) ? `bpf_iter_${section.slice(ITER_SECTION.length)}` : undefined;

/** The socket address hooks, by section: each program serves exactly one. */
export const SOCK_ADDR_SECTIONS: Readonly<Record<string, number>> = {
  "cgroup/connect4": BPF_ATTACH_TYPE.CGROUP_INET4_CONNECT,
  "cgroup/connect6": BPF_ATTACH_TYPE.CGROUP_INET6_CONNECT,
  "cgroup/sendmsg4": BPF_ATTACH_TYPE.CGROUP_UDP4_SENDMSG,
  "cgroup/sendmsg6": BPF_ATTACH_TYPE.CGROUP_UDP6_SENDMSG,
  "cgroup/recvmsg4": BPF_ATTACH_TYPE.CGROUP_UDP4_RECVMSG,
  "cgroup/recvmsg6": BPF_ATTACH_TYPE.CGROUP_UDP6_RECVMSG,
  "cgroup/getpeername4": BPF_ATTACH_TYPE.CGROUP_INET4_GETPEERNAME,
  "cgroup/getpeername6": BPF_ATTACH_TYPE.CGROUP_INET6_GETPEERNAME,
};

/** A cgroup program serves one hook, which the kernel wants named at load time. */
export function sectionAttachType(section: string): number | undefined {
  if (section === RELEASE_SECTION) return BPF_ATTACH_TYPE.CGROUP_INET_SOCK_RELEASE;
  if (section.startsWith(ITER_SECTION)) return BPF_ATTACH_TYPE.TRACE_ITER;
  return Object.hasOwn(SOCK_ADDR_SECTIONS, section) ? SOCK_ADDR_SECTIONS[section] : undefined;
}

/** An error's first line: a refused load's message goes on with the verifier's log. */
export const firstLine = (e: unknown) => String((e as Error).message ?? e).split("\n")[0];

export function loadProgram(spec: ProgramSpec, options: LoadOptions): BpfProgram {
  const insns = relocate(spec, options.maps);
  const fdArray = linkKernelFunctions(spec, insns, options.kernelFunctions ?? new Map());
  const attr = {
    progType: programType(spec.section),
    insns,
    license: options.license,
    name: spec.name,
    expectedAttachType: options.expectedAttachType ?? sectionAttachType(spec.section),
    attachBtfId: options.attachBtfId,
    fdArray,
  };
  try {
    return new BpfProgram(progLoad({ ...attr, logLevel: 0, logSize: 0 }), spec.name);
  } catch (e) {
    if (!(e instanceof ProgLoadError)) throw e;
  }
  // Same load again with the log on: slower, and only needed to explain the failure.
  for (let logSize = FIRST_LOG_SIZE; ; logSize *= 4) {
    try {
      return new BpfProgram(progLoad({ ...attr, logLevel: 1, logSize }), spec.name);
    } catch (e) {
      // ENOSPC: the log did not fit; the verdict is in its tail, so grow and retry.
      if (e instanceof ProgLoadError && e.code === "ENOSPC" && logSize < MAX_LOG_SIZE) continue;
      throw e;
    }
  }
}

/** A copy of the instructions with every map reference resolved to its fd. */
export function relocate(spec: ProgramSpec, maps: ReadonlyMap<string, BpfMap>): Buffer {
  const insns = Buffer.from(spec.instructions);
  for (const r of spec.relocations) {
    const map = maps.get(r.mapName);
    if (!map) throw new Error(`program ${spec.name}: no map ${r.mapName} to relocate against`);
    const at = r.insnIndex * 8;
    if (insns[at] !== BPF_LD_IMM64 || at + 16 > insns.length) {
      throw new Error(`program ${spec.name}: relocation for ${r.mapName} at insn ${r.insnIndex} is not ld_imm64`);
    }
    const regs = insns.readUInt8(at + 1);
    insns.writeUInt8((regs & 0x0f) | (BPF_MISC.PSEUDO_MAP_FD << 4), at + 1); // src_reg is the high nibble
    insns.writeInt32LE(map.fd, at + 4);
    insns.writeInt32LE(0, at + 12); // the second half's imm: offset into the map value, none
  }
  return insns;
}

/**
 * Points each kernel function call of `spec` (in `insns`, already copied) at its BTF id.
 * Returns the fd_array for BPF_PROG_LOAD: module BTF fds, referred to by index; index 0
 * means vmlinux, so it holds no fd of ours.
 */
function linkKernelFunctions(
  spec: ProgramSpec,
  insns: Buffer,
  functions: ReadonlyMap<string, KernelFunction>,
): number[] {
  const fdArray: number[] = [];
  for (const call of spec.kfuncCalls) {
    const fn = functions.get(call.name);
    if (!fn) throw new Error(`program ${spec.name}: kernel function ${call.name} not resolved`);
    let index = 0;
    if (fn.moduleBtfFd !== undefined) {
      if (fdArray.length === 0) fdArray.push(-1);
      index = fdArray.indexOf(fn.moduleBtfFd);
      if (index === -1) index = fdArray.push(fn.moduleBtfFd) - 1;
    }
    const at = call.insnIndex * 8;
    const regs = insns.readUInt8(at + 1);
    insns.writeUInt8((regs & 0x0f) | (BPF_MISC.PSEUDO_KFUNC_CALL << 4), at + 1);
    insns.writeInt16LE(index, at + 2);
    insns.writeInt32LE(fn.btfId, at + 4);
  }
  return fdArray;
}
