/**
 * A pod's life end to end on the suite's datapath (veth on this kernel, netkit in the
 * VM): the built executable driven with env + stdin from inside a node namespace, pods
 * in their own namespaces, real host-local IPAM. Asserts on the kernel's state and on
 * packets actually flowing.
 */
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { useTestNode } from "../support/fixtures";
import {
  allocatedIps,
  BINARY,
  type Fixture,
  hostDev,
  inNs,
  type PluginRun,
  ping,
  pluginLinks,
  podIps,
  runPlugin,
  sh,
  vethConf,
} from "../support/harness";

const NODE_V4 = "10.210.255.1";
const NODE_V6 = "fd10:210::1";

let fx: Fixture;
let node: string;
let conf: Record<string, unknown>;
let dataDir: string;

useTestNode({ v4: NODE_V4, v6: NODE_V6, dataDirPrefix: "nkt-ipam-" }, (test) => {
  ({ fx, node, dataDir } = test);
  conf = vethConf({
    bpffsRoot: fx.bpffsRoot,
    subnet4: "10.210.0.0/24",
    subnet6: "fd10:210:0:1::/64",
    dataDir,
    logFile: path.join(dataDir, "plugin.log"),
  });
});

function add(containerId: string, netns: string, ifname = "eth0", c: Record<string, unknown> = conf): PluginRun {
  return runPlugin(node, "ADD", { containerId, netns: `/run/netns/${netns}`, ifname }, c);
}

/** Device names in a netns (kernels may add tunnel fallback devices next to lo). */
const podLinkNames = (netns: string) =>
  inNs(netns, "ip", ["-o", "link"])
    .split("\n")
    .map((l) => l.split(":")[1]?.trim().split("@")[0])
    .filter(Boolean);

describe("ADD", () => {
  it("gives a pod v4 and v6 addresses reachable from the node and from another pod", () => {
    const podA = fx.makeNetns();
    const podB = fx.makeNetns();
    const a = add("pod-a", podA);
    const b = add("pod-b", podB);
    expect(a.status, a.stdout).toBe(0);
    expect(b.status, b.stdout).toBe(0);
    const ipA = podIps(a);
    const ipB = podIps(b);
    expect(ipA.v4).toMatch(/^10\.210\.0\.\d+$/);
    expect(ipA.v6).toMatch(/^fd10:210:0:1::/);

    // The pod device has the /32 and /128 and the default routes via the fixed gateways.
    const addrs = inNs(podA, "ip", ["-o", "addr", "show", "dev", "eth0"]);
    expect(addrs).toContain(`${ipA.v4}/32`);
    expect(addrs).toContain(`${ipA.v6}/128`);
    expect(inNs(podA, "ip", ["route"])).toContain("default via 169.254.1.1 dev eth0");
    expect(inNs(podA, "ip", ["-6", "route"])).toContain("default via fe80::1 dev eth0");

    for (const ip of [ipA.v4, ipA.v6, ipB.v4, ipB.v6]) expect(ping(node, ip), `node -> ${ip}`).toBe(true);
    for (const ip of [ipB.v4, ipB.v6]) expect(ping(podA, ip), `pod A -> ${ip}`).toBe(true);
    for (const ip of [NODE_V4, NODE_V6]) expect(ping(podB, ip), `pod B -> node ${ip}`).toBe(true);
  });

  it("gives a pod a second interface without touching its default routes", () => {
    const pod = fx.makeNetns();
    const first = add("multi", pod, "eth0");
    const second = add("multi", pod, "net1");
    expect(second.status, second.stdout).toBe(0);
    expect(second.json?.routes).toBeUndefined();
    expect(inNs(pod, "ip", ["route", "show", "default"])).toContain("dev eth0");
    const ip1 = podIps(second);
    expect(inNs(pod, "ip", ["-o", "addr", "show", "dev", "net1"])).toContain(`${ip1.v4}/32`);
    expect(ping(node, ip1.v4)).toBe(true);
    for (const [ifname, run] of [
      ["eth0", first],
      ["net1", second],
    ] as const) {
      const check = runPlugin(
        node,
        "CHECK",
        { containerId: "multi", netns: `/run/netns/${pod}`, ifname },
        {
          ...conf,
          prevResult: run.json,
        },
      );
      expect(check.status, check.stdout).toBe(0);
    }
    // Replies from net1's address leave through net1 (its own table, chosen by source).
    expect(inNs(pod, "ip", ["rule"])).toContain(`from ${ip1.v4} lookup`);
    // Its result, which lacks the default routes eth0 has, tells DEL to look for them.
    const del = runPlugin(
      node,
      "DEL",
      { containerId: "multi", netns: `/run/netns/${pod}`, ifname: "net1" },
      { ...conf, prevResult: second.json },
    );
    expect(del.status, del.stdout).toBe(0);
    expect(inNs(pod, "ip", ["rule"])).not.toContain(ip1.v4);
    expect(ping(node, podIps(first).v4)).toBe(true);
  });

  it("reports the result in the shape of each requested spec version", () => {
    for (const [i, version] of ["0.3.1", "0.4.0", "1.0.0", "1.1.0"].entries()) {
      const pod = fx.makeNetns();
      const run = add(`ver-${i}`, pod, "eth0", { ...conf, cniVersion: version });
      expect(run.status, run.stdout).toBe(0);
      expect(run.json?.cniVersion).toBe(version);
      const ips = run.json?.ips as Record<string, unknown>[];
      const legacy = version < "1.0.0";
      expect(ips.every((ip) => (legacy ? ip.version === "4" || ip.version === "6" : ip.version === undefined))).toBe(
        true,
      );
      const ifaces = run.json?.interfaces as Record<string, unknown>[];
      expect(ifaces[1]).toMatchObject({ name: "eth0", sandbox: `/run/netns/${pod}` });
      expect(ifaces[1]?.mtu !== undefined).toBe(version === "1.1.0");
    }
  });

  it("fails cleanly when the interface name is taken in the pod, leaving nothing behind", () => {
    const pod = fx.makeNetns();
    inNs(pod, "ip", ["link", "add", "eth0", "type", "veth", "peer", "name", "other0"]);
    const run = add("taken", pod);
    expect(run.status).toBe(1);
    expect(run.json).toMatchObject({ code: 4 });
    expect(String(run.json?.msg)).toContain('interface "eth0" already exists');
    expect(pluginLinks(node)).toEqual([]);
    expect(allocatedIps(dataDir)).toEqual([]);
  });

  it("rolls back the device and releases the IP when a step after creating the pair fails", () => {
    // Pin IPAM to one address and occupy the node's route to it, so the host-route step fails.
    const pinned = vethConf({
      bpffsRoot: fx.bpffsRoot,
      subnet4: "10.210.0.0/24",
      rangeStart4: "10.210.0.77",
      dataDir,
      logFile: path.join(dataDir, "plugin.log"),
    });
    inNs(node, "ip", ["route", "add", "10.210.0.77/32", "dev", "lo"]);
    const pod = fx.makeNetns();
    const run = add("midway", pod, "eth0", pinned);
    expect(run.status).toBe(1);
    expect(run.json?.code).toBe(100);
    expect(String(run.json?.msg)).toMatch(/add route 10\.210\.0\.77\/32.*EEXIST/);
    expect(pluginLinks(node)).toEqual([]);
    expect(podLinkNames(pod)).not.toContain("eth0");
    expect(allocatedIps(dataDir)).toEqual([]);

    // The address is free again: with the blocking route gone, the same ADD succeeds.
    inNs(node, "ip", ["route", "del", "10.210.0.77/32", "dev", "lo"]);
    expect(add("midway", pod, "eth0", pinned).status).toBe(0);
  });

  it("refuses a network namespace path that does not exist", () => {
    const run = runPlugin(node, "ADD", { containerId: "nons", netns: "/run/netns/absent-xyz", ifname: "eth0" }, conf);
    expect(run.status).toBe(1);
    expect(run.json).toMatchObject({ code: 4 });
    expect(String(run.json?.msg)).toContain("/run/netns/absent-xyz");
    expect(allocatedIps(dataDir)).toEqual([]);
  });
});

describe("CHECK", () => {
  it("passes on a healthy pod and names what is missing once a route is deleted", () => {
    const pod = fx.makeNetns();
    const a = add("chk", pod);
    expect(a.status, a.stdout).toBe(0);
    const att = { containerId: "chk", netns: `/run/netns/${pod}`, ifname: "eth0" };
    const withPrev = { ...conf, prevResult: a.json };
    const ok = runPlugin(node, "CHECK", att, withPrev);
    expect(ok.status, ok.stdout).toBe(0);
    expect(ok.stdout).toBe("");

    const { v4 } = podIps(a);
    inNs(node, "ip", ["route", "del", `${v4}/32`]);
    const broken = runPlugin(node, "CHECK", att, withPrev);
    expect(broken.status).toBe(1);
    expect(broken.json?.code).toBe(101);
    expect(String(broken.json?.msg)).toContain(`route ${v4}/32`);
  });

  it("fails when the pod's default route is gone", () => {
    const pod = fx.makeNetns();
    const a = add("chk2", pod);
    inNs(pod, "ip", ["-6", "route", "del", "default"]);
    const r = runPlugin(
      node,
      "CHECK",
      { containerId: "chk2", netns: `/run/netns/${pod}`, ifname: "eth0" },
      {
        ...conf,
        prevResult: a.json,
      },
    );
    expect(r.json?.code).toBe(101);
    expect(String(r.json?.msg)).toContain("route ::/0 via fe80::1");
  });
});

describe("DEL", () => {
  it("removes device, routes and IPs, and succeeds again when repeated", () => {
    const pod = fx.makeNetns();
    const a = add("del1", pod);
    expect(a.status).toBe(0);
    expect(pluginLinks(node)).toHaveLength(1);
    expect(allocatedIps(dataDir)).toHaveLength(2);
    const att = { containerId: "del1", netns: `/run/netns/${pod}`, ifname: "eth0" };
    for (let i = 0; i < 2; i++) {
      const d = runPlugin(node, "DEL", att, conf);
      expect(d.status, d.stdout).toBe(0);
      expect(d.stdout).toBe("");
    }
    expect(pluginLinks(node)).toEqual([]);
    expect(inNs(node, "ip", ["route"])).not.toContain("10.210.0.");
    expect(podLinkNames(pod)).not.toContain("eth0");
    expect(allocatedIps(dataDir)).toEqual([]);
  });

  it("succeeds after the pod netns is gone (empty CNI_NETNS) and releases the IPs", () => {
    const pod = fx.makeNetns();
    expect(add("gone", pod).status).toBe(0);
    fx.deleteNetns(pod);
    const d = runPlugin(node, "DEL", { containerId: "gone", netns: "", ifname: "eth0" }, conf);
    expect(d.status, d.stdout).toBe(0);
    expect(pluginLinks(node)).toEqual([]);
    expect(allocatedIps(dataDir)).toEqual([]);
  });

  it("leaves a device labelled for another owner alone", () => {
    const pod = fx.makeNetns();
    const a = add("owner", pod);
    expect(a.status).toBe(0);
    const dev = hostDev(a);
    inNs(node, "ip", ["link", "set", dev, "alias", "netkit-cni:eth0/someone-else"]);
    expect(runPlugin(node, "DEL", { containerId: "owner", netns: "", ifname: "eth0" }, conf).status).toBe(0);
    expect(pluginLinks(node)).toEqual([dev]);
  });
});

describe("GC and STATUS", () => {
  it("GC removes devices of attachments the runtime no longer lists", () => {
    const podA = fx.makeNetns();
    const podB = fx.makeNetns();
    const a = add("keep", podA);
    const b = add("stale", podB);
    const keepDev = hostDev(a);
    const staleDev = hostDev(b);
    const gc = runPlugin(
      node,
      "GC",
      {},
      { ...conf, "cni.dev/valid-attachments": [{ containerID: "keep", ifname: "eth0" }] },
    );
    expect(gc.status, gc.stdout).toBe(0);
    expect(pluginLinks(node)).toEqual([keepDev]);
    expect(pluginLinks(node)).not.toContain(staleDev);
    expect(ping(node, podIps(a).v4)).toBe(true);
  });

  it("GC without the valid-attachments list refuses instead of wiping the node", () => {
    const pod = fx.makeNetns();
    add("still", pod);
    const gc = runPlugin(node, "GC", {}, conf);
    expect(gc.json?.code).toBe(7);
    expect(pluginLinks(node)).toHaveLength(1);
  });

  it("STATUS succeeds silently on a working node", () => {
    const st = runPlugin(node, "STATUS", {}, conf);
    expect(st.status, st.stdout).toBe(0);
    expect(st.stdout).toBe("");
  });
});

describe("the executable", () => {
  it("runs with no node on PATH and no node_modules next to it", () => {
    const dir = fx.tempDir("nkt-bin-");
    const copy = path.join(dir, "netkit-cni");
    sh("cp", [BINARY, copy]);
    const out = sh("env", ["-i", "CNI_COMMAND=VERSION", copy]);
    expect(JSON.parse(out)).toMatchObject({ supportedVersions: ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] });
  });
});
