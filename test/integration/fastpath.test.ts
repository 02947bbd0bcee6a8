/**
 * The eBPF fast path on the veth datapath, end to end across two nodes built in
 * namespaces: which path packets took is read from the per-endpoint counters, and the
 * NAT cases (Service DNAT, hostPort-style DNAT, masquerade) must stay correct because
 * those flows keep going through netfilter.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { ifindexKey, MAP_NAMES } from "../../src/bpf/fastpath/abi";
import { mapPin } from "../../src/bpf/loader/layout";
import { BpfMap } from "../../src/bpf/loader/maps";
import { POD_STATE } from "../../src/bpf/pod-state";
import { POLICY_MAP_NAMES } from "../../src/bpf/policy/abi";
import { endpointMapEntries, pinnedEndpointDevices } from "../../src/datapath/node-state";
import { useCluster } from "../support/fixtures";
import { type Fixture, inNs, ping, runPlugin, runPluginAsync, sh, TEST_DATAPATH } from "../support/harness";
import { addPod, type ClusterNode, counterDelta, delPod, ifindexOf } from "../support/topology";
import { startServer, tcpRequest } from "./tcp";

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;

useCluster((cluster) => {
  ({ fx, a, b } = cluster);
});

describe("fast path", () => {
  it("redirects pod-to-pod traffic on one node (v4 and v6)", () => {
    const p1 = addPod(fx, a, "a1");
    const p2 = addPod(fx, a, "a2");
    const d = counterDelta(p1, () => {
      expect(ping(p1.netns, p2.v4)).toBe(true);
      expect(ping(p1.netns, p2.v6)).toBe(true);
    });
    // Each ping's request took the redirect. (passedStack is not asserted: the pod's own
    // IPv6 housekeeping, e.g. MLD reports, may go to the stack at any moment.)
    expect(d.redirectedLocal).toBeGreaterThanOrEqual(2);
  });

  it("forwards pod-to-pod traffic across nodes by FIB lookup, and delivers wire traffic with redirect_peer", () => {
    const pa = addPod(fx, a, "a1");
    const pb = addPod(fx, b, "b1");
    const da = counterDelta(pa, () => {
      const db = counterDelta(pb, () => {
        expect(ping(pa.netns, pb.v4)).toBe(true);
        expect(ping(pa.netns, pb.v6)).toBe(true);
      });
      // Requests arrive on B's wire and go straight into b1's netns.
      expect(db.redirectedPeer).toBeGreaterThanOrEqual(2);
    });
    expect(da.redirectedFib + da.redirectedNeigh).toBeGreaterThanOrEqual(2);
    expect(da.redirectedPeer).toBeGreaterThanOrEqual(2); // the replies, on A's wire
  });

  it("keeps node-to-pod and pod-to-node traffic working through the stack", () => {
    const pa = addPod(fx, a, "a1");
    expect(ping(a.netns, pa.v4)).toBe(true);
    expect(ping(a.netns, pa.v6)).toBe(true);
    const d = counterDelta(pa, () => expect(ping(pa.netns, a.wireV4)).toBe(true));
    expect(d.passedStack).toBeGreaterThanOrEqual(1);
  });

  it.each([
    ["with the fast path", {}],
    ["with fastPath false (the source check alone)", { fastPath: false }],
  ] as const)("drops packets whose source is not the pod's own address, v4 and v6, %s", (_, extra) => {
    const conf = { ...a.conf, ...extra };
    const p1 = addPod(fx, a, "a1", conf);
    const p2 = addPod(fx, a, "a2", conf);
    inNs(p1.netns, "ip", ["addr", "add", "10.221.1.250/32", "dev", "eth0"]);
    inNs(p1.netns, "ip", ["-6", "addr", "add", "fd21:1::250/128", "dev", "eth0", "nodad"]);
    const spoofedPing = (from: string, to: string) =>
      sh("sh", ["-c", `nsenter --net=/run/netns/${p1.netns} ping -c2 -W1 -I ${from} ${to} >/dev/null 2>&1; echo $?`]);
    const d = counterDelta(p1, () => {
      expect(spoofedPing("10.221.1.250", p2.v4).trim()).not.toBe("0");
      expect(spoofedPing("fd21:1::250", p2.v6).trim()).not.toBe("0");
      // Off the node too: the stack would have routed these.
      expect(spoofedPing("10.221.1.250", a.wireV4).trim()).not.toBe("0");
    });
    expect(d.droppedSpoofed).toBeGreaterThanOrEqual(6);
    expect(ping(p1.netns, p2.v4)).toBe(true); // its own addresses still work
    expect(ping(p1.netns, p2.v6)).toBe(true);
  });

  it("lists our named programs on the right hooks in bpftool, one per pod", () => {
    const pa = addPod(fx, a, "a1");
    const net = JSON.parse(inNs(a.netns, "bpftool", ["-j", "net", "show"])) as {
      tc: { devname: string; kind: string; name: string }[];
    }[];
    const tc = net.flatMap((n) => n.tc ?? []);
    const on = (dev: string, kind: string) => tc.filter((t) => t.devname === dev && t.kind === kind).map((t) => t.name);
    const [fromHook, toHook] =
      TEST_DATAPATH === "netkit" ? ["netkit/peer", "netkit/primary"] : ["tcx/ingress", "tcx/egress"];
    expect(on(pa.hostDevice, fromHook)).toEqual(["nkc_from_pod"]);
    // One link per pod: each one costs an RCU grace period when added and when deleted.
    expect(on(pa.hostDevice, toHook)).toEqual([]);
    expect(on("wire0", "tcx/ingress")).toEqual(["nkc_host_in"]);
    // Nothing watches the uplink's egress: absence of memory may only cost speed.
    expect(on("wire0", "tcx/egress")).toEqual([]);
  });

  it("leaves no pins, endpoint entries or devices after DEL of every pod and GC", () => {
    const pods = [addPod(fx, a, "a1"), addPod(fx, a, "a2")];
    expect(pinnedEndpointDevices(a.bpffsRoot)).toHaveLength(2);
    expect(endpointMapEntries(a.bpffsRoot).size).toBe(4);
    for (const p of pods) expect(delPod(p).status).toBe(0);
    const gc = runPlugin(a.netns, "GC", {}, { ...a.conf, "cni.dev/valid-attachments": [] });
    expect(gc.status, gc.stdout).toBe(0);
    expect(pinnedEndpointDevices(a.bpffsRoot)).toEqual([]);
    expect(endpointMapEntries(a.bpffsRoot).size).toBe(0);
  });

  it("CHECK notices missing programs and missing endpoint entries", () => {
    const pod = addPod(fx, a, "chk");
    const att = { containerId: "chk", netns: `/run/netns/${pod.netns}`, ifname: "eth0" };
    const withPrev = { ...a.conf, prevResult: pod.add.json };
    expect(runPlugin(a.netns, "CHECK", att, withPrev).status).toBe(0);
    fs.rmSync(path.join(a.bpffsRoot, "endpoints", pod.hostDevice), { recursive: true });
    const r = runPlugin(a.netns, "CHECK", att, withPrev);
    expect(r.json).toMatchObject({ code: 101 });
    expect(String(r.json?.msg)).toContain(`eBPF programs of ${pod.hostDevice} are not attached`);
  });

  it("CHECK holds a fastPath false pod to its source check", () => {
    const conf = { ...a.conf, fastPath: false };
    const pod = addPod(fx, a, "plain", conf);
    const att = { containerId: "plain", netns: `/run/netns/${pod.netns}`, ifname: "eth0" };
    const withPrev = { ...conf, prevResult: pod.add.json };
    expect(runPlugin(a.netns, "CHECK", att, withPrev).status).toBe(0);
    fs.rmSync(path.join(a.bpffsRoot, "endpoints", pod.hostDevice), { recursive: true });
    expect(runPlugin(a.netns, "CHECK", att, withPrev).json).toMatchObject({ code: 101 });
  });

  it("concurrent ADDs on a fresh node agree on one set of maps and programs", async () => {
    const runs = await Promise.all(
      Array.from({ length: 8 }, (_, i) => {
        const netns = fx.makeNetns("nkp");
        return runPluginAsync(
          a.netns,
          "ADD",
          { containerId: `par${i}`, netns: `/run/netns/${netns}`, ifname: "eth0" },
          a.conf,
        );
      }),
    );
    for (const r of runs) expect(r.status, r.stdout).toBe(0);
    expect(pinnedEndpointDevices(a.bpffsRoot)).toHaveLength(8);
    expect(endpointMapEntries(a.bpffsRoot).size).toBe(16);
    expect(fs.readdirSync(path.join(a.bpffsRoot, "programs"))).toHaveLength(1);
    expect(fs.statSync(a.bpffsRoot).mode & 0o777).toBe(0o700);
  });

  it("GC prunes the state of a pod whose DEL never came, from every per-pod map", () => {
    // Limited, so that it has state in every map keyed by its ifindex, and talking, so that
    // its counters, refusals and flow table have some.
    const limits = { ingressRate: 1e9, ingressBurst: 1e7, egressRate: 1e9, egressBurst: 1e7 };
    const p = addPod(fx, a, "lost", { ...a.conf, runtimeConfig: { bandwidth: limits } });
    const keep = addPod(fx, a, "kept");
    ping(p.netns, keep.v4);
    // A frame of an ethertype no pod may send (local experimental): refused and counted.
    // netkit reports the program's drop to the sender (ENOBUFS).
    const refused = [
      "import errno, socket",
      "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
      "s.bind(('eth0', 0))",
      "try: s.send(b'\\xff' * 12 + b'\\x88\\xb5' + bytes(46))",
      "except OSError as e:",
      "    if e.errno != errno.ENOBUFS: raise",
    ].join("\n");
    inNs(p.netns, "python3", ["-c", refused]);
    const lost = ifindexOf(a.netns, p.hostDevice);
    // Every per-pod map but NetworkPolicy's: this network does not enforce policy.
    const policyMaps: string[] = Object.values(POLICY_MAP_NAMES);
    expect(holdersOf(lost)).toEqual(NODE_POD_MAPS.filter((n) => !policyMaps.includes(n)).sort());
    // The runtime lost the pod: its netns vanished (taking the veth), no DEL followed.
    fx.deleteNetns(p.netns);
    const gc = runPlugin(
      a.netns,
      "GC",
      {},
      { ...a.conf, "cni.dev/valid-attachments": [{ containerID: "kept", ifname: "eth0" }] },
    );
    expect(gc.status, gc.stdout).toBe(0);
    expect(pinnedEndpointDevices(a.bpffsRoot)).toEqual([keep.hostDevice]);
    expect([...endpointMapEntries(a.bpffsRoot).keys()].sort()).toEqual([keep.v4, keep.v6].sort());
    expect(holdersOf(lost)).toEqual([]);
    expect(holdersOf(ifindexOf(a.netns, keep.hostDevice))).toContain(MAP_NAMES.counters);
  });
});

/** The node's maps that hold pods' state, NetworkPolicy's among them (the bypass and
 * translation are off here). */
const NODE_MAPS: string[] = [...Object.values(MAP_NAMES), ...Object.values(POLICY_MAP_NAMES)];
const NODE_POD_MAPS = POD_STATE.map((s) => s.map).filter((name) => NODE_MAPS.includes(name));

/** The per-pod maps on node A that hold state of `ifindex`. */
function holdersOf(ifindex: number): string[] {
  return NODE_POD_MAPS.filter((name) => {
    const map = BpfMap.openPinned(mapPin(a.bpffsRoot, name));
    try {
      return map.lookup(ifindexKey(ifindex)) !== undefined;
    } finally {
      map.close();
    }
  }).sort();
}

/** A DNAT rule on a node, as kube-proxy (a Service VIP) or portmap (a hostPort) writes one. */
function dnat(netns: string, dst: string, port: number, to: string): void {
  const match = ["-d", dst, "-p", "tcp", "--dport", String(port)];
  inNs(netns, "iptables", ["-t", "nat", "-A", "PREROUTING", ...match, "-j", "DNAT", "--to-destination", to]);
}

describe("NAT stays correct", () => {
  it("a Service VIP DNAT'ed on node A to a pod on node B completes TCP connections", async () => {
    const client = addPod(fx, a, "client");
    const backend = addPod(fx, b, "backend");
    await startServer(fx, backend.netns, "0.0.0.0", 8080);
    dnat(a.netns, "10.96.0.10", 80, `${backend.v4}:8080`);
    const d = counterDelta(client, () => {
      expect(tcpRequest(client.netns, "10.96.0.10", 80)).toBe(`from ${client.v4}`);
    });
    expect(d.passedStack).toBeGreaterThanOrEqual(1);
    // And plain pod-to-pod traffic between the same two pods is still redirected.
    const direct = counterDelta(client, () =>
      expect(tcpRequest(client.netns, backend.v4, 8080)).toBe(`from ${client.v4}`),
    );
    expect(direct.redirectedFib + direct.redirectedNeigh).toBeGreaterThanOrEqual(1);
  });

  it("a hostPort-style DNAT on node B's address reaches a pod on B from a pod on A", async () => {
    const client = addPod(fx, a, "client");
    const backend = addPod(fx, b, "backend");
    await startServer(fx, backend.netns, "0.0.0.0", 8080);
    dnat(b.netns, b.wireV4, 30080, `${backend.v4}:8080`);
    expect(tcpRequest(client.netns, b.wireV4, 30080)).toBe(`from ${client.v4}`);
  });

  it("a node's own connection to a pod on another node survives a masquerade of pod traffic leaving the cluster", async () => {
    const backend = addPod(fx, b, "backend");
    await startServer(fx, backend.netns, "0.0.0.0", 8080);
    await startServer(fx, backend.netns, "::", 8081);
    // On B, what its pods send outside the cluster CIDRs is masqueraded, as the agent's
    // table (or kindnet's) does. Node A's address is outside them: were A's request
    // handed to the pod from the wire, B's conntrack would first see the pod's answer,
    // take it for a new flow out of the cluster and masquerade it, and A would reset it.
    for (const [tool, subnet, cluster] of [
      ["iptables", b.podSubnet4, "10.221.0.0/16"],
      ["ip6tables", b.podSubnet6, "fd21::/16"],
    ] as const) {
      inNs(b.netns, tool, ["-t", "nat", "-A", "POSTROUTING", "-s", subnet, "!", "-d", cluster, "-j", "MASQUERADE"]);
    }
    const d = counterDelta(backend, () => {
      expect(tcpRequest(a.netns, backend.v4, 8080)).toBe(`from ${a.wireV4}`);
      expect(tcpRequest(a.netns, backend.v6, 8081)).toBe(`from ${a.wireV6}`);
    });
    expect(d.redirectedPeer).toBe(0n); // in through B's stack, where conntrack saw them
  });

  it("masquerade to an address outside the cluster CIDRs works", async () => {
    const client = addPod(fx, a, "client");
    await startServer(fx, b.netns, b.wireV4, 9090);
    inNs(a.netns, "iptables", [
      "-t",
      "nat",
      "-A",
      "POSTROUTING",
      "-s",
      a.podSubnet4,
      "!",
      "-d",
      "10.221.0.0/16",
      "-j",
      "MASQUERADE",
    ]);
    const d = counterDelta(client, () => expect(tcpRequest(client.netns, b.wireV4, 9090)).toBe(`from ${a.wireV4}`));
    expect(d.passedStack).toBeGreaterThanOrEqual(1);
  });
});
