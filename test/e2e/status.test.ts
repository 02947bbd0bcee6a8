/**
 * `netkit-cni status` on a node: before any pod (nothing pinned, no problems), with two
 * pods added by cnitool (programs loaded, uplink links, endpoint links, counts, each
 * pinned map's occupancy and the fullest flow table), after a
 * pod's device vanished behind the plugin's back (pins and map entries for a device that
 * no longer exists are problems, exit status 1), and clean again after DEL. It changes
 * nothing: the pin tree is the same before and after.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { NodeStatus } from "../../src/cli/status";
import { Fixture } from "../support/harness";
import { cnitoolPath, leftovers, NOTHING_LEFT, PLUGIN_BINARY, Sandbox } from "./sandbox";

function pinTree(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true, encoding: "utf8" }).sort();
}

describe("netkit-cni status", () => {
  let fx: Fixture;
  let node: string;
  let sb: Sandbox;
  let cnitool: string;

  beforeEach(async () => {
    cnitool = cnitoolPath();
    fx = new Fixture();
    node = fx.makeNode("10.235.0.1", "fd35::1");
    sb = new Sandbox(fx, node);
    await sb.start();
    sb.writeConflist("10-nke2e", {
      cniVersion: "1.0.0",
      name: "nke2e",
      plugins: [
        {
          type: "netkit-cni",
          bpffsRoot: fx.bpffsRoot,
          hostInterface: "uplink0",
          clusterCIDRs: ["10.235.1.0/24"],
          logFile: path.join(sb.dir, "plugin.log"),
          ipam: { type: "netkit-cni", ranges: [[{ subnet: "10.235.1.0/24" }]], dataDir: path.join(sb.dir, "ipam") },
        },
      ],
    });
  });

  afterEach(() => fx.cleanup());

  const status = (...args: string[]) => {
    const r = spawnSync(
      "nsenter",
      [`--net=/run/netns/${node}`, PLUGIN_BINARY, "status", "--bpffs-root", fx.bpffsRoot, ...args],
      {
        encoding: "utf8",
        timeout: 30_000,
      },
    );
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  const statusJson = () => {
    const r = status("--json");
    return { code: r.status, s: JSON.parse(r.stdout) as NodeStatus };
  };
  const cni = (verb: string, pod: string) =>
    sb.run(cnitool, [verb, "nke2e", `/run/netns/${pod}`], {
      env: { NETCONFPATH: sb.confDir, CNI_PATH: sb.binDir, CNI_IFNAME: "eth0" },
    });

  it("reports kernel features, programs, links and endpoints, and what is wrong", () => {
    // Nothing pinned yet.
    let { code, s } = statusJson();
    expect(code).toBe(0);
    expect(s.initialized).toBe(false);
    expect(s.kernel.bpffsMounted).toBe(true);
    expect(s.kernel.tcx).toBe(true);
    expect(s.autoDatapath).toBe(s.kernel.netkit ? "netkit" : "veth");
    expect(s.problems).toEqual([]);

    const pods = [fx.makeNetns("nkp"), fx.makeNetns("nkp")];
    // Each pod's host device, from the result cnitool prints.
    const devices = pods.map((pod) => {
      const r = cni("add", pod);
      expect(r.status, r.stderr).toBe(0);
      const result = JSON.parse(r.stdout) as { interfaces: { name: string; sandbox?: string }[] };
      return result.interfaces.find((i) => !i.sandbox)?.name as string;
    });
    expect(leftovers(node, fx.bpffsRoot, "/nonexistent").devices.sort()).toEqual([...devices].sort());

    const before = pinTree(fx.bpffsRoot);
    const t0 = Date.now();
    ({ code, s } = statusJson());
    const statusMs = Date.now() - t0;
    expect(pinTree(fx.bpffsRoot)).toEqual(before);
    expect(code).toBe(0);
    expect(s.initialized).toBe(true);
    expect(Object.keys(s.programs.ids).sort()).toEqual([
      "nkc_from_pod",
      "nkc_host_in",
      "nkc_host_out",
      "nkc_pod_ingress",
      "nkc_pod_policy",
      "nkc_src_check",
      "nkc_wg_in",
      "nkc_wg_out",
    ]);
    expect(s.programs.running).toBe(s.programs.build);
    expect(s.programs.pinnedBuilds).toEqual([`${s.programs.build}-${s.programs.natCheck}`]);
    // The conntrack check wherever the kernel can run it, and a reason wherever it cannot.
    expect(s.programs.natCheck).toBe(s.programs.conntrackUnavailable ? "memory" : "conntrack");
    expect(s.uplinks.map((u) => [u.pin, u.device, u.programId])).toEqual([
      ["uplink/uplink0/ingress", "uplink0", s.programs.ids.nkc_host_in],
    ]);
    expect(s.endpoints).toMatchObject({ devices: 2, pinned: 2, addresses: 2 });
    expect(s.flowTables).toMatchObject({ tables: 2, capacityEach: 1024 });
    expect(devices).toContain(s.flowTables.fullest?.device);
    expect(s.flowTables.fullest).toMatchObject({ ifname: "eth0", capacity: 1024 });
    // Every node map, in a fixed order; the socket bypass's are absent (no network asked for it).
    // Counters and flow stats fill as packets pass, so only their size is fixed.
    expect(s.maps.map((m) => [m.name, m.kind, m.capacity])).toEqual([
      ["nkc_endpoints", "hash", 16384],
      ["nkc_cluster", "lpm_trie", 64],
      ["nkc_counters", "percpu_hash", 16384],
      ["nkc_drops", "percpu_hash", 16384],
      ["nkc_flow_tables", "array_of_maps", 16384],
      ["nkc_flow_owner", "hash", 16384],
      ["nkc_flow_pool", "array", 1],
      ["nkc_direct_stats", "percpu_hash", 16384],
      ["nkc_bandwidth", "hash", 16384],
    ]);
    const entries = (name: string) => s.maps.find((m) => m.name === name)?.entries;
    const owners = entries("nkc_flow_owner");
    expect([entries("nkc_endpoints"), entries("nkc_cluster"), owners, entries("nkc_bandwidth")]).toEqual([2, 1, 2, 0]);
    // The pool filled one batch of tables for the first pod.
    expect(entries("nkc_flow_tables")).toBe(16);
    expect(s.endpoints.links.map((l) => l.device).sort()).toEqual([...devices].sort());
    expect(s.problems).toEqual([]);

    const text = status();
    expect(text.stdout).toMatch(/^datapath auto\s+(veth|netkit)$/m);
    expect(text.stdout).toMatch(/^NAT check\s+(conntrack|memory \(conntrack unavailable: .+\))$/m);
    expect(text.stdout).toMatch(
      /^flow tables\s+2 of 1024 entries each: \d+ held, \d+ remembered, \d+ forgotten, \d+ evicted$/m,
    );
    expect(text.stdout).toMatch(/^fullest table\s+\S+ \(container \S+\/eth0\): \d+\/1024 entries, \d+ evicted$/m);
    expect(text.stdout).toMatch(/^maps\s+NAME\s+KIND\s+ENTRIES\s+CAPACITY$/m);
    expect(text.stdout).toMatch(/^\s+nkc_endpoints\s+hash\s+2\s+16384$/m);
    expect(text.stdout).toMatch(/^\s+a full non-LRU map evicts nothing/m);
    expect(text.stdout).toMatch(/^endpoints\s+2 devices, 2 with programs, 2 addresses in the endpoint map$/m);
    expect(text.stdout).toMatch(/^problems\s+none$/m);

    // pods[0]'s device removed behind the plugin's back: its pins and map entry are stale.
    sb.must("ip", ["link", "del", devices[0] as string]);
    ({ code, s } = statusJson());
    expect(code).toBe(1);
    expect(s.problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(new RegExp(`^endpoint pins for ${devices[0]}, which no longer exists`)),
        expect.stringMatching(/^endpoint map: 10\.235\.1\.\d+ points at ifindex \d+, which is gone$/),
      ]),
    );
    expect(status().stdout).toMatch(/^problem\s+endpoint pins for /m);

    // DEL repairs it; status is clean again with one pod, and empty after both.
    expect(cni("del", pods[0] as string).status).toBe(0);
    ({ code, s } = statusJson());
    expect(code, s.problems.join("\n")).toBe(0);
    expect(s.endpoints).toMatchObject({ devices: 1, pinned: 1, addresses: 1 });
    expect(cni("del", pods[1] as string).status).toBe(0);
    ({ code, s } = statusJson());
    expect(s.endpoints).toMatchObject({ devices: 0, pinned: 0, addresses: 0 });
    // The maps stay (node state), empty of pods.
    expect(s.flowTables.fullest).toBeUndefined();
    expect(s.maps.find((m) => m.name === "nkc_endpoints")?.entries).toBe(0);
    expect(s.maps.find((m) => m.name === "nkc_flow_owner")?.entries).toBe(0);
    // The tables stay in the pool for the next pods.
    expect(s.maps.find((m) => m.name === "nkc_flow_tables")?.entries).toBe(16);
    expect(leftovers(node, fx.bpffsRoot, path.join(sb.dir, "ipam", "nke2e"))).toEqual(NOTHING_LEFT);
    console.log(`status: ${statusMs} ms with two pods`);
  });
});
