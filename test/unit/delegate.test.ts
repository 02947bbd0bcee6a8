/**
 * Delegation to IPAM plugins, against small stand-in plugins written as shell scripts
 * into a temporary CNI_PATH: what they receive and how their answers come back.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DelegateTarget, delegateAdd, delegateSince110, findPlugin } from "../../src/cni/delegate";
import { CniError } from "../../src/cni/errors";

let dir: string;

/** A plugin that records its CNI_COMMAND and stdin, then runs `body`. */
function plugin(name: string, body: string): void {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\nin=$(cat)\necho "$CNI_COMMAND $in" >> "${dir}/${name}.calls"\n${body}\n`, {
    mode: 0o755,
  });
}

const calls = (name: string) =>
  fs.existsSync(path.join(dir, `${name}.calls`))
    ? fs
        .readFileSync(path.join(dir, `${name}.calls`), "utf8")
        .trim()
        .split("\n")
    : [];

const target = (pluginType: string, cniVersion = "1.1.0"): DelegateTarget => ({
  pluginType,
  searchPath: ["/nonexistent", dir],
  conf: { cniVersion, name: "n", type: "netkit-cni", ipam: { type: pluginType } },
  env: { PATH: "/usr/bin:/bin" },
});

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "nk-delegate-"));
  plugin("ok-ipam", `echo '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"}]}'`);
  plugin("failing-ipam", `echo '{"code":11,"msg":"range busy","details":"lock"}'; exit 1`);
  plugin("garbage-ipam", `echo 'panic: oops' >&2; exit 2`);
  // Like plugins built on libcni before 1.1: refuses 1.1.0, answers 1.0.0.
  plugin(
    "old-ipam",
    `if [ "$CNI_COMMAND" = VERSION ]; then echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}'; exit 0; fi
case "$in" in *'"1.1.0"'*) echo '{"code":1,"msg":"incompatible CNI versions"}'; exit 1;; esac
echo '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.9/24"}]}'`,
  );
  // Answers at once without reading stdin, like a VERSION handler.
  fs.writeFileSync(
    path.join(dir, "deaf-ipam"),
    `#!/bin/sh\necho '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.7/24"}]}'\n`,
    { mode: 0o755 },
  );
  plugin(
    "new-ipam",
    `if [ "$CNI_COMMAND" = VERSION ]; then echo '{"cniVersion":"1.1.0","supportedVersions":["1.0.0","1.1.0"]}'; fi`,
  );
});

afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe("delegation", () => {
  it("finds the plugin along CNI_PATH and parses its result", () => {
    expect(findPlugin("ok-ipam", ["/nonexistent", dir])).toBe(path.join(dir, "ok-ipam"));
    const result = delegateAdd(target("ok-ipam"));
    expect(result.ips).toEqual([{ address: "10.0.0.5/24", gateway: "10.0.0.1" }]);
    const [call] = calls("ok-ipam");
    expect(call).toMatch(/^ADD \{"cniVersion":"1.1.0"/);
  });

  it("reports a missing plugin with code 7 and the path searched", () => {
    try {
      delegateAdd(target("absent-ipam"));
      expect.unreachable();
    } catch (e) {
      expect((e as CniError).code).toBe(7);
      expect((e as CniError).message).toContain(dir);
    }
  });

  it("passes the plugin's own error code through, naming the plugin", () => {
    try {
      delegateAdd(target("failing-ipam"));
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(CniError);
      expect((e as CniError).code).toBe(11);
      expect((e as CniError).message).toBe("ipam plugin failing-ipam ADD: range busy");
    }
  });

  it("wraps output that is not the spec's error JSON", () => {
    try {
      delegateAdd(target("garbage-ipam"));
      expect.unreachable();
    } catch (e) {
      expect((e as CniError).code).toBe(102);
      expect((e as CniError).details).toContain("panic: oops");
    }
  });

  it("retries ADD at 1.0.0 for plugins that predate 1.1.0", () => {
    expect(delegateAdd(target("old-ipam")).ips[0]?.address).toBe("10.0.0.9/24");
    expect(calls("old-ipam").map((c) => c.split(" ")[0])).toEqual(["ADD", "ADD"]);
  });

  it("takes the answer of a plugin that exits before reading all of its input (EPIPE)", () => {
    // More than a pipe holds: the write cannot finish before the plugin has exited.
    const big = target("deaf-ipam");
    big.conf = { ...big.conf, padding: "x".repeat(1 << 20) };
    expect(delegateAdd(big).ips[0]?.address).toBe("10.0.0.7/24");
  });

  it("does not send GC or STATUS to plugins that predate 1.1.0, and does to newer ones", () => {
    expect(delegateSince110(target("old-ipam"), "GC")).toBe(false);
    expect(calls("old-ipam").some((c) => c.startsWith("GC"))).toBe(false);
    expect(delegateSince110(target("new-ipam"), "GC")).toBe(true);
    expect(calls("new-ipam").map((c) => c.split(" ")[0])).toEqual(["VERSION", "GC"]);
  });
});
