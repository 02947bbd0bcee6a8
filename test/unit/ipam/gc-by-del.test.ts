/**
 * GC's IPAM half with a delegated plugin that predates GC (commands/ipam-backend.ts):
 * with Debian's host-local 1.1.1 it frees, by DEL, every attachment of this network's
 * store the runtime no longer knows, the ones whose device GC never saw included; with
 * any other such plugin only the attachments whose device GC deleted. No devices here:
 * host-local's ADD and DEL touch only the store.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { parseNetConf } from "../../../src/cni/config";
import { parseEnv } from "../../../src/cni/env";
import { ipamBackend } from "../../../src/commands/ipam-backend";
import { cleanupDirs, tempDataDir } from "./helpers";

const CNI_PATH = "/usr/lib/cni";
const RANGES = [[{ subnet: "10.9.0.0/24" }], [{ subnet: "fd09::/64" }]];

afterEach(cleanupDirs);

function netConf(name: string, dataDir: string, ipamType = "host-local") {
  return { cniVersion: "1.1.0", name, type: "netkit-cni", ipam: { type: ipamType, ranges: RANGES, dataDir } };
}

/** host-local's ADD for one attachment (no netns needed), as our ADD delegates it. */
function hostLocalAdd(conf: object, containerId: string, ifname = "eth0"): string[] {
  const r = spawnSync(`${CNI_PATH}/host-local`, [], {
    input: JSON.stringify({ ...conf, cniVersion: "1.0.0" }),
    env: {
      CNI_COMMAND: "ADD",
      CNI_CONTAINERID: containerId,
      CNI_IFNAME: ifname,
      CNI_NETNS: "/proc/self/ns/net",
      CNI_PATH,
    },
    encoding: "utf8",
  });
  expect(r.status, r.stdout).toBe(0);
  return (JSON.parse(r.stdout).ips as { address: string }[]).map((ip) => ip.address.split("/")[0] ?? "");
}

function gc(
  conf: Record<string, unknown>,
  valid: { containerId: string; ifname: string }[],
  removed: typeof valid,
  cniPath = CNI_PATH,
) {
  const stdin = {
    ...conf,
    "cni.dev/valid-attachments": valid.map((a) => ({ containerID: a.containerId, ifname: a.ifname })),
  };
  const processEnv = { CNI_COMMAND: "GC", CNI_PATH: cniPath, PATH: "/usr/bin:/bin" };
  const backend = ipamBackend({ env: parseEnv(processEnv), conf: parseNetConf(JSON.stringify(stdin)), processEnv });
  if (!backend) throw new Error("no IPAM backend");
  return backend.gc(valid, removed);
}

const files = (dir: string) => (fs.existsSync(dir) ? fs.readdirSync(dir).sort() : []);
const reservations = (dir: string) => files(dir).filter((f) => f !== "lock" && !f.startsWith("last_reserved_ip."));

describe("GC with host-local 1.1.1", () => {
  it("frees every attachment of the store the runtime does not know, once each, and no other network's", () => {
    const dataDir = tempDataDir();
    const conf = netConf("gcnet", dataDir);
    const other = netConf("othernet", dataDir);
    const keep = hostLocalAdd(conf, "keep");
    const vanished = hostLocalAdd(conf, "vanished");
    const removed = hostLocalAdd(conf, "removed");
    // Another network's attachment of the same name, which gcnet's GC does not list.
    const elsewhere = hostLocalAdd(other, "vanished");
    const store = path.join(dataDir, "gcnet");
    // An older host-local's reservation, naming only its container.
    fs.writeFileSync(path.join(store, "10.9.0.200"), "old-pod");

    const line = gc(conf, [{ containerId: "keep", ifname: "eth0" }], [{ containerId: "removed", ifname: "eth0" }]);

    expect(reservations(store)).toEqual([...keep].sort());
    expect(reservations(path.join(dataDir, "othernet"))).toEqual([...elsewhere].sort());
    expect(line).toContain(`store ${store}`);
    expect(line).toContain(`vanished/eth0 ${vanished.join(" ")}`);
    expect(line).toContain(`removed/eth0 ${removed.join(" ")}`);
    expect(line).toContain("old-pod/(any) 10.9.0.200");
  });

  it("sends DEL for a removed attachment whose reservations are already gone (DEL is idempotent)", () => {
    const dataDir = tempDataDir();
    const conf = netConf("gcnet", dataDir);
    const keep = hostLocalAdd(conf, "keep");
    const line = gc(conf, [{ containerId: "keep", ifname: "eth0" }], [{ containerId: "gone", ifname: "eth0" }]);
    expect(line).toMatch(/released by DEL: gone\/eth0$/);
    expect(reservations(path.join(dataDir, "gcnet"))).toEqual([...keep].sort());
  });

  it("keeps an old-format reservation while its container has a valid attachment", () => {
    const dataDir = tempDataDir();
    const conf = netConf("gcnet", dataDir);
    hostLocalAdd(conf, "keep");
    const store = path.join(dataDir, "gcnet");
    fs.writeFileSync(path.join(store, "10.9.0.200"), "keep");
    expect(gc(conf, [{ containerId: "keep", ifname: "eth0" }], [])).toMatch(/released by DEL: nothing$/);
    expect(reservations(store)).toContain("10.9.0.200");
  });
});

describe("GC with another IPAM plugin that predates GC", () => {
  it("sends DEL only for the attachments whose device GC deleted, and says why", () => {
    const dataDir = tempDataDir();
    const bin = tempDataDir();
    const calls = path.join(bin, "calls");
    // Answers VERSION like a pre-1.1 plugin and records every other verb with its attachment.
    fs.writeFileSync(
      path.join(bin, "opaque-ipam"),
      `#!/bin/sh
cat >/dev/null
if [ "$CNI_COMMAND" = VERSION ]; then echo '{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}'; exit 0; fi
echo "$CNI_COMMAND $CNI_CONTAINERID/$CNI_IFNAME" >> "${calls}"
`,
      { mode: 0o755 },
    );
    const conf = netConf("gcnet", dataDir, "opaque-ipam");
    // A store in host-local's format where this plugin's would be: not this plugin's, not read.
    fs.mkdirSync(path.join(dataDir, "gcnet"));
    fs.writeFileSync(path.join(dataDir, "gcnet", "10.9.0.5"), "vanished\r\neth0");
    const line = gc(conf, [], [{ containerId: "removed", ifname: "eth0" }], bin);
    expect(fs.readFileSync(calls, "utf8")).toBe("DEL removed/eth0\n");
    expect(line).toContain("not visible");
    expect(line).toMatch(/released by DEL: removed\/eth0$/);
  });
});
