/**
 * Closing the sockets of withdrawn backends (bpf/bpf_svc_destroy.c): the two socket
 * iterators loaded with the kernel functions they need, and a pass that closes the
 * sockets whose cookies it is given in the network namespaces it is given. Loaded by the
 * agent and held for its life (nothing is pinned: the map and programs go with it).
 * Needs BTF and a JIT (tracing programs, a kfunc call) and Linux 6.5+ (bpf_sock_destroy):
 * load() throws the kernel's reason where it cannot, and translation goes on without it.
 */
import * as fs from "node:fs";
import { closeFd, iterCreate } from "../sys/bpf-syscall";
import { BPF_MAP_TYPE } from "../sys/bpf-uapi";
import { inNetns } from "../sys/netns";
import { resolveKernelFunctions } from "./btf";
import { readObject } from "./elf";
import { attachIterator, type BpfLink } from "./links";
import { BpfMap } from "./maps";
import { iteratorTarget, loadProgram } from "./programs";
import { cookieBytes } from "./svc-abi";

const PROGRAMS = ["nkc_svc_destroy_tcp", "nkc_svc_destroy_udp"] as const;
const DOOMED_MAP = "nkc_svc_doomed";
const KFUNCS = ["bpf_sock_destroy"];

export class SocketCloser {
  private constructor(
    private readonly doomed: BpfMap,
    private readonly links: BpfLink[],
  ) {}

  static load(object: Buffer): SocketCloser {
    const spec = readObject(object);
    const mapSpec = spec.maps.find((m) => m.name === DOOMED_MAP);
    if (!mapSpec || mapSpec.type !== BPF_MAP_TYPE.HASH) throw new Error(`map ${DOOMED_MAP} missing from the object`);
    const programs = PROGRAMS.map((name) => {
      const p = spec.programs.find((s) => s.name === name);
      if (!p) throw new Error(`program ${name} missing from the object`);
      return p;
    });
    const targets = programs.map((p) => iteratorTarget(p.section) ?? "");
    const kernel = resolveKernelFunctions([...KFUNCS, ...targets], "vmlinux");
    const doomed = BpfMap.create(mapSpec);
    const links: BpfLink[] = [];
    try {
      for (const [i, p] of programs.entries()) {
        const target = kernel.functions.get(targets[i] ?? "");
        const program = loadProgram(p, {
          license: spec.license,
          maps: new Map([[DOOMED_MAP, doomed]]),
          kernelFunctions: kernel.functions,
          attachBtfId: target?.btfId,
        });
        try {
          links.push(attachIterator(program));
        } finally {
          program.close(); // the link holds it
        }
      }
      return new SocketCloser(doomed, links);
    } catch (e) {
      for (const link of links) link.close();
      doomed.close();
      throw e;
    } finally {
      kernel.close();
    }
  }

  /**
   * Closes the TCP and UDP sockets with these cookies found in the namespaces at
   * `netnsPaths` (a socket is found only in its own). Returns the cookies closed.
   */
  closeSockets(cookies: readonly bigint[], netnsPaths: readonly string[]): bigint[] {
    if (cookies.length === 0) return [];
    for (const cookie of cookies) this.doomed.update(cookieBytes(cookie), Buffer.alloc(1));
    try {
      for (const netns of netnsPaths) {
        try {
          inNetns(netns, () => {
            for (const link of this.links) runIterator(link);
          });
        } catch {
          // A namespace gone meanwhile holds no socket of ours any more.
        }
      }
      const left = new Set([...this.doomed.keys()].map((k) => k.readBigUInt64LE(0)));
      return cookies.filter((c) => !left.has(c));
    } finally {
      for (const key of [...this.doomed.keys()]) this.doomed.delete(key);
    }
  }

  dispose(): void {
    for (const link of this.links) link.close();
    this.doomed.close();
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
