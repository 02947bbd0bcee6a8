/**
 * The frame corpus at the programs' level (BPF_PROG_TEST_RUN): every kind of frame a pod
 * or the wire can send, honest and spoofed, and what the pod's programs and the uplink's
 * make of it, with the reason each refusal is counted under (nkc_drops). A test run hands
 * the program the frame exactly as built: every tag is in the data, skb->protocol is the
 * frame's first ethertype, and the headers are linear. What the kernel does before the
 * programs on a real device (taking the outer tag off, paged headers, a packet socket's
 * own skb->protocol) is proven through the real datapath in test/integration/frames.
 *
 *   pod1 nkbh1  10.244.1.10 fd00:244:1::10     pod2 nkbh2  10.244.1.11 fd00:244:1::11
 *   uplink nkbup (test/bpf/helpers/test-node.ts)
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { deletePodLimits, setPodLimits } from "../../src/bpf/bandwidth/limits";
import type { DropReason, Drops } from "../../src/bpf/fastpath/abi";
import { readDrops } from "../../src/bpf/fastpath/counters";
import { createFlowTable } from "../../src/bpf/fastpath/direct";
import type { BpfProgram } from "../../src/bpf/loader/programs";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import { inNetns } from "../../src/sys/netns";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { arp, type PacketSpec, packet, TCP, TPID, tagged, withEthertype } from "./helpers/packets";
import type { TestNetns } from "./helpers/test-netns";
import { DROP, makeTestNode, NEXT, POD1, POD2, REDIRECT, REMOTE } from "./helpers/test-node";
import { testRun } from "./helpers/test-run";

const CLUSTER = ["10.244.0.0/16", "fd00:244::/32"];
const FOREIGN = { v4: "10.9.9.9", v6: "fd00:9::9" };
const MAPPED = `::ffff:${POD1.v4}`;

let ns: TestNetns;
let h1: number;
let h2: number;
let up: { ifindex: number; mac: string };
let bpffs: TestBpffs;
let node: NodePrograms;

beforeAll(() => {
  ({ ns, h1, h2, up } = makeTestNode("fr"));
  bpffs = TestBpffs.mount();
  node = loadNodePrograms(bpffs.root, buildObjects(), { clusterCidrs: CLUSTER, natChecks: ["memory"] });
  createFlowTable(node.maps.flows, h1);
  createFlowTable(node.maps.flows, h2);
}, 60_000);

afterAll(() => {
  node?.close();
  bpffs?.release();
  ns?.destroy();
});

beforeEach(() => {
  for (const [pod, ifindex] of [
    [POD1, h1],
    [POD2, h2],
  ] as const) {
    node.endpoints.upsert(pod.v4, { hostIfindex: ifindex, datapath: "veth" });
    node.endpoints.upsert(pod.v6, { hostIfindex: ifindex, datapath: "veth" });
  }
  for (const map of [node.maps.counters, node.maps.drops]) {
    for (const key of [...map.keys()]) map.delete(key);
  }
  deletePodLimits(node.maps.bandwidth, h1);
});

const run = (program: BpfProgram, ifindex: number, frame: Buffer) =>
  inNetns(ns.path, () => testRun(program, { packet: frame, ifindex })).verdict;

/** Only the reasons that counted, so each assertion says exactly what moved. */
const refused = (ifindex: number): Partial<Drops> =>
  Object.fromEntries(Object.entries(readDrops(node.maps.drops, ifindex)).filter(([, v]) => v !== 0n));

const udp = (src: string, dst: string, extra: Partial<PacketSpec> = {}) =>
  packet({ src, dst, proto: "udp", sport: 5000, dport: 5000, ...extra });

describe.each([
  ["nkc_from_pod", () => node.programs.fromPod],
  ["nkc_src_check", () => node.programs.sourceCheck],
] as const)("%s: what a pod may send", (_, program) => {
  const send = (frame: Buffer) => run(program(), h1, frame);
  const expectRefused = (frames: Buffer[], why: DropReason) => {
    for (const frame of frames) expect(send(frame)).toBe(DROP);
    expect(refused(h1)).toEqual({ [why]: BigInt(frames.length) });
  };

  describe.each(["v4", "v6"] as const)("%s", (af) => {
    const honest = () => udp(POD1[af], POD2[af]);
    const spoofed = () => udp(POD2[af], POD1[af]);

    it("passes its own untagged packets on and refuses another source", () => {
      expect(send(honest())).not.toBe(DROP);
      expect(send(udp(POD1[af], REMOTE[af]))).not.toBe(DROP);
      expectRefused([spoofed(), udp(FOREIGN[af], POD2[af])], "spoofed");
    });

    it("refuses every tagged frame, honest or not: one or two tags, 802.1Q or 802.1ad, any VLAN", () => {
      expectRefused(
        [
          tagged(honest(), [{ tpid: TPID.q, vid: 0 }]),
          tagged(honest(), [{ tpid: TPID.q, vid: 100 }]),
          tagged(honest(), [{ tpid: TPID.ad, vid: 0 }]),
          tagged(spoofed(), [
            { tpid: TPID.q, vid: 0 },
            { tpid: TPID.q, vid: 0 },
          ]),
          tagged(spoofed(), [
            { tpid: TPID.ad, vid: 200 },
            { tpid: TPID.q, vid: 100 },
          ]),
        ],
        "tagged",
      );
    });

    it("refuses an IP packet under an ethertype it does not speak", () => {
      expectRefused([withEthertype(honest(), 0x88b5), withEthertype(spoofed(), 0x0842)], "ethertype");
    });

    // Headers cut short too, which a test run cannot be given: test/integration/frames.
    it("refuses an IP header it cannot read: of the other IP version, or (IPv4) shorter than 20 bytes", () => {
      const other = withEthertype(honest(), af === "v4" ? 0x86dd : 0x0800);
      const shortIhl = Buffer.from(honest());
      if (af === "v4") shortIhl[14] = 0x44;
      expectRefused(af === "v4" ? [other, shortIhl] : [other], "unparsable");
    });

    it("checks the source of fragments and of packets with options or extension headers", () => {
      const opaque: Partial<PacketSpec> =
        af === "v4"
          ? { fragment: true }
          : { ipv6Ext: [{ type: "hop" }, { type: "dest" }, { type: "fragment", more: true }] };
      const withOptions: Partial<PacketSpec> =
        af === "v4" ? { ipv4Options: Buffer.from([1, 1, 1, 0]) } : { ipv6Ext: Array(7).fill({ type: "dest" }) };
      // Honest ones go to the stack (the programs never redirect what they cannot read whole).
      expect(send(udp(POD1[af], POD2[af], opaque))).toBe(NEXT);
      expect(send(udp(POD1[af], POD2[af], withOptions))).toBe(NEXT);
      expectRefused([udp(POD2[af], POD1[af], opaque), udp(POD2[af], POD1[af], withOptions)], "spoofed");
    });

    it("checks the source of multicast and broadcast packets", () => {
      const group = af === "v4" ? "255.255.255.255" : "ff02::1";
      const routed = af === "v4" ? "239.1.1.1" : "ff05::1";
      expect(send(udp(POD1[af], group))).toBe(NEXT);
      expectRefused([udp(POD2[af], group), udp(FOREIGN[af], routed)], "spoofed");
    });
  });

  it("refuses an IPv4-mapped source: no pod has one", () => {
    expectRefused([udp(MAPPED, POD2.v6), udp(MAPPED, `::ffff:${POD2.v4}`)], "spoofed");
  });

  it("lets the link's own IPv6 through: link-local and unspecified sources (NDP, DAD, MLD)", () => {
    expect(send(packet({ src: "fe80::1", dst: "ff02::2", proto: "icmp", icmpType: 133 }))).toBe(NEXT);
    expect(send(packet({ src: "::", dst: "ff02::1:ff00:10", proto: "icmp", icmpType: 135 }))).toBe(NEXT);
    expect(refused(h1)).toEqual({});
  });

  describe("ARP", () => {
    const own = { senderIp: POD1.v4, targetIp: "169.254.1.1" };

    it("passes requests and replies for the pod's own address", () => {
      expect(send(arp(own))).toBe(NEXT);
      expect(send(arp({ ...own, op: "reply" }))).toBe(NEXT);
      expect(refused(h1)).toEqual({});
    });

    it("refuses ARP for another address: a neighbour's, or a probe's 0.0.0.0", () => {
      expectRefused(
        [
          arp({ ...own, senderIp: POD2.v4 }),
          arp({ ...own, senderIp: "0.0.0.0" }),
          arp({ ...own, senderIp: "10.9.9.9" }),
        ],
        "spoofed",
      );
    });

    it("refuses ARP it cannot read, and tagged ARP", () => {
      expectRefused([arp({ ...own, htype: 6 }), arp(own).subarray(0, 14 + 10)], "unparsable");
      for (const map of [node.maps.drops]) for (const key of [...map.keys()]) map.delete(key);
      expectRefused([tagged(arp(own), [{ tpid: TPID.q, vid: 0 }])], "tagged");
    });

    it("refuses all ARP from a device that resolves no neighbours (netkit L3)", () => {
      node.endpoints.upsert(POD1.v4, { hostIfindex: h1, datapath: "netkit", noArp: true });
      expectRefused([arp(own), arp({ ...own, op: "reply" })], "ethertype");
    });
  });

  it("puts what only the link hears under the pod's egress limit too", () => {
    const bits = 1000 * 8;
    setPodLimits(
      node.maps.bandwidth,
      h1,
      { egress: { rate: 1_000, burst: 3 * bits }, ingress: undefined },
      { mode: "police" },
    );
    const big = Buffer.alloc(1000);
    const linkLocal = packet({ src: "fe80::1", dst: "ff02::1", proto: "icmp", payload: big });
    const verdicts = Array.from({ length: 20 }, () => send(linkLocal));
    // The burst (3 kB) lets the first ones through; the rest of the 20 kB sent at once is over.
    expect(verdicts.filter((v) => v === NEXT).length).toBeLessThanOrEqual(4);
    expect(refused(h1).limit).toBeGreaterThanOrEqual(16n);
  });
});

describe("nkc_host_in: what comes from the wire", () => {
  const fromWire = (frame: Buffer) => run(node.programs.hostIn, up.ifindex, frame);
  const wire = (spec: PacketSpec) => packet({ dstMac: up.mac, ...spec });

  describe.each(["v4", "v6"] as const)("%s", (af) => {
    const honest = () => wire({ src: REMOTE[af], dst: POD2[af], proto: "tcp", tcpFlags: TCP.SYN });
    const spoofed = () => wire({ src: POD1[af], dst: POD2[af], proto: "tcp", tcpFlags: TCP.SYN });

    it("redirects an honest untagged packet for a pod and refuses a local pod's source", () => {
      expect(fromWire(honest())).toBe(REDIRECT);
      expect(fromWire(spoofed())).toBe(DROP);
      expect(refused(up.ifindex)).toEqual({ spoofed: 1n });
    });

    it("reads through one and two tags: a local pod's source is refused at any depth", () => {
      for (const tags of [
        [{ tpid: TPID.q, vid: 0 }],
        [{ tpid: TPID.ad, vid: 0 }],
        [
          { tpid: TPID.q, vid: 0 },
          { tpid: TPID.q, vid: 0 },
        ],
        [
          { tpid: TPID.ad, vid: 200 },
          { tpid: TPID.q, vid: 100 },
        ],
      ]) {
        expect(fromWire(tagged(spoofed(), tags))).toBe(DROP);
      }
      expect(refused(up.ifindex)).toEqual({ spoofed: 4n });
    });

    it("hands honest tagged frames to the stack (the node's VLAN devices), never to a pod directly", () => {
      expect(fromWire(tagged(honest(), [{ tpid: TPID.q, vid: 100 }]))).toBe(NEXT);
      expect(
        fromWire(
          tagged(honest(), [
            { tpid: TPID.ad, vid: 200 },
            { tpid: TPID.q, vid: 100 },
          ]),
        ),
      ).toBe(NEXT);
      expect(refused(up.ifindex)).toEqual({});
    });

    it("refuses a third tag, which it cannot read through, and an IP header of the other version", () => {
      const three = [
        { tpid: TPID.q, vid: 0 },
        { tpid: TPID.q, vid: 0 },
        { tpid: TPID.q, vid: 0 },
      ];
      const other = withEthertype(honest(), af === "v4" ? 0x86dd : 0x0800);
      expect(fromWire(tagged(honest(), three))).toBe(DROP);
      expect(fromWire(other)).toBe(DROP);
      expect(fromWire(tagged(other, [{ tpid: TPID.q, vid: 0 }]))).toBe(DROP);
      expect(refused(up.ifindex)).toEqual({ tagged: 1n, unparsable: 2n });
    });
  });

  it("hands what is not IP to the stack, tagged or not: the node's ARP, LLDP", () => {
    const request = arp({ senderIp: "192.168.50.2", targetIp: "192.168.50.1" });
    expect(fromWire(request)).toBe(NEXT);
    expect(fromWire(tagged(request, [{ tpid: TPID.q, vid: 100 }]))).toBe(NEXT);
    expect(fromWire(withEthertype(request, 0x88cc))).toBe(NEXT);
    expect(refused(up.ifindex)).toEqual({});
  });
});
