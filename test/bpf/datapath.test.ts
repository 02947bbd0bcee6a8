/**
 * Every decision of nkc_from_pod, nkc_host_in and nkc_host_out, run with
 * BPF_PROG_TEST_RUN on hand-built packets inside a namespace we build, so the FIB the
 * programs consult is ours and deterministic:
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
import type { Counters } from "../../src/bpf/abi";
import { clearPathMemory, listClients, listFlows } from "../../src/bpf/flows";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import type { BpfProgram } from "../../src/bpf/programs";
import { testRun } from "../../src/bpf/test-run";
import { inNetns } from "../../src/sys/netns";
import { TestBpffs } from "./helpers/bpffs";
import { TestNetns } from "./helpers/netns";
import { buildObjects } from "./helpers/objects";
import { arpRequest, ipv4HeaderValid, type PacketSpec, packet, readMac, readTtl, TCP } from "./helpers/packets";

const NEXT = -1;
const DROP = 2;
const REDIRECT = 7;

const POD1 = { v4: "10.244.1.10", v6: "fd00:244:1::10" };
const POD2 = { v4: "10.244.1.11", v6: "fd00:244:1::11" };
const REMOTE_NEIGH = { v4: "10.244.2.20", v6: "fd00:244:2::20" };
const REMOTE_NO_NEIGH = { v4: "10.244.3.30", v6: "fd00:244:3::30" };
const GATEWAY_MAC = "02:00:00:00:50:02";
const FAMILY = { v4: 2, v6: 10 } as const;

let ns: TestNetns;
let bpffs: TestBpffs;
let node: NodePrograms;
let h1: number;
let h2: number;
let up: { ifindex: number; mac: string };

beforeAll(() => {
  const objects = buildObjects();
  ns = TestNetns.create("dp");
  bpffs = TestBpffs.mount();
  ns.sysctl("net.ipv4.ip_forward", "1");
  ns.sysctl("net.ipv6.conf.all.forwarding", "1");
  ns.ip("link", "add", "nkbh1", "type", "veth", "peer", "name", "nkbp1");
  ns.ip("link", "add", "nkbh2", "type", "veth", "peer", "name", "nkbp2");
  ns.ip("link", "add", "nkbup", "type", "veth", "peer", "name", "nkbwire");
  for (const dev of ["nkbh1", "nkbp1", "nkbh2", "nkbp2", "nkbup", "nkbwire"]) ns.ip("link", "set", dev, "up");
  ns.ip("addr", "add", "192.168.50.1/24", "dev", "nkbup");
  ns.ip("addr", "add", "fd00:50::1/64", "dev", "nkbup", "nodad");
  ns.ip("neigh", "replace", "192.168.50.2", "lladdr", GATEWAY_MAC, "dev", "nkbup", "nud", "permanent");
  ns.ip("-6", "neigh", "replace", "fd00:50::2", "lladdr", GATEWAY_MAC, "dev", "nkbup", "nud", "permanent");
  ns.ip("route", "add", "10.244.2.0/24", "via", "192.168.50.2");
  ns.ip("route", "add", "10.244.3.0/24", "via", "192.168.50.3");
  ns.ip("-6", "route", "add", "fd00:244:2::/64", "via", "fd00:50::2");
  ns.ip("-6", "route", "add", "fd00:244:3::/64", "via", "fd00:50::3");
  h1 = ns.link("nkbh1").ifindex;
  h2 = ns.link("nkbh2").ifindex;
  up = ns.link("nkbup");

  node = loadNodePrograms(bpffs.root, objects, { clusterCidrs: ["10.244.0.0/16", "fd00:244::/32"] });
}, 60_000);

afterAll(() => {
  node?.close();
  bpffs?.release();
  ns?.destroy();
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
  clearPathMemory(node.maps.flows);
  clearPathMemory(node.maps.clients);
  clearCounters();
});

function clearCounters(): void {
  for (const key of [...node.maps.counters.keys()]) node.maps.counters.delete(key);
}

function run(program: BpfProgram, ifindex: number, frame: Buffer) {
  return inNetns(ns.path, () => testRun(program, { packet: frame, ifindex }));
}

const fromPod1 = (spec: PacketSpec) => run(node.programs.fromPod, h1, packet(spec));

/** Only the non-zero counters, so each assertion says exactly what moved. */
function counted(ifindex: number): Partial<Counters> {
  return Object.fromEntries(Object.entries(node.readCounters(ifindex)).filter(([, v]) => v !== 0n));
}

describe.each(["v4", "v6"] as const)("nkc_from_pod (%s)", (af) => {
  it("redirects to a local pod with bpf_redirect_peer and lowers the TTL", () => {
    const r = fromPod1({ src: POD1[af], dst: POD2[af], proto: "tcp", ttl: 64 });
    expect(r.verdict).toBe(REDIRECT);
    expect(readTtl(r.packet)).toBe(63);
    if (af === "v4") expect(ipv4HeaderValid(r.packet)).toBe(true);
    expect(counted(h1)).toEqual({ redirectedLocal: 1n });
  });

  it("forwards to a remote pod with a resolved next hop: FIB SUCCESS, MACs rewritten", () => {
    const r = fromPod1({ src: POD1[af], dst: REMOTE_NEIGH[af], proto: "udp", ttl: 64 });
    expect(r.verdict).toBe(REDIRECT);
    expect(readMac(r.packet, 0)).toBe(GATEWAY_MAC);
    expect(readMac(r.packet, 6)).toBe(up.mac);
    expect(readTtl(r.packet)).toBe(63);
    if (af === "v4") expect(ipv4HeaderValid(r.packet)).toBe(true);
    expect(counted(h1)).toEqual({ redirectedFib: 1n });
    // Marked DIRECT so that nkc_host_out, which sees the redirected packet, leaves it alone.
    expect(listFlows(node.maps.flows).map((f) => f.path)).toEqual(["direct"]);
  });

  it("forwards to a remote pod whose next hop is unresolved: FIB NO_NEIGH, bpf_redirect_neigh", () => {
    const r = fromPod1({ src: POD1[af], dst: REMOTE_NO_NEIGH[af], proto: "tcp" });
    expect(r.verdict).toBe(REDIRECT);
    expect(counted(h1)).toEqual({ redirectedNeigh: 1n });
  });

  it("passes a cluster address the FIB has no route for (NOT_FWDED) to the stack", () => {
    const dst = af === "v4" ? "10.244.9.9" : "fd00:244:9::9";
    expect(fromPod1({ src: POD1[af], dst, proto: "tcp" }).verdict).toBe(NEXT);
    expect(counted(h1)).toEqual({ passedStack: 1n });
  });

  it("passes a Service-like address to the stack and remembers the flow and its client", () => {
    const vip = af === "v4" ? "10.96.0.10" : "fd00:96::10";
    const r = fromPod1({ src: POD1[af], dst: vip, proto: "tcp", sport: 40001, dport: 80, tcpFlags: TCP.SYN });
    expect(r.verdict).toBe(NEXT);
    expect(readTtl(r.packet)).toBe(64); // untouched: the stack routes it
    expect(counted(h1)).toEqual({ passedStack: 1n });
    const flows = listFlows(node.maps.flows);
    expect(flows).toHaveLength(1);
    expect(flows[0]?.path).toBe("stack");
    expect([flows[0]?.a.ip, flows[0]?.b.ip].sort()).toEqual([POD1[af], vip].sort());
    expect(listClients(node.maps.clients)).toEqual([{ family: FAMILY[af], proto: 6, ip: POD1[af], port: 40001 }]);
    // Only a packet that opens a connection names a client: not the rest of it, and not
    // a server's answer from its listening port.
    fromPod1({ src: POD1[af], dst: vip, proto: "tcp", sport: 40002, dport: 80 });
    fromPod1({ src: POD1[af], dst: vip, proto: "tcp", sport: 8443, dport: 50000, tcpFlags: TCP.SYN | TCP.ACK });
    expect(listClients(node.maps.clients)).toHaveLength(1);
  });

  it("passes the node's own address and the internet to the stack", () => {
    const nodeIp = af === "v4" ? "192.168.50.1" : "fd00:50::1";
    const internet = af === "v4" ? "8.8.8.8" : "2001:4860:4860::8888";
    expect(fromPod1({ src: POD1[af], dst: nodeIp, proto: "udp" }).verdict).toBe(NEXT);
    expect(fromPod1({ src: POD1[af], dst: internet, proto: "icmp" }).verdict).toBe(NEXT);
    expect(counted(h1)).toEqual({ passedStack: 2n });
  });

  it("drops a spoofed source: another pod's address, or an unknown one", () => {
    expect(fromPod1({ src: POD2[af], dst: REMOTE_NEIGH[af], proto: "tcp" }).verdict).toBe(DROP);
    const unknown = af === "v4" ? "10.9.9.9" : "fd00:9::9";
    expect(fromPod1({ src: unknown, dst: POD2[af], proto: "udp" }).verdict).toBe(DROP);
    expect(counted(h1)).toEqual({ droppedSpoofed: 2n });
  });

  it("sends the replies of a flow its client opened through the stack (DNAT) back there, even to a local pod", () => {
    // pod1 opens a connection to a VIP; the stack DNATs it to pod2:8080 and delivers it
    // through pod2's device, where no program watches.
    const vip = af === "v4" ? "10.96.0.10" : "fd00:96::10";
    fromPod1({ src: POD1[af], dst: vip, proto: "tcp", sport: 40002, dport: 80, tcpFlags: TCP.SYN });
    clearCounters();
    // pod2's reply must meet conntrack to get the VIP back as its source.
    const reply = { src: POD2[af], dst: POD1[af], proto: "tcp", sport: 8080, dport: 40002 } as const;
    expect(run(node.programs.fromPod, h2, packet(reply)).verdict).toBe(NEXT);
    expect(counted(h2)).toEqual({ passedStackNat: 1n });
    // Another flow between the same pods still takes the fast path.
    const other = { ...reply, dport: 40003 };
    expect(run(node.programs.fromPod, h2, packet(other)).verdict).toBe(REDIRECT);
    expect(counted(h2)).toEqual({ passedStackNat: 1n, redirectedLocal: 1n });
  });

  it("keys ICMP echo clients on the echo identifier; an echo reply opens nothing", () => {
    const vip = af === "v4" ? "10.96.0.10" : "fd00:96::10";
    fromPod1({ src: POD1[af], dst: vip, proto: "icmp", echoId: 77 });
    fromPod1({ src: POD1[af], dst: vip, proto: "icmp", echoId: 79, echoReply: true });
    const proto = af === "v4" ? 1 : 58;
    expect(listClients(node.maps.clients)).toEqual([{ family: FAMILY[af], proto, ip: POD1[af], port: 77 }]);
    clearCounters();
    const reply = { src: POD2[af], dst: POD1[af], proto: "icmp", echoId: 77, echoReply: true } as const;
    expect(run(node.programs.fromPod, h2, packet(reply)).verdict).toBe(NEXT);
    expect(run(node.programs.fromPod, h2, packet({ ...reply, echoId: 78 })).verdict).toBe(REDIRECT);
    expect(counted(h2)).toEqual({ passedStackNat: 1n, redirectedLocal: 1n });
  });

  it("leaves TTL expiry, fragments and ICMP errors to the stack", () => {
    expect(fromPod1({ src: POD1[af], dst: POD2[af], proto: "udp", ttl: 1 }).verdict).toBe(NEXT);
    expect(fromPod1({ src: POD1[af], dst: POD2[af], proto: "icmp", icmpType: af === "v4" ? 3 : 1 }).verdict).toBe(NEXT);
    if (af === "v4") expect(fromPod1({ src: POD1.v4, dst: POD2.v4, proto: "udp", fragment: true }).verdict).toBe(NEXT);
    expect(counted(h1)).toEqual({ passedStack: af === "v4" ? 3n : 2n });
  });
});

describe("nkc_from_pod, other traffic", () => {
  it("passes ARP without counting", () => {
    expect(run(node.programs.fromPod, h1, arpRequest()).verdict).toBe(NEXT);
    expect(counted(h1)).toEqual({});
  });

  it("passes IPv6 link-local traffic (neighbour discovery) instead of calling it spoofed", () => {
    const r = fromPod1({ src: "fe80::1", dst: "ff02::1:ff00:1", proto: "icmp", icmpType: 135 });
    expect(r.verdict).toBe(NEXT);
    expect(counted(h1)).toEqual({ passedStack: 1n });
  });

  it("netkit source: plain bpf_redirect to a netkit pod, nothing remembered; a veth pod goes via the stack", () => {
    node.endpoints.upsert(POD1.v4, { hostIfindex: h1, datapath: "netkit" });
    node.endpoints.upsert(POD2.v4, { hostIfindex: h2, datapath: "netkit" });
    expect(fromPod1({ src: POD1.v4, dst: POD2.v4, proto: "tcp", tcpFlags: TCP.SYN }).verdict).toBe(REDIRECT);
    expect(listFlows(node.maps.flows)).toEqual([]);
    expect(listClients(node.maps.clients)).toEqual([]);

    node.endpoints.upsert(POD2.v4, { hostIfindex: h2, datapath: "veth" });
    expect(fromPod1({ src: POD1.v4, dst: POD2.v4, proto: "udp" }).verdict).toBe(NEXT);
    expect(counted(h1)).toEqual({ redirectedLocal: 1n, passedStack: 1n });
  });
});

describe.each(["v4", "v6"] as const)("nkc_host_in / nkc_host_out (%s)", (af) => {
  const toUplink = (spec: PacketSpec) => run(node.programs.hostIn, up.ifindex, packet({ dstMac: up.mac, ...spec }));

  it("hands a packet for a local pod to it with bpf_redirect_peer", () => {
    const r = toUplink({ src: REMOTE_NEIGH[af], dst: POD1[af], proto: "tcp", ttl: 60 });
    expect(r.verdict).toBe(REDIRECT);
    expect(readTtl(r.packet)).toBe(59);
    if (af === "v4") expect(ipv4HeaderValid(r.packet)).toBe(true);
    expect(counted(h1)).toEqual({ redirectedPeer: 1n });
  });

  it("passes everything else to the stack", () => {
    const nodeIp = af === "v4" ? "192.168.50.1" : "fd00:50::1";
    expect(toUplink({ src: REMOTE_NEIGH[af], dst: nodeIp, proto: "udp" }).verdict).toBe(NEXT);
    expect(toUplink({ src: REMOTE_NEIGH[af], dst: REMOTE_NO_NEIGH[af], proto: "udp" }).verdict).toBe(NEXT);
    expect(counted(up.ifindex)).toEqual({ passedStack: 2n });
  });

  it("passes a frame for another MAC (PACKET_OTHERHOST) to the stack", () => {
    const frame = packet({ src: REMOTE_NEIGH[af], dst: POD1[af], proto: "tcp", dstMac: "02:99:99:99:99:99" });
    expect(run(node.programs.hostIn, up.ifindex, frame).verdict).toBe(NEXT);
  });

  it("keeps a flow the stack sent out of the uplink (Service backend on another node) on the stack", () => {
    const out = { src: POD1[af], dst: REMOTE_NEIGH[af], proto: "tcp", sport: 40010, dport: 8080 } as const;
    expect(run(node.programs.hostOut, up.ifindex, packet(out)).verdict).toBe(NEXT);
    expect(listFlows(node.maps.flows).map((f) => f.path)).toEqual(["stack"]);
    const reply = { src: REMOTE_NEIGH[af], dst: POD1[af], proto: "tcp", sport: 8080, dport: 40010 } as const;
    expect(toUplink(reply).verdict).toBe(NEXT);
    expect(counted(h1)).toEqual({ passedStackNat: 1n });
  });

  it("remembers a pod elsewhere that opens a flow to a local non-pod address (hostPort), for the backend's replies", () => {
    const nodeIp = af === "v4" ? "192.168.50.1" : "fd00:50::1";
    const open = { src: REMOTE_NEIGH[af], dst: nodeIp, proto: "tcp", sport: 40020, dport: 8080 } as const;
    expect(toUplink({ ...open, tcpFlags: TCP.SYN }).verdict).toBe(NEXT);
    expect(listClients(node.maps.clients)).toEqual([
      { family: FAMILY[af], proto: 6, ip: REMOTE_NEIGH[af], port: 40020 },
    ]);
    // The stack DNATs it to pod1:80; pod1's reply must get the node's address back.
    const reply = { src: POD1[af], dst: REMOTE_NEIGH[af], proto: "tcp", sport: 80, dport: 40020 } as const;
    expect(fromPod1(reply).verdict).toBe(NEXT);
    expect(counted(h1)).toEqual({ passedStackNat: 1n });
    // A host that is not a pod needs no memory: a pod's replies to it go to the stack anyway.
    toUplink({ src: af === "v4" ? "192.168.50.2" : "fd00:50::2", dst: nodeIp, proto: "udp", sport: 5353 });
    expect(listClients(node.maps.clients)).toHaveLength(1);
  });

  it("keeps a reply for a local client that opened its flow through the stack off the fast path", () => {
    const vip = af === "v4" ? "10.96.0.10" : "fd00:96::10";
    fromPod1({ src: POD1[af], dst: vip, proto: "udp", sport: 40030, dport: 53 });
    clearCounters();
    // The stack sent it to a backend on another node; the backend's reply comes in here.
    const reply = { src: REMOTE_NEIGH[af], dst: POD1[af], proto: "udp", sport: 53, dport: 40030 } as const;
    expect(toUplink(reply).verdict).toBe(NEXT);
    expect(toUplink({ ...reply, dport: 40031 }).verdict).toBe(REDIRECT);
    expect(counted(h1)).toEqual({ passedStackNat: 1n, redirectedPeer: 1n });
  });

  it("nkc_host_out leaves our own FIB-redirected flows alone", () => {
    const flow = { src: POD1[af], dst: REMOTE_NEIGH[af], proto: "udp", sport: 5000, dport: 53 } as const;
    expect(fromPod1(flow).verdict).toBe(REDIRECT);
    run(node.programs.hostOut, up.ifindex, packet(flow));
    expect(listFlows(node.maps.flows).map((f) => f.path)).toEqual(["direct"]);
    const reply = { src: REMOTE_NEIGH[af], dst: POD1[af], proto: "udp", sport: 53, dport: 5000 } as const;
    expect(toUplink(reply).verdict).toBe(REDIRECT);
  });
});
