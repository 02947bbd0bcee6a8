/**
 * Interoperability with the reference host-local plugin (Debian's containernetworking-plugins,
 * 1.1.1 here): each side allocates into the same data directory, and the other reads,
 * checks and releases those allocations. Skipped where the package is not installed.
 */
import { spawnSync } from "node:child_process";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { allocate, check, release } from "../../../src/ipam/index";
import { IpStore } from "../../../src/ipam/store";
import { addressesOf, cleanupDirs, config, listAllocations, NETWORK, tempDataDir } from "./helpers";

const HOST_LOCAL = "/usr/lib/cni/host-local";

afterEach(cleanupDirs);

interface HostLocalOutcome {
  status: number | null;
  json: Record<string, unknown> | undefined;
  stdout: string;
}

function hostLocal(command: string, containerId: string, ifname: string, ipam: object): HostLocalOutcome {
  // host-local 1.1.1 predates spec 1.1.0; 1.0.0 results are the same for ADD/DEL/CHECK.
  const conf = { cniVersion: "1.0.0", name: NETWORK, type: "netkit-cni", ipam: { type: "host-local", ...ipam } };
  const r = spawnSync(HOST_LOCAL, [], {
    input: JSON.stringify(conf),
    env: {
      PATH: process.env.PATH,
      CNI_COMMAND: command,
      CNI_CONTAINERID: containerId,
      CNI_NETNS: "/proc/self/ns/net",
      CNI_IFNAME: ifname,
      CNI_PATH: path.dirname(HOST_LOCAL),
    },
    encoding: "utf8",
  });
  const stdout = r.stdout.trim();
  return { status: r.status, json: stdout ? JSON.parse(stdout) : undefined, stdout };
}

// scripts/deps.sh installs containernetworking-plugins; a missing host-local fails here, loudly.
describe("with the real host-local", () => {
  const ranges = [
    [{ subnet: "10.9.0.0/24", rangeStart: "10.9.0.10", rangeEnd: "10.9.0.20" }],
    [{ subnet: "fd09::/64" }],
  ];

  it("we read, check, continue after and release what host-local allocated", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges });
    const added = hostLocal("ADD", "hl-pod", "eth0", { dataDir, ranges });
    expect(added.status, added.stdout).toBe(0);
    expect(added.json?.ips).toEqual([
      { address: "10.9.0.10/24", gateway: "10.9.0.1" },
      { address: "fd09::2/64", gateway: "fd09::1" },
    ]);

    expect(listAllocations(cfg)).toEqual([
      { ip: "10.9.0.10", containerId: "hl-pod", ifname: "eth0" },
      { ip: "fd09::2", containerId: "hl-pod", ifname: "eth0" },
    ]);
    check(cfg, "hl-pod", "eth0", ["10.9.0.10/24", "fd09::2/64"]);
    // Same result as host-local would give, and round robin continues from its last_reserved_ip.N.
    expect(allocate(cfg, "ours", "eth0").ips).toEqual([
      { address: "10.9.0.11/24", gateway: "10.9.0.1" },
      { address: "fd09::3/64", gateway: "fd09::1" },
    ]);
    release(cfg, "hl-pod", "eth0");
    expect(listAllocations(cfg).map((a) => a.containerId)).toEqual(["ours", "ours"]);
  });

  it("host-local reads, checks, continues after and releases what we allocated", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges });
    allocate(cfg, "ours", "eth0");
    expect(hostLocal("CHECK", "ours", "eth0", { dataDir, ranges }).status).toBe(0);
    expect(hostLocal("CHECK", "ours", "net1", { dataDir, ranges }).status).not.toBe(0);
    // host-local refuses a second allocation for an attachment we already served.
    const duplicate = hostLocal("ADD", "ours", "eth0", { dataDir, ranges });
    expect(duplicate.status).not.toBe(0);
    expect(String(duplicate.json?.msg)).toMatch(/10.9.0.10 has been allocated to ours/);

    const added = hostLocal("ADD", "hl-pod", "eth0", { dataDir, ranges });
    expect(added.status, added.stdout).toBe(0);
    expect(addressesOf(added.json?.ips as { address: string }[])).toEqual(["10.9.0.11", "fd09::3"]);

    expect(hostLocal("DEL", "ours", "eth0", { dataDir, ranges }).status).toBe(0);
    expect(listAllocations(cfg)).toEqual([
      { ip: "10.9.0.11", containerId: "hl-pod", ifname: "eth0" },
      { ip: "fd09::3", containerId: "hl-pod", ifname: "eth0" },
    ]);
  });

  it("host-local waits while we hold the store lock: both take the same flock", () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges });
    allocate(cfg, "ours", "eth0");
    const conf = JSON.stringify({
      cniVersion: "1.0.0",
      name: NETWORK,
      type: "x",
      ipam: { type: "host-local", dataDir, ranges },
    });
    const env = {
      CNI_COMMAND: "ADD",
      CNI_CONTAINERID: "hl",
      CNI_NETNS: "/proc/self/ns/net",
      CNI_IFNAME: "eth0",
      CNI_PATH: "/usr/lib/cni",
    };
    const blocked = new IpStore(cfg.storeDir, 1_000).withLock(() =>
      spawnSync(HOST_LOCAL, [], { input: conf, env, timeout: 500, killSignal: "SIGKILL" }),
    );
    expect(blocked.signal).toBe("SIGKILL");
    expect(listAllocations(cfg)).toHaveLength(2);
    expect(spawnSync(HOST_LOCAL, [], { input: conf, env, timeout: 5_000 }).status).toBe(0);
  });
});
