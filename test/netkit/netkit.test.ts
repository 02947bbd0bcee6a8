/**
 * The netkit datapath, on a kernel that has netkit (the UML guest: `make test-vm`). The
 * shared integration suite already runs here with netkit pods; these tests cover what
 * only netkit has: the device settings, the backlog crossings it removes, the blackhole
 * before programs are attached, hooks controlled only from the host, and netkit and veth
 * pods side by side. A kernel without netkit fails this suite; it is never skipped.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { attachNetkit, attachTcx, loadNodePrograms } from "../../src/bpf/index";
import { countersOf } from "../../src/datapath/node-state";
import { inNetns } from "../../src/sys/netns";
import { readObjectsDir } from "../bpf/helpers/bpf-objects";
import { countNetifRx, pingMany } from "../integration/netif-rx";
import { useCluster } from "../support/fixtures";
import { BINARY, type Fixture, inNs, ping, pluginLinks, runPlugin, runPluginAsync } from "../support/harness";
import { addPod, type ClusterNode, ifindexOf } from "../support/topology";

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;

useCluster({ datapath: "netkit" }, (cluster) => {
  ({ fx, a, b } = cluster);
});

const details = (netns: string, dev: string) =>
  (JSON.parse(inNs(netns, "ip", ["-d", "-j", "link", "show", "dev", dev])) as Record<string, unknown>[])[0] ?? {};

describe("netkit devices", () => {
  it("are L3 netkit pairs: primary forwards, peer blackholes without programs, MTU on both ends", () => {
    const pod = addPod(fx, a, "nk1", { ...a.conf, mtu: 1400 });
    const host = details(a.netns, pod.hostDevice);
    const info = (host.linkinfo as { info_kind: string; info_data: Record<string, unknown> }) ?? {};
    expect(info.info_kind).toBe("netkit");
    expect(info.info_data).toMatchObject({ mode: "l3", policy: "forward", peer_policy: "blackhole" });
    expect(host.mtu).toBe(1400);
    const peer = details(pod.netns, "eth0");
    expect(peer.mtu).toBe(1400);
    expect(peer.flags).toContain("NOARP");
    // The result names the netkit devices.
    expect(((pod.add.json?.interfaces ?? []) as { name: string }[]).map((i) => i.name)).toEqual([
      pod.hostDevice,
      "eth0",
    ]);
  });

  it("L2 mode gives both ends the MACs we chose", () => {
    const pod = addPod(fx, a, "nkl2", { ...a.conf, mode: "l2" });
    const info = details(a.netns, pod.hostDevice).linkinfo as { info_data: Record<string, unknown> };
    expect(info.info_data.mode).toBe("l2");
    expect(details(pod.netns, "eth0").address).toMatch(/^02:/);
    expect(ping(pod.netns, a.wireV4)).toBe(true);
    expect(ping(a.netns, pod.v6)).toBe(true);
  });
});

describe("backlog-queue crossings (net:netif_rx per 100 pings)", () => {
  it("pod to pod costs what host to host costs, across nodes and on one; plain netkit pays more", () => {
    const pa = addPod(fx, a, "xa");
    const pb = addPod(fx, b, "xb");
    const plainA = addPod(fx, a, "plain-a", { ...a.conf, fastPath: false });
    const plainB = addPod(fx, b, "plain-b", { ...b.conf, fastPath: false });
    pingMany(pa.netns, pb.v4, 5); // warm up neighbours and flows
    pingMany(plainA.netns, plainB.v4, 5);
    pingMany(a.netns, b.wireV4, 5);

    const host = countNetifRx(() => pingMany(a.netns, b.wireV4, 100));
    const fast = countNetifRx(() => pingMany(pa.netns, pb.v4, 100));
    const plain = countNetifRx(() => pingMany(plainA.netns, plainB.v4, 100));
    const neighbour = addPod(fx, a, "xa2");
    const plainNeighbour = addPod(fx, a, "plain-a2", { ...a.conf, fastPath: false });
    pingMany(pa.netns, neighbour.v4, 5);
    pingMany(plainA.netns, plainNeighbour.v4, 5);
    const sameNode = countNetifRx(() => pingMany(pa.netns, neighbour.v4, 100));
    const plainSameNode = countNetifRx(() => pingMany(plainA.netns, plainNeighbour.v4, 100));
    console.log(
      `netif_rx per 100 pings: host↔host ${host}; across nodes netkit ${fast}, plain netkit ${plain}; ` +
        `one node netkit ${sameNode}, plain netkit ${plainSameNode}`,
    );
    // Each ping is two packets; a host process pays one crossing per packet (the wire).
    // The margin of 10 absorbs the pods' own IPv6 housekeeping; a missing redirect costs 100+.
    expect(host).toBeGreaterThanOrEqual(200);
    expect(fast).toBeLessThanOrEqual(host + 10);
    expect(plain).toBeGreaterThanOrEqual(host + 190);
    // One node: the redirect to the other pod's primary costs one crossing (netkit's xmit
    // into the peer), where plain netkit pays two.
    expect(sameNode).toBeLessThanOrEqual(host + 10);
    expect(plainSameNode).toBeGreaterThanOrEqual(sameNode + 190);
  });
});

describe("before and after attach", () => {
  it("drops what the pod sends before its program is attached", async () => {
    const podNs = fx.makeNetns("nkp");
    const pause = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "nkt-pause-")), "paused");
    fx.dirs.push(path.dirname(pause));
    const adding = runPluginAsync(
      a.netns,
      "ADD",
      { containerId: "early", netns: `/run/netns/${podNs}`, ifname: "eth0" },
      a.conf,
      { NETKIT_CNI_PAUSE_AT: "host-configured", NETKIT_CNI_PAUSE_FILE: pause },
    );
    await waitFor(() => fs.existsSync(pause));
    // Addresses and routes are in place, the program is not: the peer policy blackholes.
    expect(ping(podNs, a.wireV4)).toBe(false);
    fs.unlinkSync(pause);
    const added = await adding;
    expect(added.status, added.stdout).toBe(0);
    expect(ping(podNs, a.wireV4)).toBe(true);
  });

  it("refuses, from inside the pod's netns, to attach to or replace the pod's hooks", () => {
    const pod = addPod(fx, a, "guarded");
    const node = loadNodePrograms(a.bpffsRoot, readObjectsDir("dist/bpf"), { clusterCidrs: [] });
    try {
      const eth0 = ifindexOf(pod.netns, "eth0");
      for (const hook of ["peer", "primary"] as const) {
        expect(() =>
          inNetns(`/run/netns/${pod.netns}`, () => attachNetkit(node.programs.fromPod, eth0, hook)),
        ).toThrow();
      }
      // Our program still decides: the pod's traffic is still counted.
      const before = countersOf(a.bpffsRoot, ifindexOf(a.netns, pod.hostDevice))?.passedStack ?? 0n;
      expect(ping(pod.netns, a.wireV4)).toBe(true);
      expect(countersOf(a.bpffsRoot, ifindexOf(a.netns, pod.hostDevice))?.passedStack).toBeGreaterThan(before);
      // tcx on the pod's device is a different hook: attaching there does not displace ours.
      const link = inNetns(`/run/netns/${pod.netns}`, () => attachTcx(node.programs.fromPod, eth0, "ingress"));
      link.close();
    } finally {
      node.close();
    }
  });
});

describe("mixed node", () => {
  it("netkit and veth pods on one node reach each other", () => {
    const nk = addPod(fx, a, "mix-nk");
    const veth = addPod(fx, a, "mix-veth", { ...a.conf, datapath: "veth" });
    expect(details(a.netns, veth.hostDevice).linkinfo).toMatchObject({ info_kind: "veth" });
    for (const [from, to] of [
      [nk, veth],
      [veth, nk],
    ] as const) {
      expect(ping(from.netns, to.v4), `${from.containerId} -> ${to.v4}`).toBe(true);
      expect(ping(from.netns, to.v6), `${from.containerId} -> ${to.v6}`).toBe(true);
    }
  });
});

describe("per-pod datapath (netkit-cni.io/datapath, as CRI passes pod annotations)", () => {
  // What containerd's CRI sends a plugin that declares io.kubernetes.cri.pod-annotations:
  // the pod's annotations under runtimeConfig, K8S_POD_* in CNI_ARGS.
  const criConf = (annotations: Record<string, string>) => ({
    ...a.conf,
    runtimeConfig: { "io.kubernetes.cri.pod-annotations": annotations },
  });
  const criArgs = (name: string) => ({
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=nke2e;K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${name};K8S_POD_UID=uid-${name}`,
  });
  const endpointKinds = () =>
    new Map(
      (
        JSON.parse(inNs(a.netns, BINARY, ["endpoints", "--json", "--bpffs-root", a.bpffsRoot])) as {
          containerId: string;
          datapath: string;
        }[]
      ).map((r) => [r.containerId, r.datapath]),
    );

  it("one netkit and one veth pod on a netkit node: each as asked, reaching each other, the node and a remote pod", () => {
    const remote = addPod(fx, b, "pd-remote");
    const nk = addPod(fx, a, "pd-netkit", criConf({ "other.io/annotation": "x" }));
    const vethNetns = fx.makeNetns("nkp");
    const add = runPlugin(
      a.netns,
      "ADD",
      { containerId: "pd-veth", netns: `/run/netns/${vethNetns}`, ifname: "eth0" },
      criConf({ "netkit-cni.io/datapath": "veth" }),
      criArgs("pd-veth"),
    );
    expect(add.status, add.stdout).toBe(0);
    const ips = (add.json?.ips ?? []) as { address: string }[];
    const vethV4 = ips.find((i) => !i.address.includes(":"))?.address.split("/")[0] ?? "";

    expect(endpointKinds()).toEqual(
      new Map([
        ["pd-netkit", "netkit"],
        ["pd-veth", "veth"],
      ]),
    );
    expect(ping(nk.netns, vethV4)).toBe(true);
    expect(ping(vethNetns, nk.v4)).toBe(true);
    expect(ping(vethNetns, remote.v4)).toBe(true);
    expect(ping(nk.netns, remote.v6)).toBe(true);
    expect(ping(a.netns, vethV4)).toBe(true);

    // DEL comes with the same runtimeConfig; it finds the pod's device whatever its kind.
    const del = runPlugin(
      a.netns,
      "DEL",
      { containerId: "pd-veth", netns: `/run/netns/${vethNetns}`, ifname: "eth0" },
      criConf({ "netkit-cni.io/datapath": "veth" }),
      criArgs("pd-veth"),
    );
    expect(del.status, del.stdout).toBe(0);
    expect(endpointKinds()).toEqual(new Map([["pd-netkit", "netkit"]]));
  });

  it("an unknown value is refused with code 7 naming the annotation, leaving nothing; DEL still succeeds", () => {
    const netns = fx.makeNetns("nkp");
    const att = { containerId: "pd-bogus", netns: `/run/netns/${netns}`, ifname: "eth0" };
    const conf = criConf({ "netkit-cni.io/datapath": "ipvlan" });
    const add = runPlugin(a.netns, "ADD", att, conf, criArgs("pd-bogus"));
    expect(add.status).not.toBe(0);
    expect(add.json).toMatchObject({ code: 7 });
    expect(String(add.json?.msg)).toContain("netkit-cni.io/datapath");
    expect(pluginLinks(a.netns)).toEqual([]);
    expect(runPlugin(a.netns, "DEL", att, conf, criArgs("pd-bogus")).status).toBe(0);
  });
});

async function waitFor(cond: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 20));
  }
}
