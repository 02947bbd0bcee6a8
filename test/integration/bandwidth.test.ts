/**
 * Rate limits (the CNI bandwidth capability) end to end: pods made by the real executable
 * with runtimeConfig.bandwidth as a runtime passes it, TCP throughput measured with
 * netperf between namespaces, and the pinned map read back by CHECK, DEL and GC.
 *
 * Ingress is paced (EDT: departure times released by an fq on the pod's host device) where
 * the kernel has sch_fq, as the guests' kernels do, and shaped by a tbf there where it has
 * not, as on this machine. Egress is paced by the fq on the uplink where the kernel has
 * sch_fq, and policed (a token bucket in the programs: TCP backs off on each drop, so what
 * it achieves sits under the limit, never above it) where it has not. Each test expects
 * what the kernel it runs on allows, and the guests must have fq. netperf reports goodput
 * (payload); the limits charge every segment's headers too.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { decodeBandwidthValue } from "../../src/bpf/bandwidth/abi";
import { ifindexKey } from "../../src/bpf/fastpath/abi";
import { EndpointMap, openNodeMaps, podLimits, readCounters } from "../../src/bpf/index";
import { ifindexHolders } from "../../src/bpf/pod-state";
import { inGuest } from "../support/ceiling";
import { makeTestCgroup } from "../support/cgroup";
import { useCluster } from "../support/fixtures";
import { BINARY, Fixture, inNs, pluginLinks, runPlugin, trySh, uniqueName, waitUntil } from "../support/harness";
import { netperf, startNetserver } from "../support/netperf";
import { addPod, type ClusterNode, delPod, ifindexOf, makeCluster, type Pod } from "../support/topology";

/**
 * The bucket's depth in time at the rate. TCP meets a policer in bursts and loses whole
 * bursts at once: at 10 and 100 Mbit/s a 20 ms bucket let it reach about 11% of the
 * rate, 200 ms 85-95%, 300 ms 91-100%. A full bucket also lets the start of a run go
 * over the rate, by at most BURST_MS / SECONDS (5%).
 */
const BURST_MS = 300;
const SECONDS = 6;
/**
 * Tolerances: policing from 15% under the limit to 5% over; pacing within 5%, and 10%
 * under in a guest: its emulated CPU, when the machine is busy, falls behind the pacing's
 * clock (the qemu lane once measured 93% with 50 ms bursts, the unlimited pod beside it
 * reaching 664 Mbit/s against 5,200 on a quiet run). A policer with so small a bucket
 * stays far below either.
 */
const UNDER = 0.85;
const OVER = 1.05;
const PACED_UNDER = inGuest ? 0.9 : 0.95;
/** Wire bytes per payload byte of a full IPv4 TCP segment at MTU 1500 with timestamps:
 * Ethernet 14 + IPv4 20 + TCP 32 around 1448 bytes of payload. What pacing holds to the
 * limit is the wire rate. */
const WIRE_PER_PAYLOAD = 1514 / 1448;

/**
 * The limits held across nodes, in Mbit/s. The distro lane's emulated guest moves 150-260
 * Mbit/s in all, less with other lanes on the same cores: 100 Mbit/s there measures the
 * emulation as much as the limit, so that lane asks for 10 alone
 * (NETKIT_CNI_TEST_RATE_LIMITS=10).
 */
const CROSS_NODE_LIMITS = (process.env.NETKIT_CNI_TEST_RATE_LIMITS ?? "10,100").split(",").map(Number);

/** Does this kernel have sch_fq? Asked of a namespace of its own. */
function kernelHasFq(): boolean {
  const probe = new Fixture();
  try {
    const ns = probe.makeNetns("nkfq");
    return trySh("nsenter", [`--net=/run/netns/${ns}`, "tc", "qdisc", "add", "dev", "lo", "root", "fq"]).ok;
  } finally {
    probe.cleanup();
  }
}
const FQ = kernelHasFq();
/** Where the plugin keeps which pods each uplink paces (datapath/shaping.ts). */
const PACING_DIR = "/run/netkit-cni/pacing";
/** How egress limits are enforced on this kernel. */
const EGRESS_MODE = FQ ? "edt" : "police";
/** How ingress limits are enforced on this kernel: paced by an fq on the pod's host device,
 * or shaped by a tbf there. */
const INGRESS_MODE = FQ ? "edt" : "qdisc";
const INGRESS_QDISC = FQ ? "fq 4e4b: root" : "tbf 4e4b: root";

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;

useCluster((cluster) => {
  ({ fx, a, b } = cluster);
});

/** A burst of `ms` milliseconds at `rate` bits/s (the reference plugin's unit: bits). */
const burstOf = (rate: number, ms: number) => Math.round((rate * ms) / 1000);

function limitedConf(node: ClusterNode, bandwidth: Record<string, number>, extra: Record<string, unknown> = {}) {
  return { ...node.conf, ...extra, runtimeConfig: { bandwidth } };
}

/** Mbit/s of a TCP_STREAM (client sends) or TCP_MAERTS (server sends) run. */
function mbits(client: Pod, server: Pod, test: "TCP_STREAM" | "TCP_MAERTS"): number {
  const r = netperf(client.netns, server.v4, test, SECONDS);
  if (r.error) throw new Error(r.error);
  return r.value;
}

function expectWithin(measured: number, limitMbit: number): void {
  expect(measured).toBeGreaterThan(limitMbit * UNDER);
  expect(measured).toBeLessThan(limitMbit * OVER);
}

/**
 * An egress measurement held to what this kernel's enforcement promises. Paced, the rate
 * on the wire is the limit within 5% once the full bucket's burst, which leaves at once at
 * the start of the run, is taken out of the average.
 */
function expectEgressWithin(measured: number, limitMbit: number): void {
  if (!FQ) {
    expectWithin(measured, limitMbit);
    return;
  }
  const burstMbit = (limitMbit * BURST_MS) / 1000;
  const sustained = (measured * WIRE_PER_PAYLOAD * SECONDS - burstMbit) / SECONDS;
  expect(sustained).toBeGreaterThan(limitMbit * PACED_UNDER);
  expect(sustained).toBeLessThan(limitMbit * OVER);
}

/**
 * An egress run's Mbit/s. Policed, TCP now and then loses a whole window at once and waits
 * out a retransmission timeout (one run of 100 Mbit/s measured 74.9, runs beside it
 * 96-99): a run under the floor is run once more and the better one counts, while each
 * is held under the ceiling, so a limit that lets too much through still fails.
 */
function egressMbits(measure: () => number, limitMbit: number): number {
  const first = measure();
  if (FQ || first > limitMbit * UNDER) return first;
  expect(first).toBeLessThan(limitMbit * OVER);
  return Math.max(first, measure());
}

interface TcQdisc {
  kind: string;
  handle: string;
  root?: boolean;
  parent?: string;
}
const qdiscsOf = (netns: string, device: string) =>
  (JSON.parse(inNs(netns, "tc", ["-j", "qdisc", "show", "dev", device])) as TcQdisc[]).map((q) =>
    q.root ? `${q.kind} ${q.handle} root` : `${q.kind} parent ${q.parent}`,
  );
const uplinkQdiscs = (node: ClusterNode) => qdiscsOf(node.netns, node.wire);
const hostQdiscs = (pod: Pod) => qdiscsOf(pod.node.netns, pod.hostDevice);

function limitsOn(node: ClusterNode, hostIfindex: number) {
  const maps = openNodeMaps(node.bpffsRoot);
  try {
    return podLimits(maps.bandwidth, hostIfindex);
  } finally {
    maps.close();
  }
}

/** The pod's buckets as the programs left them: their clocks and drop counts. */
function bucketsOn(node: ClusterNode, hostIfindex: number) {
  const maps = openNodeMaps(node.bpffsRoot);
  try {
    const value = maps.bandwidth.lookup(ifindexKey(hostIfindex));
    if (!value) throw new Error(`no limits for ifindex ${hostIfindex}`);
    return decodeBandwidthValue(value);
  } finally {
    maps.close();
  }
}

/**
 * What each direction's enforcement leaves behind after runs that met the limit. Policed,
 * drops: TCP holds under a policer only by losing. Paced, a clock the programs moved
 * during the runs (bpf_ktime_get_ns and process.hrtime both read CLOCK_MONOTONIC): drops
 * there are not owed, since TCP meets a slower link and the fq's own per-flow bound may
 * act before the programs' horizon. Shaped by a tbf alone, no program charges the bucket.
 */
function expectEnforced(buckets: ReturnType<typeof decodeBandwidthValue>, runStart: bigint): void {
  if (EGRESS_MODE === "police") expect(buckets.egress.dropped).toBeGreaterThan(0n);
  else expect(buckets.egress.clockNs).toBeGreaterThan(runStart);
  if (INGRESS_MODE === "edt") expect(buckets.ingress.clockNs).toBeGreaterThan(runStart);
  else expect(buckets.ingress.clockNs).toBe(0n);
}

function limitedCount(node: ClusterNode): number {
  const maps = openNodeMaps(node.bpffsRoot);
  try {
    return ifindexHolders(maps.bandwidth).length;
  } finally {
    maps.close();
  }
}

const ifindex = (pod: Pod) =>
  (JSON.parse(inNs(pod.node.netns, "ip", ["-j", "link", "show", "dev", pod.hostDevice])) as { ifindex: number }[])[0]
    ?.ifindex ?? 0;

const attachment = (pod: Pod) => ({ containerId: pod.containerId, netns: `/run/netns/${pod.netns}`, ifname: "eth0" });

describe("rate limits (veth here, netkit in the VM)", () => {
  it("runs where EDT is proven: the guest kernel has fq", () => {
    // The guest's kernel config requires NET_SCH_FQ (test/vm/kernel.sh); this machine's has none.
    expect(FQ).toBe(Boolean(process.env.NETKIT_VM));
  });

  it.each(CROSS_NODE_LIMITS)(
    "holds a pod to %i Mbit/s both ways across nodes; a pod beside it is not slowed",
    (limit) => {
      const rate = limit * 1e6;
      const bw = {
        ingressRate: rate,
        ingressBurst: burstOf(rate, BURST_MS),
        egressRate: rate,
        egressBurst: burstOf(rate, BURST_MS),
      };
      const limited = addPod(fx, a, `bw-limited-${limit}`, limitedConf(a, bw));
      const free = addPod(fx, a, `bw-free-${limit}`);
      const server = addPod(fx, b, `bw-server-${limit}`);
      startNetserver(fx, server.netns);
      startNetserver(fx, limited.netns);

      const runStart = process.hrtime.bigint();
      const egress = egressMbits(() => mbits(limited, server, "TCP_STREAM"), limit);
      const ingress = mbits(limited, server, "TCP_MAERTS");
      const unlimited = mbits(free, server, "TCP_STREAM");
      console.log(
        `limit ${limit} Mbit/s: egress ${egress} (${EGRESS_MODE}), ingress ${ingress}, unlimited pod ${unlimited}`,
      );
      expectEgressWithin(egress, limit);
      expectWithin(ingress, limit);
      // Well past what the limit lets through (a busy machine still moves far more than
      // 150 Mbit/s between two namespaces); that it has no limit at all is checked below.
      expect(unlimited).toBeGreaterThan(limit * 1.5);

      const limits = limitsOn(a, ifindex(limited));
      expect(limits).toMatchObject({ mode: EGRESS_MODE, ingress: { rate }, egress: { rate } });
      expectEnforced(bucketsOn(a, ifindex(limited)), runStart);
      expect(limitsOn(a, ifindex(free))).toBeUndefined();
    },
  );

  it("limits what a pod on the same node sends to it (the redirect between pods)", () => {
    const rate = 20e6;
    const limited = addPod(
      fx,
      a,
      "bw-local",
      limitedConf(a, { ingressRate: rate, ingressBurst: burstOf(rate, BURST_MS) }),
    );
    const sender = addPod(fx, a, "bw-sender");
    startNetserver(fx, limited.netns);
    const got = mbits(sender, limited, "TCP_STREAM");
    console.log(`same node, limit 20 Mbit/s: ${got}`);
    expectWithin(got, 20);
    // It was the redirect between the pods that held it, not the stack.
    const maps = openNodeMaps(a.bpffsRoot);
    try {
      expect(readCounters(maps.counters, ifindex(sender)).redirectedLocal).toBeGreaterThan(100n);
    } finally {
      maps.close();
    }
  });

  it("limits the stack's path too (fastPath false: no redirects at all)", () => {
    const rate = 20e6;
    const bw = {
      ingressRate: rate,
      ingressBurst: burstOf(rate, BURST_MS),
      egressRate: rate,
      egressBurst: burstOf(rate, BURST_MS),
    };
    const limited = addPod(fx, a, "bw-stack", limitedConf(a, bw, { fastPath: false }));
    const server = addPod(fx, b, "bw-stack-server");
    startNetserver(fx, server.netns);
    const egress = mbits(limited, server, "TCP_STREAM");
    const ingress = mbits(limited, server, "TCP_MAERTS");
    console.log(`stack path, limit 20 Mbit/s: egress ${egress} (${EGRESS_MODE}), ingress ${ingress}`);
    expectEgressWithin(egress, 20);
    expectWithin(ingress, 20);
  });
});

/*
 * Bursts of 50 ms of the rate, as admins set them in a network config: a policer with so
 * small a bucket lets TCP reach a fraction of the rate, a shaper the whole of it. Ingress
 * is shaped on every kernel (fq where it exists, else tbf, on the pod's host device);
 * egress is paced where the kernel has fq and policed where it has not, so there only the
 * bound is held.
 */
describe("small bursts (50 ms of the rate)", () => {
  const SMALL_MS = 50;
  /** Shaped: at least 90% of the limit over the run, and after the burst (which leaves at
   * once) the limit within 5%; never more than the limit over the run plus the burst. */
  function expectShaped(measured: number, limitMbit: number): void {
    const wire = measured * WIRE_PER_PAYLOAD;
    const burstMbit = (limitMbit * SMALL_MS) / 1000;
    expect(wire).toBeGreaterThan(limitMbit * 0.9);
    const sustained = (wire * SECONDS - burstMbit) / SECONDS;
    expect(sustained).toBeGreaterThan(limitMbit * PACED_UNDER);
    expectBounded(measured, limitMbit);
  }
  /** Never more than rate × time + burst on the wire. netperf times the run itself, a
   * little apart from the kernel's clock: 2% of room for that. */
  function expectBounded(measured: number, limitMbit: number): void {
    const burstMbit = (limitMbit * SMALL_MS) / 1000;
    expect(measured * WIRE_PER_PAYLOAD * SECONDS).toBeLessThan((limitMbit * SECONDS + burstMbit) * 1.02);
  }

  it.each(CROSS_NODE_LIMITS)(
    "reaches %i Mbit/s into a pod across nodes, and holds it out of the pod; a pod beside it is not slowed",
    (limit) => {
      const rate = limit * 1e6;
      const burst = burstOf(rate, SMALL_MS);
      const bw = { ingressRate: rate, ingressBurst: burst, egressRate: rate, egressBurst: burst };
      const limited = addPod(fx, a, `bw-small-${limit}`, limitedConf(a, bw));
      const free = addPod(fx, a, `bw-small-free-${limit}`);
      const server = addPod(fx, b, `bw-small-server-${limit}`);
      startNetserver(fx, server.netns);
      startNetserver(fx, free.netns);

      expect(hostQdiscs(limited)).toEqual([INGRESS_QDISC]);
      const ingress = mbits(limited, server, "TCP_MAERTS");
      const egress = mbits(limited, server, "TCP_STREAM");
      const beside = mbits(free, server, "TCP_MAERTS");
      console.log(
        `limit ${limit} Mbit/s, 50 ms bursts: ingress ${ingress} (${INGRESS_MODE}), egress ${egress} (${EGRESS_MODE}), unlimited pod ${beside}`,
      );
      expectShaped(ingress, limit);
      if (FQ) expectShaped(egress, limit);
      else expectBounded(egress, limit);
      expect(beside).toBeGreaterThan(limit * 1.5);
      expect(limitsOn(a, ifindex(limited))).toMatchObject({ mode: EGRESS_MODE, ingressMode: INGRESS_MODE });
      // The unlimited pod keeps the peer redirect, and no qdisc.
      expect(hostQdiscs(free)).toEqual(["noqueue 0: root"]);
    },
  );

  it("reaches the limit from a pod on the same node, through the host device's qdisc", () => {
    const rate = 20e6;
    const limited = addPod(
      fx,
      a,
      "bw-small-local",
      limitedConf(a, { ingressRate: rate, ingressBurst: burstOf(rate, SMALL_MS) }),
    );
    const sender = addPod(fx, a, "bw-small-sender");
    startNetserver(fx, limited.netns);
    const got = mbits(sender, limited, "TCP_STREAM");
    console.log(`same node, limit 20 Mbit/s, 50 ms bursts: ${got} (${INGRESS_MODE})`);
    expectShaped(got, 20);
    const maps = openNodeMaps(a.bpffsRoot);
    try {
      expect(readCounters(maps.counters, ifindex(sender)).redirectedLocal).toBeGreaterThan(100n);
    } finally {
      maps.close();
    }
  });
});

describe("rate limits in the pod's lifecycle", () => {
  const bw = { ingressRate: 5e6, ingressBurst: 1e6, egressRate: 8e6, egressBurst: 2e6 };

  it("CHECK holds the map to the config; DEL removes the entry", () => {
    const conf = limitedConf(a, bw);
    const pod = addPod(fx, a, "bw-check", conf);
    const check = (c: Record<string, unknown>) =>
      runPlugin(a.netns, "CHECK", attachment(pod), { ...c, prevResult: pod.add.json });
    expect(check(conf).status).toBe(0);

    // The config asks for other rates than the pod has.
    const other = check(limitedConf(a, { ...bw, egressRate: 9e6 }));
    expect(other.status).not.toBe(0);
    expect(JSON.stringify(other.json)).toContain("egress is 8000000 bit/s");

    // The entry is gone.
    const maps = openNodeMaps(a.bpffsRoot);
    try {
      const key = Buffer.alloc(4);
      key.writeUInt32LE(ifindex(pod));
      maps.bandwidth.delete(key);
    } finally {
      maps.close();
    }
    const gone = check(conf);
    expect(gone.status).not.toBe(0);
    expect(JSON.stringify(gone.json)).toContain("limit of 5000000 bit/s is missing");

    expect(delPod({ ...pod, add: { ...pod.add } }).status).toBe(0);
    expect(limitedCount(a)).toBe(0);
  });

  it("CHECK notices the host device's qdisc gone; DEL and GC take it with the device", () => {
    const conf = limitedConf(a, bw);
    const pod = addPod(fx, a, "bw-qdisc", conf);
    const stale = addPod(fx, a, "bw-qdisc-stale", conf);
    expect(hostQdiscs(pod)).toEqual([INGRESS_QDISC]);
    const check = () => runPlugin(a.netns, "CHECK", attachment(pod), { ...conf, prevResult: pod.add.json });
    expect(check().status).toBe(0);
    inNs(a.netns, "tc", ["qdisc", "del", "dev", pod.hostDevice, "root"]);
    const r = check();
    expect(r.status).not.toBe(0);
    expect(String(r.json?.msg)).toContain(`by ${INGRESS_QDISC.split(" ")[0]} 4e4b: on the host device, which has`);

    const gc = runPlugin(
      a.netns,
      "GC",
      {},
      { ...a.conf, "cni.dev/valid-attachments": [{ containerID: pod.containerId, ifname: "eth0" }] },
    );
    expect(gc.status).toBe(0);
    expect(trySh("nsenter", [`--net=/run/netns/${a.netns}`, "tc", "qdisc", "show", "dev", stale.hostDevice]).ok).toBe(
      false,
    );
    expect(delPod(pod).status).toBe(0);
    expect(trySh("nsenter", [`--net=/run/netns/${a.netns}`, "tc", "qdisc", "show", "dev", pod.hostDevice]).ok).toBe(
      false,
    );
    // Nothing of ours is left on any device of the node.
    expect(inNs(a.netns, "tc", ["qdisc", "show"])).not.toContain("4e4b:");
  });

  it("DEL and GC leave no entry behind", () => {
    const kept = addPod(fx, a, "bw-kept", limitedConf(a, bw));
    const stale = addPod(fx, a, "bw-stale", limitedConf(a, bw));
    expect(limitedCount(a)).toBe(2);
    const gc = runPlugin(
      a.netns,
      "GC",
      {},
      {
        ...a.conf,
        "cni.dev/valid-attachments": [{ containerID: kept.containerId, ifname: "eth0" }],
      },
    );
    expect(gc.status).toBe(0);
    expect(limitedCount(a)).toBe(1);
    expect(limitsOn(a, ifindex(kept))).toBeDefined();
    expect(fs.existsSync(path.join(a.bpffsRoot, "endpoints", stale.hostDevice))).toBe(false);
    expect(delPod(kept).status).toBe(0);
    expect(limitedCount(a)).toBe(0);
  });

  it("keeps a limited pod's sockets off the socket bypass, which would splice past the limits", () => {
    const cgroup = makeTestCgroup(uniqueName("nkt-bw"));
    try {
      const bypass = { sockBypass: true, sockBypassCgroup: cgroup };
      const limited = addPod(fx, a, "bw-sock", limitedConf(a, bw, bypass));
      const plain = addPod(fx, a, "bw-sock-plain", { ...a.conf, ...bypass });
      const maps = openNodeMaps(a.bpffsRoot);
      try {
        const endpoints = new EndpointMap(maps.endpoints);
        expect(endpoints.get(limited.v4)?.sockBypass).toBeUndefined();
        expect(endpoints.get(plain.v4)?.sockBypass).toBe(true);
      } finally {
        maps.close();
      }
    } finally {
      fx.cleanup(); // the bpffs root, and with it the sock_ops link on the cgroup
      fs.rmdirSync(cgroup);
    }
  });

  it("status and endpoints show each pod's limits and how they are enforced", () => {
    const pod = addPod(fx, a, "bw-show", limitedConf(a, bw));
    addPod(fx, a, "bw-plain");
    const rows = JSON.parse(inNs(a.netns, BINARY, ["endpoints", "--bpffs-root", a.bpffsRoot, "--json"])) as {
      hostDevice: string;
      limits?: { mode: string; ingress?: { rate: number; burst: number }; egress?: { rate: number } };
    }[];
    const row = rows.find((r) => r.hostDevice === pod.hostDevice);
    expect(row?.limits).toMatchObject({
      mode: EGRESS_MODE,
      ingressMode: INGRESS_MODE,
      ingress: { rate: 5e6, burst: 1e6 },
      egress: { rate: 8e6 },
    });
    expect(rows.filter((r) => r.limits).length).toBe(1);
    const table = inNs(a.netns, BINARY, ["endpoints", "-o", "wide", "--bpffs-root", a.bpffsRoot]);
    expect(table).toContain(`in 5M ${INGRESS_MODE} out 8M ${EGRESS_MODE}`);
    const status = JSON.parse(inNs(a.netns, BINARY, ["status", "--bpffs-root", a.bpffsRoot, "--json"])) as {
      bandwidth: {
        limited: number;
        modes: Record<string, number>;
        pacingOff: { uplink: string; reason: string }[];
        ingressModes: Record<string, number>;
        ingressPacingOff?: string;
      };
    };
    expect(status.bandwidth).toMatchObject({
      limited: 1,
      modes: { [EGRESS_MODE]: 1 },
      ingressModes: { [INGRESS_MODE]: 1 },
    });
    const text = inNs(a.netns, BINARY, ["status", "--bpffs-root", a.bpffsRoot]);
    if (FQ) {
      expect(status.bandwidth.pacingOff).toEqual([]);
      expect(status.bandwidth.ingressPacingOff).toBeUndefined();
      expect(text).toMatch(/egress +1 paced \(departure times, released by fq on the uplink\)/);
      expect(text).toMatch(/ingress +1 paced \(departure times, released by fq on its host device\)/);
    } else {
      // Why: this kernel has no fq, in the kernel's words.
      expect(status.bandwidth.pacingOff).toEqual([
        { uplink: "wire0", reason: expect.stringMatching(/cannot attach fq to wire0: .*qdisc kind is unknown/) },
      ]);
      expect(status.bandwidth.ingressPacingOff).toMatch(/^shaped by tbf: no fq \(.*qdisc kind is unknown/);
      expect(text).toMatch(/egress +1 policed \(token bucket in the programs\)/);
      expect(text).toMatch(/ingress +1 shaped \(tbf on its host device\)/);
      expect(text).toMatch(/pacing +egress off on wire0: cannot attach fq/);
      expect(text).toMatch(/pacing +ingress off: shaped by tbf: no fq/);
    }
  });

  it.each([
    [{ egressRate: -1, egressBurst: 1000 }, "runtimeConfig.bandwidth.egressRate"],
    [{ ingressRate: 1e6 }, "runtimeConfig.bandwidth.ingressBurst"],
    [{ ingressBurst: 1e6 }, "runtimeConfig.bandwidth.ingressRate"],
    [{ egressRate: 0, egressBurst: 5 }, "runtimeConfig.bandwidth.egressRate"],
    [{ egressRate: 1e18, egressBurst: 1e6 }, "runtimeConfig.bandwidth.egressRate"],
    [{ ingressRate: 1e6, ingressBurst: 2 ** 40 }, "runtimeConfig.bandwidth.ingressBurst"],
  ])("refuses %j with code 7, leaving nothing behind", (bad, field) => {
    const netns = fx.makeNetns("nkp");
    const att = { containerId: "bw-bad", netns: `/run/netns/${netns}`, ifname: "eth0" };
    const r = runPlugin(a.netns, "ADD", att, limitedConf(a, bad));
    expect(r.status).not.toBe(0);
    expect(r.json).toMatchObject({ code: 7 });
    expect(String(r.json?.msg)).toContain(`"${field}"`);
    expect(pluginLinks(a.netns)).toEqual([]);
    const ipamDir = path.join((a.conf.ipam as { dataDir: string }).dataDir, "cluster");
    const held = fs.existsSync(ipamDir)
      ? fs.readdirSync(ipamDir).filter((f) => /^[0-9a-f.:]+$/.test(f) && /[.:]/.test(f))
      : [];
    expect(held).toEqual([]);
    expect(fs.existsSync(path.join(a.bpffsRoot, "endpoints"))).toBe(false);
    // DEL of the refused pod succeeds all the same, with the same bad values.
    expect(runPlugin(a.netns, "DEL", att, limitedConf(a, bad)).status).toBe(0);
  });
});

/*
 * The uplink's qdisc: made by the first paced pod, shared by every network's paced pods,
 * given back as the kernel's default when the last one goes, and never taken from an admin.
 */
describe("pacing on the uplink (fq where the kernel has it)", () => {
  const bw = { egressRate: 8e6, egressBurst: 2e6 };
  const DEFAULT = ["noqueue 0: root"];

  /** The same node in a second network (a Multus-style second interface, say). */
  function secondNetwork(node: ClusterNode) {
    const dataDir = fx.tempDir("nkt-second-");
    return {
      ...node.conf,
      name: "second",
      ipam: { type: "netkit-cni", ranges: [[{ subnet: "10.231.1.0/24" }]], dataDir },
      runtimeConfig: { bandwidth: bw },
    };
  }

  it("is set up by the first paced pod and kept while any network's paced pod lives", () => {
    expect(uplinkQdiscs(a)).toEqual(DEFAULT);
    const first = addPod(fx, a, "pace-1", limitedConf(a, bw));
    // Ingress limits need no qdisc: an ingress-only pod leaves the uplink as it is.
    addPod(fx, a, "pace-ingress", limitedConf(a, { ingressRate: 8e6, ingressBurst: 2e6 }));
    const second = secondNetwork(a);
    const netns = fx.makeNetns("nkp");
    const other = { containerId: "pace-2", netns: `/run/netns/${netns}`, ifname: "net1" };
    expect(runPlugin(a.netns, "ADD", other, second).status).toBe(0);
    expect(uplinkQdiscs(a)).toEqual(FQ ? ["fq 4e4b: root"] : DEFAULT);
    const wireIndex = ifindexOf(a.netns, "wire0");
    expect(limitsOn(a, ifindex(first))).toMatchObject(
      FQ ? { mode: "edt", pacedIfindex: wireIndex } : { mode: "police", pacedIfindex: 0 },
    );

    // GC of the first network takes its pods; the second network's still needs the fq.
    const gc = runPlugin(a.netns, "GC", {}, { ...a.conf, "cni.dev/valid-attachments": [] });
    expect(gc.status).toBe(0);
    expect(uplinkQdiscs(a)).toEqual(FQ ? ["fq 4e4b: root"] : DEFAULT);
    // Its last paced pod gone, the uplink has its default back; DEL again changes nothing.
    expect(runPlugin(a.netns, "DEL", other, second).status).toBe(0);
    expect(uplinkQdiscs(a)).toEqual(DEFAULT);
    expect(runPlugin(a.netns, "DEL", other, second).status).toBe(0);
    expect(uplinkQdiscs(a)).toEqual(DEFAULT);
  });

  it("gives a pod lost without DEL no hold on the uplink: the next DEL or GC restores it", () => {
    const lost = addPod(fx, a, "pace-lost", limitedConf(a, bw));
    const kept = addPod(fx, a, "pace-kept", limitedConf(a, bw));
    // The runtime lost the pod: its netns went, and with it its devices, without DEL.
    fx.deleteNetns(lost.netns);
    // The kernel takes a namespace's devices down in a worker, a moment later.
    waitUntil(
      `${lost.hostDevice} gone`,
      () => !trySh("nsenter", [`--net=/run/netns/${a.netns}`, "ip", "link", "show", "dev", lost.hostDevice]).ok,
    );
    expect(delPod(kept).status).toBe(0);
    expect(uplinkQdiscs(a)).toEqual(DEFAULT);
  });

  it("CHECK fails once the uplink no longer paces a paced pod", () => {
    const conf = limitedConf(a, bw);
    const pod = addPod(fx, a, "pace-check", conf);
    const check = () => runPlugin(a.netns, "CHECK", attachment(pod), { ...conf, prevResult: pod.add.json });
    expect(check().status).toBe(0);
    if (!FQ) return; // policed: nothing on the uplink to lose
    inNs(a.netns, "tc", ["qdisc", "del", "dev", "wire0", "root"]);
    const r = check();
    expect(r.status).not.toBe(0);
    expect(String(r.json?.msg)).toContain("no longer paces them");
  });

  it("puts an fq under mq on each transmit queue of a multi-queue uplink", () => {
    // A cluster of its own, with four queues a side, in place of useCluster's.
    fx.cleanup();
    const mq = new Fixture();
    onTestFinished(() => mq.cleanup());
    fx = mq;
    [a, b] = makeCluster(fx, {}, 4);
    const pod = addPod(fx, a, "pace-mq", limitedConf(a, bw));
    const fqs = ["fq parent 4e4b:1", "fq parent 4e4b:2", "fq parent 4e4b:3", "fq parent 4e4b:4"];
    expect(uplinkQdiscs(a).sort()).toEqual(FQ ? ["mq 4e4b: root", ...fqs].sort() : DEFAULT);
    expect(delPod(pod).status).toBe(0);
    // veth's default: noqueue, however many queues.
    expect(uplinkQdiscs(a)).toEqual(DEFAULT);
  });

  it("leaves an admin's qdisc alone and polices instead, saying why", () => {
    inNs(a.netns, "tc", [
      "qdisc",
      "add",
      "dev",
      "wire0",
      "root",
      "handle",
      "1:",
      "tbf",
      "rate",
      "1gbit",
      "burst",
      "1mb",
      "latency",
      "50ms",
    ]);
    const pod = addPod(fx, a, "pace-admin", limitedConf(a, bw));
    expect(limitsOn(a, ifindex(pod))).toMatchObject({ mode: "police" });
    const status = JSON.parse(inNs(a.netns, BINARY, ["status", "--bpffs-root", a.bpffsRoot, "--json"])) as {
      bandwidth: { pacingOff: { uplink: string; reason: string }[] };
    };
    expect(status.bandwidth.pacingOff).toEqual([
      {
        uplink: "wire0",
        reason: FQ
          ? "wire0 has the qdisc tbf 1:, which is not ours to replace and does not pace departures"
          : expect.any(String),
      },
    ]);
    expect(delPod(pod).status).toBe(0);
    expect(uplinkQdiscs(a)).toEqual(["tbf 1: root"]);
  });

  /*
   * The kernel hands a namespace's inode to the next namespace once it is gone; its cookie
   * never. What is kept under the inode with another cookie is the previous owner's, and
   * what is kept under the inode alone was written by a build from before cookies.
   */
  it("gives a namespace's inode's next owner nothing of the last one's, and adopts an older build's folders", () => {
    // An admin's root: every paced ADD then writes why it polices, with fq or without.
    const tbf = ["root", "handle", "1:", "tbf", "rate", "1gbit", "burst", "1mb", "latency", "50ms"];
    inNs(a.netns, "tc", ["qdisc", "add", "dev", "wire0", ...tbf]);
    const first = addPod(fx, a, "pace-owner-1", limitedConf(a, bw));
    const inode = fs.statSync(`/run/netns/${a.netns}`).ino;
    const wire = ifindexOf(a.netns, "wire0");
    const ours = () =>
      fs
        .readdirSync(PACING_DIR)
        .filter((n) => n.startsWith(`${inode}-`))
        .sort();
    const [note, ...more] = ours();
    expect(more).toEqual([]);
    const cookie = new RegExp(`^${inode}-(\\d+)-${wire}\\.off$`).exec(note ?? "")?.[1];
    expect(cookie, `a note named by the inode, the cookie and wire0's ifindex: ${note}`).toBeDefined();
    const statusOff = () =>
      (
        JSON.parse(inNs(a.netns, BINARY, ["status", "--bpffs-root", a.bpffsRoot, "--json"])) as {
          bandwidth: { pacingOff: { uplink: string; reason: string }[] };
        }
      ).bandwidth.pacingOff;
    const admins = [
      {
        uplink: "wire0",
        reason: "wire0 has the qdisc tbf 1:, which is not ours to replace and does not pace departures",
      },
    ];
    expect(statusOff()).toEqual(admins);

    // What a namespace that had this inode before left: a note, and a folder holding a
    // device name this namespace has too.
    const previous = `${inode}-${BigInt(cookie ?? 0) - 1n}-${wire}`;
    fs.writeFileSync(path.join(PACING_DIR, `${previous}.off`), JSON.stringify({ uplink: "wire0", reason: "not ours" }));
    fs.mkdirSync(path.join(PACING_DIR, previous));
    fs.writeFileSync(path.join(PACING_DIR, previous, first.hostDevice), "");
    // What an older build wrote for this namespace, named by its inode alone.
    const older = `${inode}-${wire}`;
    fs.mkdirSync(path.join(PACING_DIR, older));
    fs.writeFileSync(path.join(PACING_DIR, older, first.hostDevice), "");

    expect(statusOff()).toEqual(admins);
    const second = addPod(fx, a, "pace-owner-2", limitedConf(a, bw));
    const folder = `${inode}-${cookie}-${wire}`;
    expect(ours()).toEqual([folder, `${folder}.off`].sort());
    expect(fs.readdirSync(path.join(PACING_DIR, folder))).toEqual([first.hostDevice]);
    expect(statusOff()).toEqual(admins);

    // The adopted pod's DEL takes its entry and the emptied folder; the admin's qdisc stays.
    expect(delPod(first).status).toBe(0);
    expect(ours()).toEqual([`${folder}.off`]);
    expect(delPod(second).status).toBe(0);
    expect(uplinkQdiscs(a)).toEqual(["tbf 1: root"]);
  });
});
