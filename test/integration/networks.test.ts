/**
 * Two netkit-cni networks on one node, as a Multus-style second interface or two podman
 * networks make them: different names, IPAM ranges and cluster CIDRs, one bpffs root (a
 * node has one). What one network's ADD, DEL and GC do must never reach the other's
 * devices, pins, endpoint entries, addresses or cluster CIDRs.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import { decodeCidrKey } from "../../src/bpf/fastpath/abi";
import { BpfMap } from "../../src/bpf/loader/maps";
import { endpointMapEntries, pinnedEndpointDevices } from "../../src/datapath/node-state";
import { useTestNode } from "../support/fixtures";
import {
  type Fixture,
  type PluginRun,
  ping,
  pluginLinks,
  runPlugin,
  TEST_DATAPATH,
  waitUntil,
} from "../support/harness";
import { ifindexOf } from "../support/topology";

type IpamType = "host-local" | "netkit-cni";

interface Network {
  name: string;
  conf: Record<string, unknown>;
}

/** One pod interface on one network, as ADD reported it. */
interface Attachment {
  network: Network;
  containerId: string;
  ifname: string;
  netns: string;
  add: PluginRun;
  hostDevice: string;
  v4: string;
  v6: string;
}

let fx: Fixture;
let node: string;
let dataDir: string;

useTestNode({ v4: "10.229.255.1", v6: "fd29::1", dataDirPrefix: "nkt-nets-" }, (test) => {
  ({ fx, node, dataDir } = test);
});

/** Pods in <v4>.1.0/24 and <v6>:1::/64; the cluster is <v4>.0.0/16 and <v6>::/16. */
function network(name: string, v4: string, v6: string, ipam: IpamType): Network {
  return {
    name,
    conf: {
      cniVersion: "1.1.0",
      name,
      type: "netkit-cni",
      datapath: TEST_DATAPATH,
      logFile: path.join(dataDir, "plugin.log"),
      logLevel: "debug",
      // Both IPAM types keep one store per network name under the shared dataDir.
      ipam: { type: ipam, ranges: [[{ subnet: `${v4}.1.0/24` }], [{ subnet: `${v6}:1::/64` }]], dataDir },
      bpffsRoot: fx.bpffsRoot,
      hostInterface: "uplink0",
      clusterCIDRs: [`${v4}.0.0/16`, `${v6}::/16`],
    },
  };
}

function add(net: Network, containerId: string, netns: string, ifname = "eth0", conf = net.conf): Attachment {
  const run = runPlugin(node, "ADD", { containerId, netns: `/run/netns/${netns}`, ifname }, conf);
  if (run.status !== 0) throw new Error(`ADD ${containerId}/${ifname} on ${net.name} failed: ${run.stdout}`);
  const ips = ((run.json?.ips ?? []) as { address: string }[]).map((i) => i.address.split("/")[0] ?? "");
  const hostDevice = ((run.json?.interfaces ?? []) as { name: string }[])[0]?.name ?? "";
  return {
    network: net,
    containerId,
    ifname,
    netns,
    add: run,
    hostDevice,
    v4: ips.find((ip) => !ip.includes(":")) ?? "",
    v6: ips.find((ip) => ip.includes(":")) ?? "",
  };
}

function gc(net: Network, valid: Attachment[]): PluginRun {
  const list = valid.map((a) => ({ containerID: a.containerId, ifname: a.ifname }));
  return runPlugin(node, "GC", {}, { ...net.conf, "cni.dev/valid-attachments": list });
}

function verb(verbName: "DEL" | "CHECK", net: Network, att: Attachment): PluginRun {
  return runPlugin(
    node,
    verbName,
    { containerId: att.containerId, netns: `/run/netns/${att.netns}`, ifname: att.ifname },
    { ...net.conf, prevResult: att.add.json },
  );
}

/** The addresses a network's store holds (host-local's format, which the embedded IPAM shares). */
function reserved(net: Network): string[] {
  const dir = path.join(dataDir, net.name);
  return fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => /^[0-9a-f.:]+$/.test(f) && /[.:]/.test(f)) : [];
}

function clusterTrie(): string[] {
  const map = BpfMap.openPinned(path.join(fx.bpffsRoot, "maps", "nkc_cluster"));
  try {
    return [...map.keys()].map(decodeCidrKey).sort();
  } finally {
    map.close();
  }
}

/** Everything ADD made for `att` is still there, and its network's CHECK agrees. */
function expectIntact(att: Attachment): void {
  const what = `${att.network.name} ${att.containerId}/${att.ifname}`;
  expect(pluginLinks(node), what).toContain(att.hostDevice);
  expect(pinnedEndpointDevices(fx.bpffsRoot), what).toContain(att.hostDevice);
  const entries = endpointMapEntries(fx.bpffsRoot);
  const ifindex = ifindexOf(node, att.hostDevice);
  expect(entries.get(att.v4)?.hostIfindex, what).toBe(ifindex);
  expect(entries.get(att.v6)?.hostIfindex, what).toBe(ifindex);
  expect(reserved(att.network), what).toEqual(expect.arrayContaining([att.v4, att.v6]));
  const check = verb("CHECK", att.network, att);
  expect(check.status, `CHECK ${what}: ${check.stdout}`).toBe(0);
}

/** GC removed the attachment's device, pins and endpoint entries. */
function expectCollected(att: Attachment): void {
  expect(pluginLinks(node)).not.toContain(att.hostDevice);
  expect(pinnedEndpointDevices(fx.bpffsRoot)).not.toContain(att.hostDevice);
  const entries = endpointMapEntries(fx.bpffsRoot);
  expect(entries.has(att.v4) || entries.has(att.v6)).toBe(false);
}

describe.each(["host-local", "netkit-cni"] as const)("two networks on one node, IPAM %s", (ipam) => {
  let a: Network;
  let b: Network;
  beforeEach(() => {
    a = network("nkscope-a", "10.230", "fd30", ipam);
    b = network("nkscope-b", "10.231", "fd31", ipam);
  });

  /** A pod with eth0 on A and net1 on B, one more pod on each, and one on each that GC will find stale. */
  function populate() {
    const multi = fx.makeNetns();
    const pods = {
      multiA: add(a, "multi", multi, "eth0"),
      multiB: add(b, "multi", multi, "net1"),
      onlyA: add(a, "only-a", fx.makeNetns()),
      onlyB: add(b, "only-b", fx.makeNetns()),
      staleA: add(a, "stale-a", fx.makeNetns()),
      staleB: add(b, "stale-b", fx.makeNetns()),
    };
    return pods;
  }

  it("GC of A with A's valid list keeps every part of B's pods, and B's traffic flows", () => {
    const p = populate();
    const run = gc(a, [p.multiA, p.onlyA]);
    expect(run.status, run.stdout).toBe(0);
    expectCollected(p.staleA);
    for (const att of [p.multiA, p.onlyA, p.multiB, p.onlyB, p.staleB]) expectIntact(att);
    expect(ping(p.onlyB.netns, p.multiB.v4)).toBe(true);
    expect(ping(p.onlyB.netns, p.multiB.v6)).toBe(true);
    expect(ping(node, p.staleB.v4)).toBe(true);
  });

  it("GC of B with B's valid list keeps every part of A's pods, and A's traffic flows", () => {
    const p = populate();
    const run = gc(b, [p.multiB, p.onlyB]);
    expect(run.status, run.stdout).toBe(0);
    expectCollected(p.staleB);
    for (const att of [p.multiA, p.onlyA, p.multiB, p.onlyB, p.staleA]) expectIntact(att);
    expect(ping(p.onlyA.netns, p.multiA.v4)).toBe(true);
    expect(ping(p.onlyA.netns, p.multiA.v6)).toBe(true);
    expect(ping(node, p.staleA.v4)).toBe(true);
  });

  it("pins and endpoint entries of a device that is gone are collected by either network's GC", () => {
    const p = populate();
    // B's pod vanished with its netns (taking the device) and its DEL never came.
    fx.deleteNetns(p.staleB.netns);
    // The kernel tears a deleted netns down in the background: until its pair is gone the
    // device still exists, and A's GC rightly leaves B's live-looking device alone.
    waitUntil("B's stale pair to go with its netns", () => !pluginLinks(node).includes(p.staleB.hostDevice));
    const run = gc(a, [p.multiA, p.onlyA, p.staleA]);
    expect(run.status, run.stdout).toBe(0);
    expectCollected(p.staleB);
    for (const att of [p.multiA, p.onlyA, p.staleA, p.multiB, p.onlyB]) expectIntact(att);
  });
});

describe("two networks on one node", () => {
  let a: Network;
  let b: Network;
  beforeEach(() => {
    a = network("nkscope-a", "10.230", "fd30", "host-local");
    b = network("nkscope-b", "10.231", "fd31", "host-local");
  });

  it("the cluster-CIDR trie holds the union of both networks' clusterCIDRs", () => {
    add(a, "a1", fx.makeNetns());
    add(b, "b1", fx.makeNetns());
    expect(clusterTrie()).toEqual(["10.230.0.0/16", "10.231.0.0/16", "fd30::/16", "fd31::/16"]);
    add(a, "a2", fx.makeNetns());
    expect(clusterTrie()).toEqual(["10.230.0.0/16", "10.231.0.0/16", "fd30::/16", "fd31::/16"]);
    // A's list changes: its old CIDRs leave the trie, B's stay.
    const narrower = { ...a.conf, clusterCIDRs: ["10.230.0.0/17"] };
    add(a, "a3", fx.makeNetns(), "eth0", narrower);
    expect(clusterTrie()).toEqual(["10.230.0.0/17", "10.231.0.0/16", "fd31::/16"]);
  });

  it("GC releases host-local addresses (an IPAM without GC) of the attachments it removed", () => {
    const keep = add(a, "keep", fx.makeNetns());
    const stale = add(a, "stale", fx.makeNetns());
    const other = add(b, "stale", fx.makeNetns(), "net1");
    const run = gc(a, [keep]);
    expect(run.status, run.stdout).toBe(0);
    expectCollected(stale);
    expect(reserved(a).sort()).toEqual([keep.v4, keep.v6].sort());
    expectIntact(other);
  });

  it("GC frees host-local addresses of a pod that vanished without DEL, and no other network's", () => {
    // Two addresses per family on A: the next pod gets the vanished pod's, or none.
    const ranges = [
      [{ subnet: "10.230.1.0/24", rangeStart: "10.230.1.10", rangeEnd: "10.230.1.11" }],
      [{ subnet: "fd30:1::/64", rangeStart: "fd30:1::10", rangeEnd: "fd30:1::11" }],
    ];
    const small: Network = { name: a.name, conf: { ...a.conf, ipam: { ...(a.conf.ipam as object), ranges } } };
    const keep = add(small, "keep", fx.makeNetns());
    const pod = fx.makeNetns();
    const gone = add(small, "gone", pod);
    // The same pod's second interface, on B, whose own GC has not run.
    const goneOnB = add(b, "gone", pod, "net1");
    // The pod vanished with its netns, taking both device pairs; no DEL came.
    fx.deleteNetns(pod);
    waitUntil("the vanished pod's pairs to go with its netns", () => {
      const links = pluginLinks(node);
      return !links.includes(gone.hostDevice) && !links.includes(goneOnB.hostDevice);
    });

    const run = gc(small, [keep]);
    expect(run.status, run.stdout).toBe(0);
    expect(reserved(small).sort()).toEqual([keep.v4, keep.v6].sort());
    expectIntact(keep);
    expect(reserved(b).sort()).toEqual([goneOnB.v4, goneOnB.v6].sort());
    const log = fs.readFileSync(path.join(dataDir, "plugin.log"), "utf8");
    expect(log).toContain(`gone/eth0 ${gone.v4} ${gone.v6}`);
    // Freed: the next pod gets them.
    const next = add(small, "next", fx.makeNetns());
    expect([next.v4, next.v6]).toEqual([gone.v4, gone.v6]);
  });

  it("DEL on A of an attachment whose device B owns releases A's addresses and leaves B's device", () => {
    const pod = fx.makeNetns();
    const onB = add(b, "multi", pod, "net1");
    const del = verb("DEL", a, onB);
    expect(del.status, del.stdout).toBe(0);
    expectIntact(onB);
  });
});
