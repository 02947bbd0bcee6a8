/**
 * The conntrack NAT check against real conntrack entries: packets are put on a wire with
 * an AF_PACKET socket, cross the namespace's stack (iptables DNAT like kube-proxy's
 * Services and portmap's hostPorts, or no NAT at all), and leave conntrack entries behind;
 * then the replies are run through the programs with BPF_PROG_TEST_RUN, whose conntrack
 * lookups see that namespace's table.
 *
 *   pod1  nkbh1 <-> nkbp1   10.244.1.10  fd00:244:1::10  (frames injected on nkbp1)
 *   pod2  nkbh2 <-> nkbp2   10.244.1.11  fd00:244:1::11  (routed, permanent neighbour)
 *   uplink nkbup 192.168.50.1 <-> nkbwire   remote pods 10.244.2.0/24 via 192.168.50.2
 *
 * On a kernel without a BPF JIT the conntrack variant cannot load; there the file checks
 * that the loader says why and falls back (datapath.test.ts covers the memory variant).
 */
import { execFileSync } from "node:child_process";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Counters } from "../../src/bpf/fastpath/abi";
import { createFlowTable } from "../../src/bpf/fastpath/direct";
import { conntrackUnavailable } from "../../src/bpf/fastpath/kernel-probe";
import type { BpfProgram } from "../../src/bpf/loader/programs";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import { inNetns } from "../../src/sys/netns";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { type PacketSpec, packet, TCP } from "./helpers/packets";
import type { TestNetns } from "./helpers/test-netns";
import { makeTestNode, NEXT, NODE, POD1, POD2, REDIRECT, REMOTE } from "./helpers/test-node";
import { testRun } from "./helpers/test-run";

const VIP_LOCAL = { v4: "10.96.0.10", v6: "fd00:96::10" };
const VIP_REMOTE = { v4: "10.96.0.20", v6: "fd00:96::20" };

const whyNot = conntrackUnavailable();

if (whyNot) {
  it(`falls back to the memory NAT check where conntrack kfuncs cannot load (${whyNot})`, () => {
    const bpffs = TestBpffs.mount();
    try {
      const node = loadNodePrograms(bpffs.root, buildObjects(), { clusterCidrs: ["10.244.0.0/16"] });
      node.close();
      expect(node.natCheck).toBe("memory");
      expect(node.skippedVariants.join()).toMatch(/conntrack unavailable/);
    } finally {
      bpffs.release();
    }
  });
} else {
  let ns: TestNetns;
  let bpffs: TestBpffs;
  let node: NodePrograms;
  let h1: number;
  let h2: number;
  let up: { ifindex: number; mac: string };
  let macs: { h1: string; up: string };

  /** Puts `frame` on the wire at `dev` (its peer receives it), as a pod or a node would send it. */
  const conntrackCount = () => Number(ns.run("cat", "/proc/sys/net/netfilter/nf_conntrack_count").trim());
  /**
   * Sends `frame` out of `dev` and waits for conntrack to hold its flow: the frame crosses
   * the veth into the backlog, and the stack takes it from there in a softirq that a busy
   * machine may run after the sender has exited. Every frame injected here opens a flow.
   */
  const inject = (dev: string, frame: Buffer) => {
    const before = conntrackCount();
    ns.run(
      "python3",
      "-c",
      "import socket,sys\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\ns.bind((sys.argv[1],0))\ns.send(bytes.fromhex(sys.argv[2]))",
      dev,
      frame.toString("hex"),
    );
    const end = Date.now() + 5_000;
    while (conntrackCount() <= before) {
      if (Date.now() > end) throw new Error(`the frame sent out of ${dev} opened no conntrack entry`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    }
  };

  beforeAll(() => {
    const objects = buildObjects();
    ({ ns, h1, h2, up } = makeTestNode("ct"));
    const p2mac = ns.link("nkbp2").mac;
    const p1mac = ns.link("nkbp1").mac;
    for (const [pod, dev, mac] of [
      [POD1, "nkbh1", p1mac],
      [POD2, "nkbh2", p2mac],
    ] as const) {
      ns.ip("route", "add", `${pod.v4}/32`, "dev", dev);
      ns.ip("-6", "route", "add", `${pod.v6}/128`, "dev", dev);
      ns.ip("neigh", "replace", pod.v4, "lladdr", mac, "dev", dev, "nud", "permanent");
      ns.ip("-6", "neigh", "replace", pod.v6, "lladdr", mac, "dev", dev, "nud", "permanent");
    }
    // Injected frames carry no L4 checksums.
    ns.sysctl("net.netfilter.nf_conntrack_checksum", "0");
    // The pods' ends are sinks, as a pod's namespace would be. Left to this forwarding
    // namespace, a packet the stack hands a pod would come back in by its end and be
    // routed out again until its TTL ran out, each pass a new conntrack entry whose source
    // port NAT re-maps at random (the reply tuple clashes with the last pass's): a few
    // hundred stray flows, now and then on a port a test asks conntrack about.
    for (const tool of ["iptables", "ip6tables"])
      ns.run(tool, "-t", "raw", "-A", "PREROUTING", "-i", "nkbp+", "-j", "DROP");
    for (const [tool, af] of [
      ["iptables", "v4"],
      ["ip6tables", "v6"],
    ] as const) {
      const to = (ip: string, port: number) => (af === "v4" ? `${ip}:${port}` : `[${ip}]:${port}`);
      const dnat = (dst: string, proto: string, dport: number, target: string) =>
        ns.run(
          tool,
          "-t",
          "nat",
          "-A",
          "PREROUTING",
          "-d",
          dst,
          "-p",
          proto,
          "--dport",
          String(dport),
          "-j",
          "DNAT",
          "--to-destination",
          target,
        );
      dnat(VIP_LOCAL[af], "tcp", 80, to(POD2[af], 8080)); // a Service with a backend here
      dnat(VIP_LOCAL[af], "udp", 53, to(POD2[af], 5353));
      dnat(VIP_REMOTE[af], "tcp", 80, to(REMOTE[af], 8080)); // a Service with a backend elsewhere
      dnat(NODE[af], "tcp", 30080, to(POD1[af], 80)); // a hostPort
    }
    macs = { h1: ns.link("nkbh1").mac, up: up.mac };

    bpffs = TestBpffs.mount();
    node = loadNodePrograms(bpffs.root, objects, {
      clusterCidrs: ["10.244.0.0/16", "fd00:244::/32"],
      natChecks: ["conntrack"],
    });
    for (const [pod, ifindex] of [
      [POD1, h1],
      [POD2, h2],
    ] as const) {
      node.endpoints.upsert(pod.v4, { hostIfindex: ifindex, datapath: "veth" });
      node.endpoints.upsert(pod.v6, { hostIfindex: ifindex, datapath: "veth" });
      createFlowTable(node.maps.flows, ifindex);
    }
  }, 60_000);

  afterAll(() => {
    node?.close();
    bpffs?.release();
    ns?.destroy();
  });

  beforeEach(() => {
    for (const key of [...node.maps.counters.keys()]) node.maps.counters.delete(key);
  });

  const run = (program: BpfProgram, ifindex: number, spec: PacketSpec) =>
    inNetns(ns.path, () => testRun(program, { packet: packet(spec), ifindex })).verdict;
  const counted = (ifindex: number): Partial<Counters> =>
    Object.fromEntries(Object.entries(node.readCounters(ifindex)).filter(([, v]) => v !== 0n));
  /** A pod's packet into the stack: it enters through the pod's host-side device. */
  const podSends = (spec: PacketSpec) => inject("nkbp1", packet({ dstMac: macs.h1, ...spec }));
  const wireSends = (spec: PacketSpec) => inject("nkbwire", packet({ dstMac: macs.up, ...spec }));

  describe.each(["v4", "v6"] as const)("conntrack NAT check (%s)", (af) => {
    it("keeps the replies of a Service flow DNAT'ed to a local pod on the stack", () => {
      podSends({ src: POD1[af], dst: VIP_LOCAL[af], proto: "tcp", sport: 40002, dport: 80, tcpFlags: TCP.SYN });
      const reply = { src: POD2[af], dst: POD1[af], proto: "tcp", sport: 8080, dport: 40002 } as const;
      expect(run(node.programs.fromPod, h2, { ...reply, tcpFlags: TCP.SYN | TCP.ACK })).toBe(NEXT);
      expect(run(node.programs.fromPod, h2, reply)).toBe(NEXT);
      expect(counted(h2)).toEqual({ passedStackUnproven: 2n });
      // The same pods on another port, never NAT'd: direct.
      expect(run(node.programs.fromPod, h2, { ...reply, dport: 40003 })).toBe(REDIRECT);
    });

    it("keeps UDP replies of a Service flow on the stack", () => {
      podSends({ src: POD1[af], dst: VIP_LOCAL[af], proto: "udp", sport: 40007, dport: 53 });
      const reply = { src: POD2[af], dst: POD1[af], proto: "udp", sport: 5353, dport: 40007 } as const;
      expect(run(node.programs.fromPod, h2, reply)).toBe(NEXT);
      expect(run(node.programs.fromPod, h2, { ...reply, dport: 40008 })).toBe(REDIRECT);
    });

    it("keeps replies from a backend elsewhere on the stack as they come in from the wire", () => {
      podSends({ src: POD1[af], dst: VIP_REMOTE[af], proto: "tcp", sport: 40020, dport: 80, tcpFlags: TCP.SYN });
      const reply = {
        src: REMOTE[af],
        dst: POD1[af],
        proto: "tcp",
        sport: 8080,
        dport: 40020,
        dstMac: macs.up,
      } as const;
      expect(run(node.programs.hostIn, up.ifindex, reply)).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStackUnproven: 1n });
      expect(run(node.programs.hostIn, up.ifindex, { ...reply, dport: 40021 })).toBe(REDIRECT);
    });

    it("keeps a hostPort backend's replies to a pod elsewhere on the stack", () => {
      wireSends({ src: REMOTE[af], dst: NODE[af], proto: "tcp", sport: 40030, dport: 30080, tcpFlags: TCP.SYN });
      const reply = { src: POD1[af], dst: REMOTE[af], proto: "tcp", sport: 80, dport: 40030 } as const;
      expect(run(node.programs.fromPod, h1, { ...reply, tcpFlags: TCP.SYN | TCP.ACK })).toBe(NEXT);
      expect(counted(h1)).toEqual({ passedStackUnproven: 1n });
    });

    it("redirects a flow conntrack knows untranslated (it crossed the stack once, with no NAT)", () => {
      podSends({ src: POD1[af], dst: POD2[af], proto: "tcp", sport: 40040, dport: 8080, tcpFlags: TCP.SYN });
      const reply = { src: POD2[af], dst: POD1[af], proto: "tcp", sport: 8080, dport: 40040 } as const;
      expect(run(node.programs.fromPod, h2, { ...reply, tcpFlags: TCP.SYN | TCP.ACK })).toBe(REDIRECT);
      expect(
        run(node.programs.fromPod, h1, { ...reply, src: POD1[af], dst: POD2[af], sport: 40040, dport: 8080 }),
      ).toBe(REDIRECT);
    });
  });

  it("leaves conntrack itself out of it: a lookup never creates an entry", () => {
    const before = ns.run("cat", "/proc/sys/net/netfilter/nf_conntrack_count").trim();
    for (let port = 1; port <= 50; port++) {
      run(node.programs.fromPod, h1, { src: POD1.v4, dst: POD2.v4, proto: "udp", sport: 50000 + port, dport: 9 });
    }
    expect(ns.run("cat", "/proc/sys/net/netfilter/nf_conntrack_count").trim()).toBe(before);
  });
}

/** The python3 the injection needs (Debian: the python3 package). */
execFileSync("python3", ["-c", "import socket"]);
