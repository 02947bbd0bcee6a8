/**
 * The compiled objects for the bpf suite: runs scripts/build-bpf.sh (clang) and reads
 * dist/bpf. Tests call buildObjects() in beforeAll so they always test the current C.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { type NodeObjects, nodeObjectsFrom } from "../../../src/bpf/node";

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
