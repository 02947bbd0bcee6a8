/**
 * The agent's bpffs root (src/bpf/loader/pins.ts requireNodeBpffs): it uses a bpf filesystem the
 * node mounted and never mounts one itself, since a mount inside its container would
 * hold maps no pod's program reads. Elsewhere it refuses, saying what the node lacks.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { requireNodeBpffs } from "../../src/bpf/loader/pins";

describe("the agent's bpffs root", () => {
  it("refuses a root on no bpf filesystem, naming what the node must mount, and makes nothing", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkt-bpffs-"));
    try {
      const root = path.join(dir, "netkit-cni");
      expect(() => requireNodeBpffs(root)).toThrow(
        /is on no bpf filesystem: the node must mount one at \/sys\/fs\/bpf/,
      );
      expect(fs.existsSync(root)).toBe(false);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
