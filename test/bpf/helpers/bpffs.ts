/**
 * A private bpffs mount per test file (/run/nkb-bpffs-<pid>-<n>), so pins never touch
 * the node's /sys/fs/bpf. release() unmounts and removes the directory.
 */
import * as fs from "node:fs";
import { ensureBpffs, isBpffs } from "../../../src/bpf/pins";
import { MNT_DETACH, unmount } from "../../../src/sys/libc";

let counter = 0;

export class TestBpffs {
  private constructor(readonly root: string) {}

  static mount(): TestBpffs {
    const root = `/run/nkb-bpffs-${process.pid}-${counter++}`;
    ensureBpffs(root);
    return new TestBpffs(root);
  }

  release(): void {
    if (isBpffs(this.root)) unmount(this.root, MNT_DETACH); // pins inside go with it
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}
