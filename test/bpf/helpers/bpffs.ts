/**
 * A private bpffs mount per test file (/run/nkb-bpffs-<pid>-<n>), so pins never touch
 * the node's /sys/fs/bpf. release() unmounts and removes the directory.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import { ensureBpffs, isBpffs } from "../../../src/bpf/loader/pins";

let counter = 0;

export class TestBpffs {
  private constructor(readonly root: string) {}

  static mount(): TestBpffs {
    const root = `/run/nkb-bpffs-${process.pid}-${counter++}`;
    ensureBpffs(root);
    return new TestBpffs(root);
  }

  release(): void {
    if (isBpffs(this.root)) execFileSync("umount", ["--lazy", this.root]); // pins inside go with it
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}
