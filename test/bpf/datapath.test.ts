/**
 * Every decision of nkc_from_pod and nkc_host_in, run with BPF_PROG_TEST_RUN on
 * hand-built packets inside a namespace we build, so the FIB the programs consult is ours
 * and deterministic. Each NAT check variant this kernel can load runs the whole suite
 * (both here; only "memory" in the JIT-less test VM, where the variant choice itself is
 * tested instead):
 *
 *   pod1  nkbh1 (host side) <-> nkbp1   10.244.1.10   fd00:244:1::10
 *   pod2  nkbh2 (host side) <-> nkbp2   10.244.1.11   fd00:244:1::11
 *   uplink nkbup <-> nkbwire            192.168.50.1/24  fd00:50::1/64
 *     10.244.2.0/24, fd00:244:2::/64 via .2 / ::2   (neighbour entry: FIB SUCCESS)
 *     10.244.3.0/24, fd00:244:3::/64 via .3 / ::3   (no neighbour: FIB NO_NEIGH)
 *   cluster CIDRs 10.244.0.0/16, fd00:244::/32; no default route.
 *
 * Verdicts: TCX_NEXT -1, TCX_DROP 2, and 7 (TC_ACT_REDIRECT == TCX_REDIRECT) for every
 * redirect helper: in test-run the helper only records the target and the program
 * returns its verdict, nothing is transmitted.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Counters } from "../../src/bpf/fastpath/abi";
import { createFlowTable, listEndpointFlows, readFlowStats } from "../../src/bpf/fastpath/direct";
import { conntrackUnavailable } from "../../src/bpf/fastpath/kernel-probe";
import type { BpfProgram } from "../../src/bpf/loader/programs";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import type { NatCheck } from "../../src/bpf/objects";
import { inNetns } from "../../src/sys/netns";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { ageFlows, clearFlowTable, forgetPod, rawEntries, tableId, writeEntries } from "./helpers/flows";
import { arp, type Ipv6Ext, ipv4HeaderValid, type PacketSpec, packet, readMac, readTtl, TCP } from "./helpers/packets";
import type { TestNetns } from "./helpers/test-netns";
import { DROP, GATEWAY_MAC, makeTestNode, NEXT, POD1, POD2, REDIRECT, REMOTE } from "./helpers/test-node";
import { testRun } from "./helpers/test-run";

const REMOTE_NO_NEIGH = { v4: "10.244.3.30", v6: "fd00:244:3::30" };
const VIP = { v4: "10.96.0.10", v6: "fd00:96::10" };
const CLUSTER = ["10.244.0.0/16", "fd00:244::/32"];

/** The variants this kernel runs: conntrack needs a JIT and the conntrack kfuncs. */
const whyNoConntrack = conntrackUnavailable();
const VARIANTS: NatCheck[] = whyNoConntrack ? ["memory"] : ["conntrack", "memory"];

let objects: ReturnType<typeof buildObjects>;
let ns: TestNetns;
let h1: number;
let h2: number;
let up: { ifindex: number; mac: string };

beforeAll(() => {
  objects = buildObjects();
  ({ ns, h1, h2, up } = makeTestNode("dp"));
}, 60_000);

afterAll(() => ns?.destroy());

it(`loads the conntrack variant where the kernel allows kfunc calls, else the memory one${
  whyNoConntrack ? ` (here: ${whyNoConntrack})` : ""
}`, () => {
  const bpffs = TestBpffs.mount();
  try {
    const node = loadNodePrograms(bpffs.root, objects, { clusterCidrs: CLUSTER });
    try {
      expect(node.natCheck).toBe(whyNoConntrack ? "memory" : "conntrack");
      expect(node.skippedVariants).toHaveLength(whyNoConntrack ? 1 : 0);
    } finally {
      node.close();
    }
  } finally {
    bpffs.release();
  }
});

describe.each(VARIANTS)("%s NAT check", (natCheck) => {
  const memory = natCheck === "memory";
  let bpffs: TestBpffs;
  let node: NodePrograms;

  beforeAll(() => {
    bpffs = TestBpffs.mount();
    node = loadNodePrograms(bpffs.root, objects, { clusterCidrs: CLUSTER, natChecks: [natCheck] });
    createFlowTable(node.maps.flows, h1);
    createFlowTable(node.maps.flows, h2);
  });

  afterAll(() => {
    node?.close();
    bpffs?.release();
  });

  beforeEach(() => {
    for (const ip of node.endpoints.list().keys()) node.endpoints.delete(ip);
    for (const [pod, ifindex] of [
      [POD1, h1],
      [POD2, h2],
    ] as const) {
      node.endpoints.upsert(pod.v4, { hostIfindex: ifindex, datapath: "veth" });
      node.endpoints.upsert(pod.v6, { hostIfindex: ifindex, datapath: "veth" });
    }
    for (const ifindex of [h1, h2]) clearFlowTable(node.maps.flows, ifindex);
    for (const map of [node.maps.counters, node.maps.flowStats]) {
      for (const key of [...map.keys()]) map.delete(key);
    }
  });

  const run = (program: BpfProgram, ifindex: number, frame: Buffer) =>
    inNetns(ns.path, () => testRun(program, { packet: frame, ifindex }));
  const fromPod1 = (spec: PacketSpec) => run(node.programs.fromPod, h1, packet(spec));
  const fromPod2 = (spec: PacketSpec) => run(node.programs.fromPod, h2, packet(spec));
  const toUplink = (spec: PacketSpec) => run(node.programs.hostIn, up.ifindex, packet({ dstMac: up.mac, ...spec }));

  /** Only the non-zero counters, so each assertion says exactly what moved. */
  const counted = (ifindex: number): Partial<Counters> =>
    Object.fromEntries(Object.entries(node.readCounters(ifindex)).filter(([, v]) => v !== 0n));
  const clearCounters = () => {
    for (const key of [...node.maps.counters.keys()]) node.maps.counters.delete(key);
  };
  /** The flows an endpoint's table holds, as "a:port-b:port" (sorted ends). */
  const remembered = (ifindex: number) =>
    (listEndpointFlows(node.maps.flows, ifindex) ?? []).map((f) => `${f.a.ip}:${f.a.port}-${f.b.ip}:${f.b.port}`);

  describe.each(["v4", "v6"] as const)("nkc_from_pod (%s)", (af) => {
    it("redirects a connection to a local pod with bpf_redirect_peer and lowers the TTL", () => {
      const r = fromPod1({ src: POD1[af], dst: POD2[af], proto: "tcp", ttl: 64, tcpFlags: TCP.SYN });
      expect(r.verdict).toBe(REDIRECT);
      expect(readTtl(r.packet)).toBe(63);
      if (af === "v4") expect(ipv4HeaderValid(r.packet)).toBe(true);
      expect(counted(h1)).toEqual({ redirectedLocal: 1n });
      // The memory variant remembers the flow in its opener's table; conntrack needs nothing.
      expect(remembered(h1)).toHaveLength(memory ? 1 : 0);
      expect(remembered(h2)).toEqual([]);
    });

    it("forwards to a remote pod with a resolved next hop: FIB SUCCESS, MACs rewritten", () => {
      const r = fromPod1({ src: POD1[af], dst: REMOTE[af], proto: "tcp", ttl: 64, tcpFlags: TCP.SYN });
      expect(r.verdict).toBe(REDIRECT);
      expect(readMac(r.packet, 0)).toBe(GATEWAY_MAC);
      expect(readMac(r.packet, 6)).toBe(up.mac);
      expect(readTtl(r.packet)).toBe(63);
      if (af === "v4") expect(ipv4HeaderValid(r.packet)).toBe(true);
      expect(counted(h1)).toEqual({ redirectedFib: 1n });
    });

    it("forwards to a remote pod whose next hop is unresolved: FIB NO_NEIGH, bpf_redirect_neigh", () => {
      const r = fromPod1({ src: POD1[af], dst: REMOTE_NO_NEIGH[af], proto: "tcp", tcpFlags: TCP.SYN });
      expect(r.verdict).toBe(REDIRECT);
      expect(counted(h1)).toEqual({ redirectedNeigh: 1n });
    });

    it("passes a cluster address the FIB has no route for (NOT_FWDED) to the stack", () => {
      const dst = af === "v4" ? "10.244.9.9" : "fd00:244:9::9";
      expect(fromPod1({ src: POD1[af], dst, proto: "tcp", tcpFlags: TCP.SYN }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 1n });
    });

    it("passes Services, the node and the internet to the stack, and remembers nothing of them", () => {
      const nodeIp = af === "v4" ? "192.168.50.1" : "fd00:50::1";
      const internet = af === "v4" ? "8.8.8.8" : "2001:4860:4860::8888";
      expect(fromPod1({ src: POD1[af], dst: VIP[af], proto: "tcp", tcpFlags: TCP.SYN }).verdict).toBe(NEXT);
      expect(fromPod1({ src: POD1[af], dst: nodeIp, proto: "udp" }).verdict).toBe(NEXT);
      expect(fromPod1({ src: POD1[af], dst: internet, proto: "icmp" }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 3n });
      expect(remembered(h1)).toEqual([]);
    });

    it("drops a spoofed source: another pod's address, or an unknown one", () => {
      expect(fromPod1({ src: POD2[af], dst: REMOTE[af], proto: "tcp" }).verdict).toBe(DROP);
      const unknown = af === "v4" ? "10.9.9.9" : "fd00:9::9";
      expect(fromPod1({ src: unknown, dst: POD2[af], proto: "udp" }).verdict).toBe(DROP);
      expect(counted(h1)).toEqual({ droppedSpoofed: 2n });
    });

    it("keeps the replies of a flow opened through a Service (DNAT to a local pod) on the stack", () => {
      // pod1 opens a connection to a VIP; the stack DNATs it to pod2:8080 and delivers it
      // through pod2's device, where no program watches. Nothing proves pod2's answer
      // direct: without memory it goes to the stack, where conntrack gives it the VIP back.
      fromPod1({ src: POD1[af], dst: VIP[af], proto: "tcp", sport: 40002, dport: 80, tcpFlags: TCP.SYN });
      const reply = { src: POD2[af], dst: POD1[af], proto: "tcp", sport: 8080, dport: 40002 } as const;
      if (memory) {
        expect(fromPod2({ ...reply, tcpFlags: TCP.SYN | TCP.ACK }).verdict).toBe(NEXT);
        expect(fromPod2(reply).verdict).toBe(NEXT);
        expect(counted(h2)).toEqual({ passedStackUnproven: 2n });
      } else {
        // Conntrack never saw this flow (the test-run SYN went nowhere): nothing is NAT'd,
        // so it is direct. The NAT'd case runs against real conntrack entries below.
        expect(fromPod2(reply).verdict).toBe(REDIRECT);
      }
    });

    it("treats UDP by what conntrack says, or (memory) as unprovable: the stack", () => {
      const r = fromPod1({ src: POD1[af], dst: POD2[af], proto: "udp", sport: 5000, dport: 53 });
      expect(r.verdict).toBe(memory ? NEXT : REDIRECT);
      expect(counted(h1)).toEqual(memory ? { passedStackUnproven: 1n } : { redirectedLocal: 1n });
      // The answer, and the flow again: still nothing to prove them, and nothing remembered.
      expect(fromPod2({ src: POD2[af], dst: POD1[af], proto: "udp", sport: 53, dport: 5000 }).verdict).toBe(
        memory ? NEXT : REDIRECT,
      );
      expect(fromPod1({ src: POD1[af], dst: POD2[af], proto: "udp", sport: 5000, dport: 53 }).verdict).toBe(
        memory ? NEXT : REDIRECT,
      );
      for (const ifindex of [h1, h2]) {
        expect(remembered(ifindex)).toEqual([]);
        expect(readFlowStats(node.maps.flowStats, ifindex)).toEqual({ remembered: 0n, forgotten: 0n });
      }
    });

    it("a table handed to a new holder proves nothing the previous one, or its late writes, remembered", () => {
      const request = { src: POD1[af], dst: POD2[af], proto: "icmp", echoId: 91 } as const;
      const reply = { src: POD2[af], dst: POD1[af], proto: "icmp", echoId: 91, echoReply: true } as const;
      expect(fromPod1(request).verdict).toBe(REDIRECT);
      const written = rawEntries(node.maps.flows, h1);
      expect(written).toHaveLength(1);
      // DEL of pod 1, then ADD of a pod on the same ifindex: it takes the freed table.
      const table = tableId(node.maps.flows, h1);
      forgetPod(node.maps, h1);
      createFlowTable(node.maps.flows, h1);
      expect(tableId(node.maps.flows, h1)).toBe(table);
      expect(fromPod2(reply).verdict).toBe(NEXT);
      // A program of the old pod, still running at its DEL, writes after the handover.
      writeEntries(node.maps.flows, h1, written);
      expect(fromPod2(reply).verdict).toBe(NEXT);
      expect(remembered(h1)).toEqual([]);
      // The same entry written under the new holder's generation does prove the flow.
      writeEntries(node.maps.flows, h1, written, true);
      expect(fromPod2(reply).verdict).toBe(REDIRECT);
    });

    it("redirects an echo request and remembers it; an echo reply needs that request", () => {
      const request = { src: POD1[af], dst: POD2[af], proto: "icmp", echoId: 77 } as const;
      const reply = { src: POD2[af], dst: POD1[af], proto: "icmp", echoId: 77, echoReply: true } as const;
      expect(fromPod2({ ...reply, echoId: 78 }).verdict).toBe(NEXT); // no request seen
      expect(fromPod1(request).verdict).toBe(REDIRECT);
      expect(fromPod2(reply).verdict).toBe(REDIRECT);
      expect(counted(h2)).toEqual({ passedStackUnproven: 1n, redirectedLocal: 1n });
      // A reply long after its request proves nothing any more.
      ageFlows(node.maps.flows, h1, 60);
      expect(fromPod2(reply).verdict).toBe(NEXT);
    });

    it("leaves TTL expiry, fragments and ICMP errors to the stack", () => {
      expect(fromPod1({ src: POD1[af], dst: POD2[af], proto: "tcp", ttl: 1, tcpFlags: TCP.SYN }).verdict).toBe(NEXT);
      expect(fromPod1({ src: POD1[af], dst: POD2[af], proto: "icmp", icmpType: af === "v4" ? 3 : 1 }).verdict).toBe(
        NEXT,
      );
      const fragment: PacketSpec =
        af === "v4"
          ? { src: POD1.v4, dst: POD2.v4, proto: "tcp", fragment: true, tcpFlags: TCP.SYN }
          : {
              src: POD1.v6,
              dst: POD2.v6,
              proto: "tcp",
              ipv6Ext: [{ type: "fragment", more: true }],
              tcpFlags: TCP.SYN,
            };
      expect(fromPod1(fragment).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 3n });
      expect(remembered(h1)).toEqual([]);
    });
  });

  if (memory) {
    describe.each(["v4", "v6"] as const)("TCP without conntrack (%s)", (af) => {
      const flow = { src: POD1[af], dst: POD2[af], proto: "tcp", sport: 41000, dport: 8080 } as const;
      const back = { src: POD2[af], dst: POD1[af], proto: "tcp", sport: 8080, dport: 41000 } as const;

      it("redirects a connection that opened in front of it, both ways", () => {
        expect(fromPod1({ ...flow, tcpFlags: TCP.SYN }).verdict).toBe(REDIRECT);
        expect(fromPod2({ ...back, tcpFlags: TCP.SYN | TCP.ACK }).verdict).toBe(REDIRECT);
        expect(fromPod1(flow).verdict).toBe(REDIRECT);
        expect(fromPod2(back).verdict).toBe(REDIRECT);
        expect(fromPod1({ ...flow, tcpFlags: TCP.FIN | TCP.ACK }).verdict).toBe(REDIRECT);
        const key = af === "v4" ? `${POD1.v4}:41000-${POD2.v4}:8080` : `${POD1.v6}:41000-${POD2.v6}:8080`;
        expect(remembered(h1)).toEqual([key]); // the opener's table; pod2 finds it there
        expect(remembered(h2)).toEqual([]);
      });

      it("sends a connection it did not see open to the stack", () => {
        expect(fromPod1(flow).verdict).toBe(NEXT);
        expect(fromPod2({ ...back, tcpFlags: TCP.SYN | TCP.ACK }).verdict).toBe(NEXT);
        expect(counted(h1)).toEqual({ passedStackUnproven: 1n });
      });

      it("does not let an old flow's entry vouch for a new flow on the same 5-tuple", () => {
        // The 5-tuple was direct once; its entry outlived the connection. Later the same
        // client port reaches the same backend through a Service: its SYN went to the VIP,
        // so the first packet we see of it is the backend's SYN-ACK.
        fromPod1({ ...flow, tcpFlags: TCP.SYN });
        ageFlows(node.maps.flows, h1, 60);
        expect(fromPod2({ ...back, tcpFlags: TCP.SYN | TCP.ACK }).verdict).toBe(NEXT);
        expect(fromPod2(back).verdict).toBe(NEXT); // and the rest of it follows
        expect(readFlowStats(node.maps.flowStats, h1)).toEqual({ remembered: 1n, forgotten: 1n });
      });

      it("takes the wire's SYN as proof on the receiving node", () => {
        const remote = { src: REMOTE[af], dst: POD1[af], proto: "tcp", sport: 42000, dport: 80 } as const;
        expect(toUplink(remote).verdict).toBe(NEXT);
        expect(toUplink({ ...remote, tcpFlags: TCP.SYN }).verdict).toBe(REDIRECT);
        const answer = { src: POD1[af], dst: REMOTE[af], proto: "tcp", sport: 80, dport: 42000 } as const;
        expect(fromPod1({ ...answer, tcpFlags: TCP.SYN | TCP.ACK }).verdict).toBe(REDIRECT);
        expect(toUplink(remote).verdict).toBe(REDIRECT);
      });
    });

    it("gives each pod its own memory: one pod's flood evicts only its own flows", () => {
      fromPod1({ src: POD1.v4, dst: POD2.v4, proto: "tcp", sport: 43000, dport: 80, tcpFlags: TCP.SYN });
      // pod2 opens twice as many connections as its table holds, each seen twice: to a
      // pod elsewhere, and to pod1 itself.
      for (let port = 1; port <= 2048; port++) {
        for (let i = 0; i < 2; i++) {
          const dst = port % 2 ? REMOTE.v4 : POD1.v4;
          fromPod2({ src: POD2.v4, dst, proto: "tcp", sport: port, dport: 80, tcpFlags: TCP.SYN });
        }
      }
      expect(remembered(h1)).toEqual([`${POD1.v4}:43000-${POD2.v4}:80`]);
      expect(fromPod1({ src: POD1.v4, dst: POD2.v4, proto: "tcp", sport: 43000, dport: 80 }).verdict).toBe(REDIRECT);
      const stats = readFlowStats(node.maps.flowStats, h2);
      expect(stats.remembered).toBeGreaterThanOrEqual(2048n);
      expect(remembered(h2).length).toBeLessThanOrEqual(1024);
    });
  }

  describe.each(["v4", "v6"] as const)("nkc_host_in (%s)", (af) => {
    it("hands a connection for a local pod to it with bpf_redirect_peer", () => {
      const r = toUplink({ src: REMOTE[af], dst: POD1[af], proto: "tcp", ttl: 60, tcpFlags: TCP.SYN });
      expect(r.verdict).toBe(REDIRECT);
      expect(readTtl(r.packet)).toBe(59);
      if (af === "v4") expect(ipv4HeaderValid(r.packet)).toBe(true);
      expect(counted(h1)).toEqual({ redirectedPeer: 1n });
    });

    it("passes everything else to the stack", () => {
      const nodeIp = af === "v4" ? "192.168.50.1" : "fd00:50::1";
      expect(toUplink({ src: REMOTE[af], dst: nodeIp, proto: "udp" }).verdict).toBe(NEXT);
      expect(toUplink({ src: REMOTE[af], dst: REMOTE_NO_NEIGH[af], proto: "udp" }).verdict).toBe(NEXT);
      expect(counted(up.ifindex)).toEqual({ passedStack: 2n });
    });

    it("passes a flow from outside the cluster's pod CIDRs to the stack, so conntrack sees its request", () => {
      // Another node's own address, say: the pod's replies leave through the stack, where
      // a masquerade of pod traffic leaving the cluster would rewrite them unless
      // conntrack knows the connection.
      const nodeElsewhere = af === "v4" ? "192.168.50.2" : "fd00:50::2";
      const syn = { src: nodeElsewhere, dst: POD1[af], proto: "tcp", tcpFlags: TCP.SYN } as const;
      expect(toUplink(syn).verdict).toBe(NEXT);
      expect(toUplink({ src: nodeElsewhere, dst: POD1[af], proto: "udp" }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 2n });
    });

    it("passes a frame for another MAC (PACKET_OTHERHOST) to the stack", () => {
      const frame = packet({ src: REMOTE[af], dst: POD1[af], proto: "tcp", dstMac: "02:99:99:99:99:99" });
      expect(run(node.programs.hostIn, up.ifindex, frame).verdict).toBe(NEXT);
    });

    it("drops a packet from the wire whose source is a local pod's address", () => {
      expect(toUplink({ src: POD2[af], dst: POD1[af], proto: "tcp", tcpFlags: TCP.SYN }).verdict).toBe(DROP);
      const nodeIp = af === "v4" ? "192.168.50.1" : "fd00:50::1";
      expect(toUplink({ src: POD1[af], dst: nodeIp, proto: "udp" }).verdict).toBe(DROP);
      expect(counted(up.ifindex)).toEqual({ droppedSpoofed: 2n });
      expect(counted(h1)).toEqual({});
    });

    it("keeps a reply for a local client that reached a backend elsewhere through a Service on the stack", () => {
      fromPod1({ src: POD1[af], dst: VIP[af], proto: "tcp", sport: 40030, dport: 80, tcpFlags: TCP.SYN });
      clearCounters();
      const reply = { src: REMOTE[af], dst: POD1[af], proto: "tcp", sport: 8080, dport: 40030 } as const;
      if (memory) {
        expect(toUplink({ ...reply, tcpFlags: TCP.SYN | TCP.ACK }).verdict).toBe(NEXT);
        expect(toUplink(reply).verdict).toBe(NEXT);
        expect(counted(h1)).toEqual({ passedStackUnproven: 2n });
      } else {
        expect(toUplink(reply).verdict).toBe(REDIRECT); // conntrack knows no NAT here
      }
    });
  });

  describe("headers that cannot fool the parser", () => {
    const syn = { src: POD1.v6, dst: POD2.v6, proto: "tcp", sport: 44000, dport: 80, tcpFlags: TCP.SYN } as const;
    const key = `${POD1.v6}:44000-${POD2.v6}:80`;

    it.each([
      ["hop-by-hop", [{ type: "hop" }]],
      ["a long hop-by-hop", [{ type: "hop", length: 3 }]],
      // Offset 0 and no more to come (RFC 6946): a whole packet, as the kernel takes it.
      ["an atomic fragment header", [{ type: "fragment" }]],
      [
        "destination options, routing done, AH",
        [{ type: "dest" }, { type: "routing", segmentsLeft: 0 }, { type: "ah" }],
      ],
      [
        "five extension headers",
        [{ type: "hop" }, { type: "dest" }, { type: "dest" }, { type: "ah" }, { type: "dest" }],
      ],
    ] as const)("walks IPv6 %s to the transport header", (_, ipv6Ext) => {
      expect(fromPod1({ ...syn, ipv6Ext: [...ipv6Ext] }).verdict).toBe(REDIRECT);
      if (memory) expect(remembered(h1)).toEqual([key]);
    });

    it.each([
      ["a first fragment", [{ type: "fragment", more: true }]],
      ["a fragment after hop-by-hop", [{ type: "hop" }, { type: "fragment", offset: 0, more: true }]],
      ["a non-first fragment", [{ type: "dest" }, { type: "fragment", offset: 100 }]],
      [
        "a first fragment in the middle of the chain",
        [{ type: "hop" }, { type: "fragment", offset: 0, more: true }, { type: "dest" }],
      ],
      ["a routing header with segments left", [{ type: "routing", segmentsLeft: 1 }]],
      ["a chain longer than the parser follows", Array.from({ length: 7 }, () => ({ type: "dest" }) as const)],
    ] as const)("sends IPv6 with %s to the stack, remembering nothing", (_, ipv6Ext) => {
      expect(fromPod1({ ...syn, ipv6Ext: [...ipv6Ext] }).verdict).toBe(NEXT);
      expect(toUplink({ ...syn, src: REMOTE.v6, dst: POD1.v6, ipv6Ext: [...ipv6Ext] }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 2n });
      expect(remembered(h1)).toEqual([]);
    });

    it("gives a SYN behind hop-by-hop and destination options the fast path, from a pod and from the wire", () => {
      const ipv6Ext = (): Ipv6Ext[] => [{ type: "hop" }, { type: "dest" }];
      const r = fromPod1({ ...syn, ttl: 64, ipv6Ext: ipv6Ext() });
      expect(r.verdict).toBe(REDIRECT);
      expect(readTtl(r.packet)).toBe(63);
      // The answer finds the flow by the ports read behind its own chain.
      const synAck = { src: POD2.v6, dst: POD1.v6, proto: "tcp", sport: 80, dport: 44000 } as const;
      expect(fromPod2({ ...synAck, tcpFlags: TCP.SYN | TCP.ACK, ipv6Ext: ipv6Ext() }).verdict).toBe(REDIRECT);
      expect(toUplink({ ...syn, src: REMOTE.v6, dst: POD1.v6, ipv6Ext: ipv6Ext() }).verdict).toBe(REDIRECT);
      expect(counted(h1)).toEqual({ redirectedLocal: 1n, redirectedPeer: 1n });
      expect(counted(h2)).toEqual({ redirectedLocal: 1n });
      if (memory) {
        expect(remembered(h1)).toContain(key);
        expect(remembered(h1)).toHaveLength(2); // and the wire's flow
      }
    });

    it("sends an extension header cut short by the end of the packet to the stack", () => {
      const frame = packet({ ...syn, ipv6Ext: [{ type: "hop", length: 2 }] });
      // Keep the fixed header and the first 8 bytes of a 24-byte hop-by-hop header.
      expect(run(node.programs.fromPod, h1, frame.subarray(0, 14 + 40 + 8)).verdict).toBe(NEXT);
      expect(remembered(h1)).toEqual([]);
    });

    it("sends IPv4 with options, and non-first fragments, to the stack", () => {
      const v4 = { src: POD1.v4, dst: POD2.v4, proto: "tcp", sport: 44000, dport: 80, tcpFlags: TCP.SYN } as const;
      // Loose source route: the destination is not the final one.
      const lsrr = Buffer.from([0x83, 7, 4, 10, 244, 1, 12, 0]);
      expect(fromPod1({ ...v4, ipv4Options: lsrr }).verdict).toBe(NEXT);
      expect(fromPod1({ ...v4, ipv4Options: Buffer.from([0x01, 0x01, 0x01, 0x00]) }).verdict).toBe(NEXT); // NOPs
      expect(fromPod1({ ...v4, fragmentOffset: 100 }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 3n });
      expect(remembered(h1)).toEqual([]);
    });

    it("sends IPv4 with options, and fragments, from the wire for a local pod to the stack", () => {
      const v4 = { src: REMOTE.v4, dst: POD1.v4, proto: "tcp", sport: 44000, dport: 80, tcpFlags: TCP.SYN } as const;
      const lsrr = Buffer.from([0x83, 7, 4, 10, 244, 1, 12, 0]);
      expect(toUplink({ ...v4, ipv4Options: lsrr }).verdict).toBe(NEXT);
      expect(toUplink({ ...v4, ipv4Options: Buffer.from([0x01, 0x01, 0x01, 0x00]) }).verdict).toBe(NEXT); // NOPs
      expect(toUplink({ ...v4, fragment: true }).verdict).toBe(NEXT); // a first fragment: MF, offset 0
      expect(toUplink({ ...v4, fragmentOffset: 100 }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 4n });
      expect(remembered(h1)).toEqual([]);
      // The same SYN whole and without options: redirected. The headers decided, not the flow.
      expect(toUplink(v4).verdict).toBe(REDIRECT);
    });

    it("drops an IPv4 header whose version is wrong", () => {
      const frame = packet({ src: POD1.v4, dst: POD2.v4, proto: "udp" });
      frame[14] = 0x65; // version 6 in an IPv4 ethertype
      expect(run(node.programs.fromPod, h1, frame).verdict).toBe(DROP);
      expect(counted(h1)).toEqual({ droppedOther: 1n });
    });
  });

  describe.each(["v4", "v6"] as const)("nkc_src_check, the program without the fast path (%s)", (af) => {
    const check = (spec: PacketSpec) => run(node.programs.sourceCheck, h1, packet(spec));

    it("passes the pod's own packets to the stack, even to a local pod, remembering nothing", () => {
      expect(check({ src: POD1[af], dst: POD2[af], proto: "tcp", tcpFlags: TCP.SYN }).verdict).toBe(NEXT);
      expect(check({ src: POD1[af], dst: VIP[af], proto: "udp" }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 2n });
      expect(remembered(h1)).toEqual([]);
    });

    it("drops another source, and lets link-local housekeeping and the pod's own ARP through", () => {
      expect(check({ src: POD2[af], dst: REMOTE[af], proto: "tcp" }).verdict).toBe(DROP);
      const ownArp = arp({ senderIp: POD1.v4, targetIp: "169.254.1.1" });
      expect(run(node.programs.sourceCheck, h1, ownArp).verdict).toBe(NEXT);
      if (af === "v6")
        expect(check({ src: "fe80::1", dst: "ff02::2", proto: "icmp", icmpType: 133 }).verdict).toBe(NEXT);
      expect(counted(h1)).toMatchObject({ droppedSpoofed: 1n });
    });
  });

  describe.each([
    ["nkc_from_pod", () => node.programs.fromPod],
    ["nkc_src_check", () => node.programs.sourceCheck],
  ] as const)("%s, IPv6 multicast and the link's own sources", (_, program) => {
    const send = (spec: PacketSpec) => run(program(), h1, packet(spec));

    it("drops another pod's global source to a multicast group, of any scope", () => {
      // Routable multicast (site-local ff05::) and the link's all-nodes group alike: a
      // multicast destination does not make a packet the pod's own link business.
      expect(send({ src: POD2.v6, dst: "ff05::1", proto: "udp", sport: 5000, dport: 5000 }).verdict).toBe(DROP);
      expect(send({ src: POD2.v6, dst: "ff02::1", proto: "icmp" }).verdict).toBe(DROP);
      expect(counted(h1)).toEqual({ droppedSpoofed: 2n });
    });

    it("sends the pod's own global source to a multicast group to the stack", () => {
      expect(send({ src: POD1.v6, dst: "ff05::1", proto: "udp", sport: 5000, dport: 5000 }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 1n });
      expect(remembered(h1)).toEqual([]);
    });

    it("lets a link-local router solicitation and a duplicate address probe from :: through", () => {
      expect(send({ src: "fe80::1", dst: "ff02::2", proto: "icmp", icmpType: 133 }).verdict).toBe(NEXT);
      // DAD: a neighbour solicitation from the unspecified address to the solicited-node group.
      expect(send({ src: "::", dst: "ff02::1:ff00:10", proto: "icmp", icmpType: 135 }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 2n });
    });
  });

  describe("nkc_from_pod, other traffic", () => {
    it("passes the pod's own ARP to the stack", () => {
      const ownArp = arp({ senderIp: POD1.v4, targetIp: "169.254.1.1" });
      expect(run(node.programs.fromPod, h1, ownArp).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 1n });
    });

    it("passes IPv6 link-local traffic (neighbour discovery) instead of calling it spoofed", () => {
      const r = fromPod1({ src: "fe80::1", dst: "ff02::1:ff00:1", proto: "icmp", icmpType: 135 });
      expect(r.verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStack: 1n });
    });

    it("netkit source: plain bpf_redirect to a netkit pod; a veth pod goes via the stack", () => {
      node.endpoints.upsert(POD1.v4, { hostIfindex: h1, datapath: "netkit" });
      node.endpoints.upsert(POD2.v4, { hostIfindex: h2, datapath: "netkit" });
      expect(fromPod1({ src: POD1.v4, dst: POD2.v4, proto: "tcp", tcpFlags: TCP.SYN }).verdict).toBe(REDIRECT);
      node.endpoints.upsert(POD2.v4, { hostIfindex: h2, datapath: "veth" });
      expect(fromPod1({ src: POD1.v4, dst: POD2.v4, proto: "tcp", sport: 1, tcpFlags: TCP.SYN }).verdict).toBe(NEXT);
      expect(counted(h1)).toEqual({ redirectedLocal: 1n, passedStack: 1n });
    });

    it("an endpoint without a table (its DEL under way) remembers nothing and stays correct", () => {
      forgetPod(node.maps, h2);
      try {
        const syn = {
          src: POD2.v4,
          dst: REMOTE.v4,
          proto: "tcp",
          sport: 9,
          dport: 80,
          tcpFlags: TCP.SYN,
        } as const;
        expect(fromPod2(syn).verdict).toBe(REDIRECT);
        const reply = { src: REMOTE.v4, dst: POD2.v4, proto: "tcp", sport: 80, dport: 9 } as const;
        expect(toUplink(reply).verdict).toBe(memory ? NEXT : REDIRECT);
      } finally {
        createFlowTable(node.maps.flows, h2);
      }
    });
  });
});
