/**
 * The compiled objects for the bpf suite: runs scripts/build-bpf.sh (clang) and reads
 * dist/bpf. Tests call buildObjects() in beforeAll so they always test the current C.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { readObject } from "../../../src/bpf/loader/elf";
import { attachCgroup, type BpfLink } from "../../../src/bpf/loader/links";
import { type BpfProgram, sectionAttachType } from "../../../src/bpf/loader/programs";
import { type NodeObjects, nodeObjectsFrom } from "../../../src/bpf/objects";

export const repoRoot = path.resolve(__dirname, "../../..");
export const objectsDir = path.join(repoRoot, "dist/bpf");

export function buildObjects(): NodeObjects {
  execFileSync(path.join(repoRoot, "scripts/build-bpf.sh"), { stdio: "pipe" });
  return readObjectsDir(objectsDir);
}

/** The node's objects as a build left them in `dir`. */
export function readObjectsDir(dir: string): NodeObjects {
  return nodeObjectsFrom((file) => {
    const p = path.join(dir, file);
    return fs.existsSync(p) ? fs.readFileSync(p) : undefined;
  });
}

/**
 * Attaches each of `programs`, loaded from `object`, to the cgroup `dir` with the attach
 * type its section names (bpf_svc.c's sock_addr hooks), each link into `links` as it is
 * made, for the caller to close.
 */
export function attachToCgroup(object: Buffer, programs: BpfProgram[], dir: string, links: BpfLink[]): void {
  const sections = new Map(readObject(object).programs.map((p) => [p.name, p.section]));
  const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    for (const program of programs) {
      links.push(attachCgroup(program, fd, sectionAttachType(sections.get(program.name) ?? "") ?? -1));
    }
  } finally {
    fs.closeSync(fd);
  }
}
