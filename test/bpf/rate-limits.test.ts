/**
 * The rate limits (bpf/lib/bandwidth.h) in every program that enforces them, with
 * BPF_PROG_TEST_RUN on hand-built packets in the shared test node (helpers/test-node.ts).
 * Each bucket is 1 kbit/s deep 8000 bits (8 s), and each packet 1000 bytes (8 s at the
 * rate): a full bucket admits one, the next one finds the bucket in debt and is dropped.
 * Refilling takes 8 s, far longer than a test even on a busy machine (at 1 Mbit/s the
 * 8 ms refill was sometimes reached between two runs).
 * Only the memory variant: the limits do not depend on the NAT check.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  deletePodLimits,
  type EgressEnforcement,
  type IngressEnforcement,
  podLimits,
  setPodLimits,
} from "../../src/bpf/bandwidth/limits";
import { ifindexKey } from "../../src/bpf/fastpath/abi";
import { readCounters } from "../../src/bpf/fastpath/counters";
import { createFlowTable } from "../../src/bpf/fastpath/direct";
import type { BpfProgram } from "../../src/bpf/loader/programs";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import { monotonicNs } from "../../src/sys/clock";
import { inNetns } from "../../src/sys/netns";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { arp, type PacketSpec, packet, TCP } from "./helpers/packets";
import type { TestNetns } from "./helpers/test-netns";
import { DROP, makeTestNode, NEXT, POD1, POD2, REDIRECT, REMOTE } from "./helpers/test-node";
import { testRun } from "./helpers/test-run";

const LIMIT = { rate: 1_000, burst: 8_000 };
const SIZE = 1000;
const POLICE: EgressEnforcement = { mode: "police" };

let ns: TestNetns;
let h1: number;
let h2: number;
let up: { ifindex: number; mac: string };
let bpffs: TestBpffs;
let node: NodePrograms;

beforeAll(() => {
  ({ ns, h1, h2, up } = makeTestNode("bw"));
  bpffs = TestBpffs.mount();
  node = loadNodePrograms(bpffs.root, buildObjects(), { clusterCidrs: ["10.244.0.0/16"], natChecks: ["memory"] });
  createFlowTable(node.maps.flows, h1);
  createFlowTable(node.maps.flows, h2);
  for (const [pod, ifindex] of [
    [POD1, h1],
    [POD2, h2],
  ] as const) {
    node.endpoints.upsert(pod.v4, { hostIfindex: ifindex, datapath: "veth" });
  }
}, 60_000);

afterAll(() => {
  node?.close();
  bpffs?.release();
  ns?.destroy();
});

beforeEach(() => {
  for (const ifindex of [h1, h2]) deletePodLimits(node.maps.bandwidth, ifindex);
});

/** A packet of SIZE bytes (padding after the headers: no program reads the IP length). */
const sized = (spec: PacketSpec) => {
  const p = packet(spec);
  return Buffer.concat([p, Buffer.alloc(SIZE - p.length)]);
};
const run = (program: BpfProgram, ifindex: number, frame: Buffer) =>
  inNetns(ns.path, () => testRun(program, { packet: frame, ifindex })).verdict;
const verdicts = (n: number, send: () => number) => Array.from({ length: n }, send);
const dropped = (ifindex: number) => {
  const l = podLimits(node.maps.bandwidth, ifindex);
  return { ingress: l?.ingress?.dropped, egress: l?.egress?.dropped };
};

describe("egress: the pod's own program", () => {
  const fromPod1 = (program: BpfProgram) =>
    run(program, h1, sized({ src: POD1.v4, dst: REMOTE.v4, proto: "tcp", tcpFlags: TCP.SYN }));

  it("nkc_from_pod admits a full bucket's worth, then drops and counts", () => {
    setPodLimits(node.maps.bandwidth, h1, { egress: LIMIT }, POLICE);
    expect(verdicts(3, () => fromPod1(node.programs.fromPod))).toEqual([REDIRECT, DROP, DROP]);
    expect(dropped(h1)).toEqual({ ingress: undefined, egress: 2 });
  });

  it("nkc_src_check limits the same way", () => {
    setPodLimits(node.maps.bandwidth, h1, { egress: LIMIT }, POLICE);
    expect(verdicts(2, () => fromPod1(node.programs.sourceCheck))).toEqual([NEXT, DROP]);
  });

  it("does not limit a pod without an entry, or a direction without a rate", () => {
    expect(verdicts(3, () => fromPod1(node.programs.fromPod))).toEqual([REDIRECT, REDIRECT, REDIRECT]);
    setPodLimits(node.maps.bandwidth, h1, { ingress: LIMIT }, POLICE);
    expect(verdicts(3, () => fromPod1(node.programs.fromPod))).toEqual([REDIRECT, REDIRECT, REDIRECT]);
  });

  it("lets a packet larger than the burst through a full bucket (a GSO packet must pass)", () => {
    setPodLimits(node.maps.bandwidth, h1, { egress: { rate: LIMIT.rate, burst: 800 } }, POLICE);
    expect(verdicts(2, () => fromPod1(node.programs.fromPod))).toEqual([REDIRECT, DROP]);
  });

  it("leaves a mode it does not know (a later build's) unenforced", () => {
    setPodLimits(node.maps.bandwidth, h1, { egress: LIMIT }, POLICE);
    const value = node.maps.bandwidth.lookup(ifindexKey(h1)) as Buffer;
    value.writeUInt32LE(9, 80); // struct nkc_bandwidth's mode
    node.maps.bandwidth.update(ifindexKey(h1), value);
    expect(verdicts(3, () => fromPod1(node.programs.fromPod))).toEqual([REDIRECT, REDIRECT, REDIRECT]);
  });
});

/*
 * EDT: beyond the burst a packet is not dropped but stamped with the time the rate lets it
 * leave. At 1 Mbit/s a 1000-byte packet costs 8 ms and the 8000-bit burst is 8 ms: the
 * first packet leaves at once, each later one 8 ms after the one before (the clock moves by
 * exactly the cost while it runs ahead of now), until the wait would pass the 100 ms
 * horizon: those are dropped.
 */
describe("egress paced by departure times (EDT)", () => {
  const PACED = { rate: 1_000_000, burst: 8_000 };
  const COST_NS = 8_000_000n;
  const HORIZON_NS = 100_000_000n;
  const edt = (): EgressEnforcement => ({ mode: "edt", pacedIfindex: up.ifindex });
  const sendFrom1 = (program: BpfProgram, dst: string) => {
    const frame = sized({ src: POD1.v4, dst, proto: "tcp", tcpFlags: TCP.SYN });
    const before = monotonicNs();
    const r = inNetns(ns.path, () => testRun(program, { packet: frame, ifindex: h1 }));
    return { verdict: r.verdict, tstamp: r.tstamp, before, after: monotonicNs() };
  };
  const burstOf = (n: number, program: BpfProgram, dst: string) =>
    Array.from({ length: n }, () => sendFrom1(program, dst));
  /** Five times the cost, so that a slow machine keeps up with a burst of a few. */
  const SLOW = { rate: 200_000, burst: 8_000 };
  const SLOW_COST_NS = 40_000_000n;
  const tookLongerThanOneCost = (sent: { before: bigint; after: bigint }[]) =>
    (sent.at(-1)?.after ?? 0n) - (sent[0]?.before ?? 0n) >= SLOW_COST_NS;

  it("nkc_from_pod stamps departures a packet's cost apart on the way to the uplink, and drops beyond the horizon", () => {
    // Judged only when the sender kept ahead of the clock: a pause longer than the lead the
    // burst had built (a busy machine) lets a packet leave at once, rightly. Tried again then.
    const burst = () => {
      setPodLimits(node.maps.bandwidth, h1, { egress: PACED }, edt());
      return burstOf(40, node.programs.fromPod, REMOTE.v4);
    };
    const caughtUp = (sent: { verdict: number; tstamp: bigint }[]) =>
      sent.slice(1).some((s) => s.verdict === REDIRECT && s.tstamp === 0n);
    let sent = burst();
    for (let tries = 1; tries < 5 && caughtUp(sent); tries++) sent = burst();
    expect(caughtUp(sent)).toBe(false);
    expect(sent[0]).toMatchObject({ verdict: REDIRECT, tstamp: 0n });
    const paced = sent.slice(1).filter((s) => s.verdict === REDIRECT);
    expect(paced.length).toBeGreaterThanOrEqual(10);
    paced.forEach((s, i) => {
      if (i > 0) expect(s.tstamp - (paced[i - 1]?.tstamp ?? 0n)).toBe(COST_NS);
      // Never further ahead than the horizon from when it was sent.
      expect(s.tstamp - s.after).toBeLessThanOrEqual(HORIZON_NS);
      expect(s.tstamp).toBeGreaterThan(s.before);
    });
    const drops = sent.filter((s) => s.verdict === DROP).length;
    expect(drops).toBeGreaterThan(0);
    // The first drop comes once the queue is full: a horizon's worth of departures.
    expect(sent.findIndex((s) => s.verdict === DROP)).toBeGreaterThan(10);
    expect(dropped(h1)).toEqual({ ingress: undefined, egress: drops });
  });

  it("nkc_src_check stamps what it hands the stack", () => {
    // Three packets are a cost apart only if they are sent within one cost: a pause longer
    // than that (a busy machine, the guests' interpreter) lets the clock catch up. So the
    // burst is tried again when it took longer, and only a burst that kept up is judged.
    const burst = () => {
      setPodLimits(node.maps.bandwidth, h1, { egress: SLOW }, edt());
      return burstOf(3, node.programs.sourceCheck, REMOTE.v4);
    };
    let sent = burst();
    for (let tries = 1; tries < 5 && tookLongerThanOneCost(sent); tries++) sent = burst();
    expect(tookLongerThanOneCost(sent)).toBe(false);
    expect(sent.map((s) => s.verdict)).toEqual([NEXT, NEXT, NEXT]);
    expect(sent[0]?.tstamp).toBe(0n);
    expect((sent[2]?.tstamp ?? 0n) - (sent[1]?.tstamp ?? 0n)).toBe(SLOW_COST_NS);
  });

  it("polices what stays on the node, from the same clock (no fq on that way)", () => {
    setPodLimits(node.maps.bandwidth, h1, { egress: LIMIT }, edt());
    const sent = burstOf(3, node.programs.fromPod, POD2.v4);
    expect(sent.map((s) => [s.verdict, s.tstamp])).toEqual([
      [REDIRECT, 0n],
      [DROP, 0n],
      [DROP, 0n],
    ]);
  });

  it("polices what leaves by another device than the paced one", () => {
    setPodLimits(node.maps.bandwidth, h1, { egress: LIMIT }, { mode: "edt", pacedIfindex: h2 });
    expect(burstOf(2, node.programs.fromPod, REMOTE.v4).map((s) => [s.verdict, s.tstamp])).toEqual([
      [REDIRECT, 0n],
      [DROP, 0n],
    ]);
  });

  it("polices the ingress direction of a paced pod", () => {
    setPodLimits(node.maps.bandwidth, h2, { ingress: LIMIT, egress: PACED }, edt());
    const toPod2 = () =>
      inNetns(ns.path, () =>
        testRun(node.programs.podIngress, {
          packet: sized({ src: REMOTE.v4, dst: POD2.v4, proto: "tcp", tcpFlags: TCP.SYN }),
          ifindex: h2,
        }),
      );
    expect(verdicts(2, () => toPod2().verdict)).toEqual([NEXT, DROP]);
  });
});

describe("ingress: every path into the pod", () => {
  it("nkc_host_in limits before its bpf_redirect_peer", () => {
    setPodLimits(node.maps.bandwidth, h2, { ingress: LIMIT }, POLICE);
    const fromWire = () =>
      run(
        node.programs.hostIn,
        up.ifindex,
        sized({ src: REMOTE.v4, dst: POD2.v4, proto: "tcp", tcpFlags: TCP.SYN, dstMac: up.mac }),
      );
    expect(verdicts(2, fromWire)).toEqual([REDIRECT, DROP]);
    expect(dropped(h2)).toEqual({ ingress: 1, egress: undefined });
  });

  it("a local pod's redirect is held to the receiver's ingress limit, not the sender's", () => {
    setPodLimits(node.maps.bandwidth, h2, { ingress: LIMIT }, POLICE);
    const toPod2 = () =>
      run(node.programs.fromPod, h1, sized({ src: POD1.v4, dst: POD2.v4, proto: "tcp", tcpFlags: TCP.SYN }));
    expect(verdicts(2, toPod2)).toEqual([REDIRECT, DROP]);
    expect(dropped(h2)).toEqual({ ingress: 1, egress: undefined });
  });

  it("nkc_pod_ingress limits what the host device transmits into the pod, found by destination", () => {
    setPodLimits(node.maps.bandwidth, h2, { ingress: LIMIT, egress: LIMIT }, POLICE);
    const toPod = (dst: string) =>
      run(node.programs.podIngress, h2, sized({ src: REMOTE.v4, dst, proto: "tcp", tcpFlags: TCP.SYN }));
    expect(verdicts(2, () => toPod(POD2.v4))).toEqual([NEXT, DROP]);
    // Not a limited pod's address (or no endpoint at all): not limited.
    expect(verdicts(2, () => toPod(POD1.v4))).toEqual([NEXT, NEXT]);
    expect(verdicts(2, () => toPod("10.99.0.1"))).toEqual([NEXT, NEXT]);
    expect(run(node.programs.podIngress, h2, arp({ senderIp: "10.244.1.1", targetIp: POD2.v4 }))).toBe(NEXT);
    // The egress bucket is the pod's other one, still full.
    const fromPod2 = run(
      node.programs.fromPod,
      h2,
      sized({ src: POD2.v4, dst: REMOTE.v4, proto: "tcp", tcpFlags: TCP.SYN }),
    );
    expect(fromPod2).toBe(REDIRECT);
  });
});

/*
 * An ingress limit paced (EDT, the fq on the pod's host device) or shaped (a tbf there):
 * everything into the pod must take the host device's transmit, where the qdisc is, so the
 * redirects go there instead of to the peer and charge nothing; nkc_pod_ingress on that
 * transmit charges each packet once, stamping its departure when paced.
 */
describe("ingress paced or shaped on the pod's host device", () => {
  const SLOW = { rate: 200_000, burst: 8_000 };
  const SLOW_COST_NS = 40_000_000n;
  const EDT_IN: IngressEnforcement = { mode: "edt" };
  const QDISC_IN: IngressEnforcement = { mode: "qdisc" };
  const toPod2 = (tstamp?: bigint) => {
    const frame = sized({ src: REMOTE.v4, dst: POD2.v4, proto: "tcp", tcpFlags: TCP.SYN });
    const before = monotonicNs();
    const r = inNetns(ns.path, () => testRun(node.programs.podIngress, { packet: frame, ifindex: h2, tstamp }));
    return { verdict: r.verdict, tstamp: r.tstamp, before, after: monotonicNs() };
  };
  const fromWire = () =>
    run(
      node.programs.hostIn,
      up.ifindex,
      sized({ src: REMOTE.v4, dst: POD2.v4, proto: "tcp", tcpFlags: TCP.SYN, dstMac: up.mac }),
    );
  const fromPod1 = () =>
    run(node.programs.fromPod, h1, sized({ src: POD1.v4, dst: POD2.v4, proto: "tcp", tcpFlags: TCP.SYN }));

  it("nkc_pod_ingress stamps departures a packet's cost apart instead of dropping", () => {
    // Judged only on a burst sent within one cost (see the egress tests).
    const burst = () => {
      setPodLimits(node.maps.bandwidth, h2, { ingress: SLOW }, POLICE, EDT_IN);
      return Array.from({ length: 3 }, () => toPod2());
    };
    let sent = burst();
    const slow = (s: typeof sent) => (s.at(-1)?.after ?? 0n) - (s[0]?.before ?? 0n) >= SLOW_COST_NS;
    for (let tries = 1; tries < 5 && slow(sent); tries++) sent = burst();
    expect(slow(sent)).toBe(false);
    expect(sent.map((s) => s.verdict)).toEqual([NEXT, NEXT, NEXT]);
    expect(sent[0]?.tstamp).toBe(0n);
    expect(sent[1]?.tstamp).toBeGreaterThan(sent[1]?.before ?? 0n);
    expect((sent[2]?.tstamp ?? 0n) - (sent[1]?.tstamp ?? 0n)).toBe(SLOW_COST_NS);
    expect(dropped(h2)).toEqual({ ingress: 0, egress: undefined });
  });

  it("clears a receive time that fq would read as a departure far ahead", () => {
    setPodLimits(node.maps.bandwidth, h2, { ingress: SLOW }, POLICE, EDT_IN);
    const realtime = BigInt(Date.now()) * 1_000_000n;
    expect(toPod2(realtime)).toMatchObject({ verdict: NEXT, tstamp: 0n });
    // Policed, the same packet keeps its time: nothing paces it.
    setPodLimits(node.maps.bandwidth, h2, { ingress: SLOW }, POLICE);
    expect(toPod2(realtime)).toMatchObject({ verdict: NEXT, tstamp: realtime });
  });

  it("leaves a packet to the qdisc alone when a tbf shapes", () => {
    setPodLimits(node.maps.bandwidth, h2, { ingress: LIMIT }, POLICE, QDISC_IN);
    expect(Array.from({ length: 3 }, () => toPod2()).map((s) => [s.verdict, s.tstamp])).toEqual([
      [NEXT, 0n],
      [NEXT, 0n],
      [NEXT, 0n],
    ]);
    expect(dropped(h2)).toEqual({ ingress: 0, egress: undefined });
  });

  it.each([
    ["paced", EDT_IN],
    ["shaped", QDISC_IN],
  ])("%s: nkc_host_in and a local pod redirect to the host device, never to the peer, charging nothing", (_, how) => {
    setPodLimits(node.maps.bandwidth, h2, { ingress: LIMIT }, POLICE, how);
    const before = readCounters(node.maps.counters, h2);
    const sender = readCounters(node.maps.counters, h1);
    expect(verdicts(3, fromWire)).toEqual([REDIRECT, REDIRECT, REDIRECT]);
    expect(verdicts(3, fromPod1)).toEqual([REDIRECT, REDIRECT, REDIRECT]);
    const after = readCounters(node.maps.counters, h2);
    expect(after.redirectedNeigh - before.redirectedNeigh).toBe(3n);
    expect(after.redirectedPeer - before.redirectedPeer).toBe(0n);
    expect(readCounters(node.maps.counters, h1).redirectedLocal - sender.redirectedLocal).toBe(3n);
    // The bucket is untouched: the host device's transmit charges.
    expect(dropped(h2)).toEqual({ ingress: 0, egress: undefined });
  });

  it("keeps the peer redirect for a policed pod", () => {
    setPodLimits(node.maps.bandwidth, h2, { ingress: { rate: 1e9, burst: 1e9 } }, POLICE);
    const before = readCounters(node.maps.counters, h2);
    expect(fromWire()).toBe(REDIRECT);
    expect(readCounters(node.maps.counters, h2).redirectedPeer - before.redirectedPeer).toBe(1n);
  });
});
