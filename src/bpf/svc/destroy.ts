/**
 * Closing the sockets of withdrawn backends (bpf/bpf_svc_destroy.c): the two socket
 * iterators loaded with the kernel functions they need, and a pass that closes, in the
 * network namespaces it is given, the sockets that connected to a (Service, backend)
 * pair it is told was withdrawn; each socket's own storage (nkc_svc_sock) says what it
 * was translated from and to. Loaded by the agent and held for its life (nothing is
 * pinned: its maps and programs go with it). Needs BTF and a JIT (tracing programs, a
 * kfunc call) and Linux 6.5+ (bpf_sock_destroy): load() throws the kernel's reason where
 * it cannot, and translation goes on without it.
 */
import * as fs from "node:fs";
import { closeFd, iterCreate, objGetInfo } from "../../sys/bpf-syscall";
import { ATTR, BPF_MAP_TYPE, SIZEOF } from "../../sys/bpf-uapi";
import { inNetns } from "../../sys/netns";
import type { MapSpec, ObjectSpec, ProgramSpec } from "../loader/elf";
import { readObject } from "../loader/elf";
import { type KernelFunctions, resolveKernelFunctions } from "../loader/kfuncs";
import { attachIterator, type BpfLink } from "../loader/links";
import { BpfMap } from "../loader/maps";
import { iteratorTarget, loadProgram } from "../loader/programs";
import { checkStructs } from "../loader/struct-btf";
import {
  pairKey,
  SVC_BACKENDS_MAX,
  SVC_DESTROY_OBJECT,
  SVC_DESTROY_STRUCTS,
  SVC_MAP_NAMES,
  type SvcBackend,
  type SvcFrontend,
} from "./abi";

const PROGRAMS = ["nkc_svc_destroy_tcp", "nkc_svc_destroy_udp"] as const;
const WITHDRAWN_MAP = "nkc_svc_withdrawn";
const CLOSED_MAP = "nkc_svc_closed";
const KFUNCS = ["bpf_sock_destroy"];

/** The backends one Service (by its front end) no longer has. */
export interface Withdrawn {
  frontend: SvcFrontend;
  backends: readonly SvcBackend[];
}

export class SocketCloser {
  /** The iterators as loaded for one socket storage map (by its kernel id). */
  private bound: { mapId: number; links: BpfLink[] } | undefined;

  private constructor(
    private readonly spec: ObjectSpec,
    private readonly programs: readonly ProgramSpec[],
    private readonly kernel: KernelFunctions,
    private readonly withdrawn: BpfMap,
    private readonly closed: BpfMap,
  ) {}

  /** Loads the iterators once, against socket storage of their own, so that a kernel
   * that cannot run them says so now rather than at the first withdrawal. */
  static load(object: Buffer): SocketCloser {
    checkStructs(object, SVC_DESTROY_STRUCTS, SVC_DESTROY_OBJECT);
    const spec = readObject(object);
    const mapSpec = (name: string, type: number): MapSpec => {
      const m = spec.maps.find((s) => s.name === name);
      if (!m || m.type !== type) throw new Error(`map ${name} missing from the object`);
      return m;
    };
    const withdrawnSpec = mapSpec(WITHDRAWN_MAP, BPF_MAP_TYPE.HASH);
    const closedSpec = mapSpec(CLOSED_MAP, BPF_MAP_TYPE.ARRAY);
    const socketsSpec = mapSpec(SVC_MAP_NAMES.sockets, BPF_MAP_TYPE.SK_STORAGE);
    const programs = PROGRAMS.map((name) => {
      const p = spec.programs.find((s) => s.name === name);
      if (!p) throw new Error(`program ${name} missing from the object`);
      return p;
    });
    const targets = programs.map((p) => iteratorTarget(p.section) ?? "");
    const kernel = resolveKernelFunctions([...KFUNCS, ...targets], "vmlinux");
    const made: BpfMap[] = [];
    try {
      const withdrawn = BpfMap.create(withdrawnSpec);
      made.push(withdrawn);
      const closed = BpfMap.create(closedSpec);
      made.push(closed);
      const closer = new SocketCloser(spec, programs, kernel, withdrawn, closed);
      const probe = BpfMap.create(socketsSpec);
      try {
        for (const link of closer.loadFor(probe)) link.close();
      } finally {
        probe.close();
      }
      return closer;
    } catch (e) {
      for (const m of made) m.close();
      kernel.close();
      throw e;
    }
  }

  /**
   * Closes the sockets, in the namespaces at `netnsPaths` (a socket is found only in its
   * own), that connected through a Service to one of the backends `withdrawn` says it no
   * longer has; `sockets` is the node's pinned nkc_svc_sock, which the translating
   * programs fill. The owners see ECONNABORTED on their next call. A socket that only
   * sent to such a pair stays: its next send is given a backend that is one. Returns how
   * many sockets were closed.
   */
  closeSocketsOfWithdrawn(withdrawn: readonly Withdrawn[], netnsPaths: readonly string[], sockets: BpfMap): number {
    const keys = new Map<string, Buffer>();
    for (const w of withdrawn) {
      for (const b of w.backends) {
        const key = pairKey(w.frontend, b);
        keys.set(key.toString("hex"), key);
      }
    }
    if (keys.size === 0 || netnsPaths.length === 0) return 0;
    const links = this.linksFor(sockets);
    const all = [...keys.values()];
    let closed = 0;
    // As many pairs a pass as the map holds; more (a cluster withdrawing that many at
    // once) take more passes.
    for (let at = 0; at < all.length; at += SVC_BACKENDS_MAX) {
      const chunk = all.slice(at, at + SVC_BACKENDS_MAX);
      const zero = Buffer.alloc(4);
      this.closed.update(zero, Buffer.alloc(8));
      for (const key of chunk) this.withdrawn.update(key, Buffer.alloc(1));
      try {
        for (const netns of netnsPaths) {
          try {
            inNetns(netns, () => {
              for (const link of links) runIterator(link);
            });
          } catch {
            // A namespace gone meanwhile holds no socket of ours any more.
          }
        }
        closed += Number(this.closed.lookup(zero)?.readBigUInt64LE(0) ?? 0n);
      } finally {
        for (const key of chunk) this.withdrawn.delete(key);
      }
    }
    return closed;
  }

  dispose(): void {
    for (const link of this.bound?.links ?? []) link.close();
    this.bound = undefined;
    this.withdrawn.close();
    this.closed.close();
    this.kernel.close();
  }

  /** The iterators reading `sockets`: loaded the first time, and again only when the
   * pinned map is another (a node whose maps were made anew). */
  private linksFor(sockets: BpfMap): BpfLink[] {
    const mapId = objGetInfo(sockets.fd, SIZEOF["struct bpf_map_info"]).readUInt32LE(ATTR.MAP_INFO.id);
    if (this.bound?.mapId === mapId) return this.bound.links;
    const links = this.loadFor(sockets);
    for (const link of this.bound?.links ?? []) link.close();
    this.bound = { mapId, links };
    return links;
  }

  private loadFor(sockets: BpfMap): BpfLink[] {
    const maps = new Map([
      [WITHDRAWN_MAP, this.withdrawn],
      [CLOSED_MAP, this.closed],
      [SVC_MAP_NAMES.sockets, sockets],
    ]);
    const links: BpfLink[] = [];
    try {
      for (const p of this.programs) {
        const target = this.kernel.functions.get(iteratorTarget(p.section) ?? "");
        const program = loadProgram(p, {
          license: this.spec.license,
          maps,
          kernelFunctions: this.kernel.functions,
          attachBtfId: target?.btfId,
        });
        try {
          links.push(attachIterator(program));
        } finally {
          program.close(); // the link holds it
        }
      }
      return links;
    } catch (e) {
      for (const link of links) link.close();
      throw e;
    }
  }
}

/** Runs an iterator over the caller's namespace: its fd yields nothing; reading to the
 * end is what runs the program over every socket. */
function runIterator(link: BpfLink): void {
  const fd = iterCreate(link.fd);
  try {
    const buf = Buffer.alloc(4096);
    while (fs.readSync(fd, buf) > 0) {
      // the programs print nothing
    }
  } finally {
    closeFd(fd);
  }
}
