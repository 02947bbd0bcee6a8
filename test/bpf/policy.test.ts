/**
 * NetworkPolicy's verdicts in the programs (bpf/lib/policy.h), run with
 * BPF_PROG_TEST_RUN on hand-built packets in the shared test node (helpers/test-node.ts):
 * pod1 (h1) and pod2 (h2) local, REMOTE across the uplink. Each pod's policy is written
 * as the agent writes it (a slot's tables from policy-tables.ts, the pod's key and
 * flags); each test then sends the packets a flow is made of, through the program each
 * would meet, and checks what passes, what is dropped and what is counted.
 *
 * Verdicts: NEXT -1 (on to the stack), DROP 2, REDIRECT 7.
 *
 * BPF_PROG_TEST_RUN gives every packet a socket of its own (skb->sk), which is what
 * nkc_pod_policy takes for a packet of the node's unless it comes from a local pod's
 * address (a netkit pod's packet keeps its socket between namespaces).
 * What it does with other sources (no socket: ICMP errors from a router, fragments
 * between local pods, forged neighbour discovery) is seen by forwarding real frames
 * through a second node namespace whose pod devices carry nkc_pod_policy on their
 * transmit (helpers/forward.ts).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createFlowTable } from "../../src/bpf/fastpath/direct";
import { conntrackUnavailable } from "../../src/bpf/fastpath/kernel-probe";
import { attachTcx, type BpfLink } from "../../src/bpf/loader/links";
import type { BpfProgram } from "../../src/bpf/loader/programs";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import type { NatCheck } from "../../src/bpf/objects";
import {
  decodePolicyEvent,
  POL_F_INCOMPLETE,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  POL_F_PENDING,
  POL_F_WATCH,
  type PolicyDir,
  type PolicyEvent,
  type TierValue,
  vipKey,
} from "../../src/bpf/policy/abi";
import { listCountedFlows } from "../../src/bpf/policy/ct";
import {
  applyTableWrites,
  deletePolicyPod,
  openPolicyMaps,
  type PolicyMaps,
  podKey,
  policyFlowTables,
  readFlowRecordsLost,
  readPolicyStats,
  readPolicyVerdicts,
  recordPolicyEndpoint,
  setFlowRecording,
  takeFlowEvents,
  writePolicyPod,
  writeTier,
} from "../../src/bpf/policy/maps";
import { type DatapathRule, type SlotTables, slotTables, slotWrites } from "../../src/bpf/policy/tables";
import { AF_INET, AF_INET6 } from "../../src/cni/address";
import { monotonicNs } from "../../src/sys/clock";
import { inNetns } from "../../src/sys/netns";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { rawEntries, writeEntries } from "./helpers/flows";
import { type ForwardingNode, makeForwardingNode } from "./helpers/forward";
import { icmpError, type PacketSpec, packet, TCP } from "./helpers/packets";
import type { TestNetns } from "./helpers/test-netns";
import { DROP, makeTestNode, NEXT, POD1, POD2, REDIRECT, REMOTE } from "./helpers/test-node";
import { testRun } from "./helpers/test-run";

const CLUSTER = ["10.244.0.0/16", "fd00:244::/32"];
const VIP = { v4: "10.96.0.10", v6: "fd00:96::10" };
const OUTSIDE = { v4: "192.0.2.7", v6: "2001:db8::7" };
const whyNoConntrack = conntrackUnavailable();
const VARIANTS: NatCheck[] = whyNoConntrack ? ["memory"] : ["conntrack", "memory"];
const KEY1 = podKey("ns", "pod1");
const KEY2 = podKey("ns", "pod2");
const BOTH = POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT;
/** struct nkc_pol_ct's flags (nkc_policy_abi.h). */
const CT_CLOSING = 1 << 4;

let objects: ReturnType<typeof buildObjects>;
let ns: TestNetns;
let h1: number;
let h2: number;
let up: { ifindex: number; mac: string };
let fw: ForwardingNode;

beforeAll(() => {
  objects = buildObjects();
  ({ ns, h1, h2, up } = makeTestNode("pol"));
}, 60_000);

beforeAll(() => {
  fw = makeForwardingNode("polfw");
});

afterAll(() => {
  fw?.destroy();
  ns?.destroy();
});

describe.each(VARIANTS)("%s NAT check", (natCheck) => {
  let bpffs: TestBpffs;
  let node: NodePrograms;
  let pol: PolicyMaps;
  let slot = 0;
  let stamp = 0n;
  const tablesOf = new Map<number, SlotTables>();
  const links: BpfLink[] = [];

  beforeAll(() => {
    bpffs = TestBpffs.mount();
    node = loadNodePrograms(bpffs.root, objects, { clusterCidrs: CLUSTER, natChecks: [natCheck] });
    pol = openPolicyMaps(bpffs.root) as PolicyMaps;
    for (const [pod, ifindex] of [
      [POD1, h1],
      [POD2, h2],
    ] as const) {
      node.endpoints.upsert(pod.v4, { hostIfindex: ifindex, datapath: "veth" });
      node.endpoints.upsert(pod.v6, { hostIfindex: ifindex, datapath: "veth" });
    }
    // The forwarding node's pod devices: nkc_pod_policy on their transmit, as ADD attaches it.
    inNetns(fw.node.ns.path, () => {
      links.push(attachTcx(node.programs.podPolicy, fw.node.h1, "egress"));
      links.push(attachTcx(node.programs.podPolicy, fw.node.h2, "egress"));
    });
  });

  afterAll(() => {
    for (const link of links.splice(0)) link.close();
    pol?.close();
    node?.close();
    bpffs?.release();
  });

  beforeEach(() => {
    for (const map of [
      pol.endpoints,
      pol.pods,
      pol.peers,
      pol.ports,
      pol.tiers,
      pol.vips,
      pol.stats,
      node.maps.drops,
    ]) {
      for (const key of [...map.keys()]) map.delete(key);
    }
    // Fresh flow tables (the policy's and the fast path's): each test starts with nothing remembered.
    for (const ifindex of [h1, h2]) {
      createFlowTable(policyFlowTables(pol), ifindex);
      createFlowTable(node.maps.flows, ifindex);
    }
    recordPolicyEndpoint(pol, h1, KEY1);
    recordPolicyEndpoint(pol, h2, KEY2);
    events();
    setFlowRecording(pol, false);
    takeFlowEvents(pol, Number.POSITIVE_INFINITY);
  });

  type Rules = { ingress?: DatapathRule[]; egress?: DatapathRule[] };
  const tablesFor = (rules: Rules) => slotTables({ ingress: rules.ingress ?? [], egress: rules.egress ?? [] });

  /** pod `key` isolated as `flags` says, with these rules (a new slot each time, and a
   * new stamp, as the agent moves a pod to another slot). Returns the slot. */
  function policy(key: bigint, flags: number, rules: Rules): number {
    slot += 1;
    const tables = tablesFor(rules);
    applyTableWrites(pol, slotWrites(slot, undefined, tables));
    tablesOf.set(slot, tables);
    restamp(key, slot, flags);
    return slot;
  }

  /** The pod's entry pointed at `at` under a stamp never used before: its rules changed. */
  function restamp(key: bigint, at: number, flags: number): bigint {
    stamp += 1n;
    writePolicyPod(pol, key, at, flags, stamp);
    return stamp;
  }

  /** Slot `at`'s tables rewritten in place, in the agent's order (its pods' stamps are the caller's). */
  function rewrite(at: number, rules: Rules): void {
    const after = tablesFor(rules);
    applyTableWrites(pol, slotWrites(at, tablesOf.get(at), after));
    tablesOf.set(at, after);
  }

  /** What nkc_pol_denials holds, oldest first; the queue is left empty. */
  function events(): PolicyEvent[] {
    const out: PolicyEvent[] = [];
    for (let raw = pol.events.pop(); raw; raw = pol.events.pop()) out.push(decodePolicyEvent(raw));
    return out;
  }
  const reasons = () => events().map((e) => `${e.dir} ${e.reason}`);
  /** Each event's reason, with the tier and the rule bit that decided it ("-": no single rule). */
  const decided = () => events().map((e) => `${e.dir} ${e.reason} ${e.tier} ${e.rule ?? "-"}`);

  /** Slot `at`'s direction `dir` read in tiers, as the agent writes it where a ClusterNetworkPolicy applies. */
  function tiers(at: number, dir: PolicyDir, t: Partial<TierValue>): void {
    writeTier(pol, at, dir, { admin: 0n, baseline: 0n, deny: 0n, pass: 0n, networkPolicy: false, ...t });
  }

  /** The pod's remembered flows (fragment entries left out): key and value as the kernel holds them. */
  const flowsOf = (ifindex: number) =>
    rawEntries(policyFlowTables(pol), ifindex).filter(([key]) => key.readUInt16LE(38) === 0);

  /**
   * Every remembered flow and fragment of the pod last seen `seconds` ago, on
   * bpf_ktime_get_ns's clock (CLOCK_MONOTONIC). The programs compare ages modulo 2^64, so
   * a time "before boot" wraps and still reads as that old.
   */
  function age(ifindex: number, seconds: number): void {
    const past = BigInt.asUintN(64, monotonicNs() - BigInt(seconds) * 1_000_000_000n);
    const entries = rawEntries(policyFlowTables(pol), ifindex).map(([key, value]): [Buffer, Buffer] => {
      const v = Buffer.from(value);
      v.writeBigUInt64LE(past, 16);
      return [key, v];
    });
    writeEntries(policyFlowTables(pol), ifindex, entries);
  }

  const frameOf = (x: PacketSpec | Buffer) => (Buffer.isBuffer(x) ? x : packet(x));
  const run = (program: BpfProgram, ifindex: number, frame: Buffer) =>
    inNetns(ns.path, () => testRun(program, { packet: frame, ifindex }).verdict);
  const fromPod1 = (x: PacketSpec | Buffer) => run(node.programs.fromPod, h1, frameOf(x));
  const fromPod2 = (x: PacketSpec | Buffer) => run(node.programs.fromPod, h2, frameOf(x));
  const plain1 = (x: PacketSpec | Buffer) => run(node.programs.sourceCheck, h1, frameOf(x));
  const fromWire = (spec: PacketSpec) => run(node.programs.hostIn, up.ifindex, packet({ dstMac: up.mac, ...spec }));
  const intoPod = (spec: PacketSpec) => run(node.programs.podPolicy, h1, packet(spec));
  const toWire = (spec: PacketSpec) => run(node.programs.hostOut, up.ifindex, packet({ srcMac: up.mac, ...spec }));
  /** Forwarded by the second node's stack (no socket): from the wire, or sent by a pod, into a pod. */
  const forwarded = (from: "wire" | "pod1" | "pod2", to: "pod1" | "pod2", xs: (PacketSpec | Buffer)[]) =>
    fw.send(from, to, xs.map(frameOf));
  const dropsOf = (ifindex: number) =>
    (node.maps.drops.lookupPerCpu(Buffer.from(new Uint32Array([ifindex]).buffer)) ?? []).reduce(
      (n, cpu) => n + cpu.readBigUInt64LE(6 * 8),
      0n,
    );

  describe.each(["v4", "v6"] as const)("%s", (af) => {
    const tcp = (src: string, dst: string, dport: number, flags: number = TCP.SYN, sport = 40000): PacketSpec => ({
      src,
      dst,
      proto: "tcp",
      sport,
      dport,
      tcpFlags: flags,
    });
    const host = (ip: string) => `${ip}/${af === "v4" ? 32 : 128}`;

    it("lets a pod without a policy of its namespace through, unjudged and uncounted", () => {
      expect(fromPod2(tcp(POD2[af], POD1[af], 81))).toBe(REDIRECT);
      expect(intoPod(tcp(OUTSIDE[af], POD1[af], 81))).toBe(NEXT);
      expect(readPolicyStats(pol, h1)).toEqual({
        allowed: { egress: 0n, ingress: 0n },
        denied: { egress: 0n, ingress: 0n },
      });
    });

    it("admits into an ingress-isolated pod only what a rule allows, from a local pod and the wire", () => {
      policy(KEY1, POL_F_ISOLATED_IN, {
        ingress: [
          { peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 80 }] },
          { peers: [{ cidr: af === "v4" ? "10.244.2.0/24" : "fd00:244:2::/64", except: [] }], ports: "any" },
        ],
      });
      expect(fromPod2(tcp(POD2[af], POD1[af], 80))).toBe(REDIRECT);
      expect(fromPod2(tcp(POD2[af], POD1[af], 81))).toBe(DROP);
      // From the wire, proven direct by its SYN: judged before the peer redirect.
      expect(fromWire(tcp(REMOTE[af], POD1[af], 9999))).toBe(REDIRECT);
      const stranger = af === "v4" ? "10.244.3.30" : "fd00:244:3::30";
      expect(fromWire(tcp(stranger, POD1[af], 80))).toBe(DROP);
      expect(readPolicyStats(pol, h1)).toMatchObject({ denied: { ingress: 2n }, allowed: { ingress: 2n } });
      expect(dropsOf(h1)).toBe(2n);
    });

    it("always admits the node's own traffic, and lets the pod answer it though its egress allows nothing", () => {
      policy(KEY1, POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT, {});
      expect(intoPod(tcp(OUTSIDE[af], POD1[af], 8080, TCP.SYN, 43000))).toBe(NEXT);
      expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 43000, TCP.SYN | TCP.ACK, 8080))).toBe(NEXT);
      expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 43001, TCP.SYN, 8080))).toBe(DROP);
      // The node's flows are the node's whatever the pod's rules become.
      policy(KEY1, POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT, {});
      expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 43000, TCP.ACK, 8080))).toBe(NEXT);
    });

    it("takes a local pod's packet that still carries its socket (netkit does not orphan it) for the pod's, not the node's", () => {
      policy(KEY1, POL_F_ISOLATED_IN, {});
      // pod2's SYN into pod1, as the stack (or netkit's primary hook after a redirect)
      // hands it over: pod2's socket attached. Judged by pod1's ingress rules: refused.
      expect(intoPod(tcp(POD2[af], POD1[af], 8080, TCP.SYN, 43100))).toBe(DROP);
      expect(reasons()).toEqual(["ingress denied"]);
      // And nothing of it is remembered as the node's: its next packet is refused too.
      expect(intoPod(tcp(POD2[af], POD1[af], 8080, TCP.ACK, 43100))).toBe(DROP);
    });

    it("lets replies of an allowed flow back into a pod isolated both ways, and nothing else", () => {
      policy(KEY1, POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT, {
        egress: [{ peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 80 }] }],
      });
      expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.SYN, 41000))).toBe(REDIRECT);
      // pod2's answer meets pod1's ingress (nothing allowed) in pod2's program: the flow's entry.
      expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.SYN | TCP.ACK, 80))).toBe(REDIRECT);
      expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.ACK, 80))).toBe(REDIRECT);
      // The same port from another source port is another flow, and pod2 may not open one.
      expect(fromPod2(tcp(POD2[af], POD1[af], 41001, TCP.SYN, 80))).toBe(DROP);
      expect(fromPod1(tcp(POD1[af], POD2[af], 81))).toBe(DROP);
    });

    it("judges egress with fastPath false too, against ipBlock with an except, TCP and UDP apart", () => {
      policy(KEY1, POL_F_ISOLATED_OUT, {
        egress: [
          {
            peers: [
              {
                cidr: af === "v4" ? "10.244.2.0/24" : "fd00:244:2::/64",
                except: [host(REMOTE[af])],
              },
            ],
            ports: [{ protocol: "UDP", from: 53, to: 53 }],
          },
        ],
      });
      const other = af === "v4" ? "10.244.2.21" : "fd00:244:2::21";
      expect(plain1({ src: POD1[af], dst: other, proto: "udp", dport: 53 })).toBe(NEXT);
      expect(plain1({ src: POD1[af], dst: REMOTE[af], proto: "udp", dport: 53 })).toBe(DROP);
      expect(plain1({ src: POD1[af], dst: other, proto: "udp", dport: 54 })).toBe(DROP);
      expect(plain1(tcp(POD1[af], other, 53))).toBe(DROP);
      expect(plain1({ src: POD1[af], dst: other, proto: "icmp" })).toBe(DROP);
    });

    it("matches SCTP ports and port ranges, and ICMP only under a rule without ports", () => {
      policy(KEY1, POL_F_ISOLATED_OUT, {
        egress: [
          { peers: "any", ports: [{ protocol: "SCTP", from: 9000, to: 9010 }] },
          { peers: [{ cidr: host(POD2[af]), except: [] }], ports: "any" },
        ],
      });
      expect(plain1({ src: POD1[af], dst: OUTSIDE[af], proto: "sctp", dport: 9005 })).toBe(NEXT);
      expect(plain1({ src: POD1[af], dst: OUTSIDE[af], proto: "sctp", dport: 9011 })).toBe(DROP);
      expect(plain1({ src: POD1[af], dst: OUTSIDE[af], proto: "udp", dport: 9005 })).toBe(DROP);
      expect(plain1({ src: POD1[af], dst: OUTSIDE[af], proto: "icmp" })).toBe(DROP);
      expect(plain1({ src: POD1[af], dst: POD2[af], proto: "icmp" })).toBe(NEXT);
    });

    it("defers a flow to a Service ClusterIP to the backend the stack's DNAT chose", () => {
      policy(KEY1, POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT, {});
      pol.vips.update(vipKey(VIP[af], af === "v4" ? AF_INET : AF_INET6), Buffer.alloc(4));
      expect(fromPod1(tcp(POD1[af], VIP[af], 80, TCP.SYN, 42000))).toBe(NEXT);
      // The DNAT chose pod2: pod1's egress is judged on its way into pod2, and denies.
      expect(run(node.programs.podPolicy, h2, packet(tcp(POD1[af], POD2[af], 80, TCP.SYN, 42000)))).toBe(DROP);
      expect(readPolicyStats(pol, h1)).toMatchObject({ denied: { egress: 1n } });
      expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 80))).toBe(DROP);
      // Rules changed: the flow stays deferred while its destination is still a ClusterIP...
      policy(KEY1, POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT, {});
      expect(fromPod1(tcp(POD1[af], VIP[af], 80, TCP.ACK, 42000))).toBe(NEXT);
      // ...and is judged as it started once it is no longer one.
      pol.vips.delete(vipKey(VIP[af], af === "v4" ? AF_INET : AF_INET6));
      policy(KEY1, POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT, {});
      expect(fromPod1(tcp(POD1[af], VIP[af], 80, TCP.ACK, 42000))).toBe(DROP);
      expect(events().map((e) => e.reason)).toEqual(["denied", "denied", "revoked"]);
    });

    it("judges on the uplink's egress a Service flow the DNAT sent to another node's backend", () => {
      policy(KEY1, POL_F_ISOLATED_OUT, {
        egress: [{ peers: [{ cidr: host(REMOTE[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 80 }] }],
      });
      pol.vips.update(vipKey(VIP[af], af === "v4" ? AF_INET : AF_INET6), Buffer.alloc(4));
      const stranger = af === "v4" ? "10.244.2.21" : "fd00:244:2::21";
      // Both to the ClusterIP: deferred by the pod's program, on to the stack.
      expect(fromPod1(tcp(POD1[af], VIP[af], 80, TCP.SYN, 42100))).toBe(NEXT);
      expect(fromPod1(tcp(POD1[af], VIP[af], 80, TCP.SYN, 42101))).toBe(NEXT);
      // After the DNAT, leaving for the backends: the one its rules allow, not the other.
      expect(toWire(tcp(POD1[af], REMOTE[af], 80, TCP.SYN, 42100))).toBe(NEXT);
      expect(toWire(tcp(POD1[af], stranger, 80, TCP.SYN, 42101))).toBe(DROP);
      expect(readPolicyStats(pol, h1)).toMatchObject({ allowed: { egress: 1n }, denied: { egress: 1n } });
      expect(dropsOf(h1)).toBe(1n);
      // A flow the pod's program judged is remembered: no second judgment on the way out.
      expect(fromPod1(tcp(POD1[af], REMOTE[af], 80, TCP.SYN, 42102))).not.toBe(DROP);
      expect(toWire(tcp(POD1[af], REMOTE[af], 80, TCP.ACK, 42102))).toBe(NEXT);
      expect(readPolicyStats(pol, h1)).toMatchObject({ allowed: { egress: 2n } });
      // The node's own packets, and a pod without a policy of its namespace, pass unjudged.
      expect(toWire(tcp(OUTSIDE[af], stranger, 80))).toBe(NEXT);
      expect(toWire(tcp(POD2[af], stranger, 80))).toBe(NEXT);
    });

    it("denies all but the node's traffic and neighbour discovery to a pod wired before its policy was judged", () => {
      writePolicyPod(pol, KEY1, 0, POL_F_PENDING, 0n);
      expect(fromPod2(tcp(POD2[af], POD1[af], 80))).toBe(DROP);
      expect(fromPod1(tcp(POD1[af], POD2[af], 80))).toBe(DROP);
      expect(reasons()).toEqual(["ingress pending", "egress pending"]);
      // The node's own traffic (test-run's packets all carry a socket) and the pod's answer.
      expect(intoPod(tcp(OUTSIDE[af], POD1[af], 8080, TCP.SYN, 43000))).toBe(NEXT);
      expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 43000, TCP.SYN | TCP.ACK, 8080))).toBe(NEXT);
      if (af === "v6") {
        // Neighbour solicitation from the pod's global address to the gateway's
        // solicited-node address; its advertisement answering the gateway's link-local one.
        expect(fromPod1({ src: POD1.v6, dst: "ff02::1:ff00:1", proto: "icmp", icmpType: 135, ttl: 255 })).toBe(NEXT);
        expect(fromPod1({ src: POD1.v6, dst: "fe80::1", proto: "icmp", icmpType: 136, ttl: 255 })).toBe(NEXT);
        expect(fromPod1({ src: "fe80::10", dst: "ff02::1:ff00:1", proto: "icmp", icmpType: 135, ttl: 255 })).toBe(NEXT);
        expect(intoPod({ src: "fe80::1", dst: POD1.v6, proto: "icmp", icmpType: 135, ttl: 255 })).toBe(NEXT);
        // An advertisement between global addresses is no neighbour discovery.
        expect(fromPod1({ src: POD1.v6, dst: POD2.v6, proto: "icmp", icmpType: 136, ttl: 255 })).toBe(DROP);
        expect(reasons()).toEqual(["egress pending"]);
      }
    });

    describe("flow records", () => {
      /** What nkc_flows holds, oldest first, as "direction reason tier rule [node]"; emptied. */
      const records = () =>
        takeFlowEvents(pol, Number.POSITIVE_INFINITY)
          .map(decodePolicyEvent)
          .map((e) => `${e.dir} ${e.reason} ${e.tier} ${e.rule ?? "-"}${e.fromNode ? " node" : ""}`);

      it("records nothing while they are off", () => {
        policy(KEY1, POL_F_ISOLATED_IN, {
          ingress: [{ peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 80 }] }],
        });
        expect(fromPod2(tcp(POD2[af], POD1[af], 80))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 81))).toBe(DROP);
        expect(records()).toEqual([]);
        expect(reasons()).toEqual(["ingress denied"]); // monitor's drops stay
      });

      it("records each judged flow once, allowed or denied, with the rule that decided", () => {
        setFlowRecording(pol, true);
        policy(KEY1, POL_F_ISOLATED_IN, {
          ingress: [
            { peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 80 }] },
            { peers: [{ cidr: af === "v4" ? "10.244.2.0/24" : "fd00:244:2::/64", except: [] }], ports: "any" },
          ],
        });
        // Allowed by rule 0; the rest of the flow, both ways, is remembered: no more records.
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.SYN, 41500))).toBe(REDIRECT);
        expect(fromPod1(tcp(POD1[af], POD2[af], 41500, TCP.SYN | TCP.ACK, 80))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.ACK, 41500))).toBe(REDIRECT);
        // Allowed by rule 1, from the wire.
        expect(fromWire(tcp(REMOTE[af], POD1[af], 9999))).toBe(REDIRECT);
        // Denied: a record per packet denied (a denied flow is never remembered).
        expect(fromPod2(tcp(POD2[af], POD1[af], 81))).toBe(DROP);
        // The node's own flow; the pod's own egress, which no policy isolates.
        expect(intoPod(tcp(OUTSIDE[af], POD1[af], 8080, TCP.SYN, 43000))).toBe(NEXT);
        expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 443, TCP.SYN, 43001))).toBe(NEXT);
        // A SYN judged again on the uplink (and retransmitted) is the same flow: told once.
        expect(toWire(tcp(POD1[af], OUTSIDE[af], 443, TCP.SYN, 43001))).toBe(NEXT);
        expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 443, TCP.SYN, 43001))).toBe(NEXT);
        // Once it closed, a SYN on the same 5-tuple opens another connection: told.
        expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 443, TCP.RST | TCP.ACK, 43001))).toBe(NEXT);
        expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 443, TCP.SYN, 43001))).toBe(NEXT);
        expect(records()).toEqual([
          "ingress allowed networkPolicy 0",
          "ingress allowed networkPolicy 1",
          "ingress denied networkPolicy -",
          "ingress allowed none - node",
          "egress allowed none -",
          "egress allowed none -",
        ]);
        setFlowRecording(pol, false);
        expect(fromPod2(tcp(POD2[af], POD1[af], 81))).toBe(DROP);
        expect(records()).toEqual([]);
      });

      it("records the ClusterNetworkPolicy rule that decided, and a revoked flow where it is cut", () => {
        setFlowRecording(pol, true);
        const at = policy(KEY1, POL_F_ISOLATED_IN, {
          ingress: [
            { peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 80 }] },
            { peers: [{ cidr: host(POD2[af]), except: [] }], ports: "any" },
          ],
        });
        tiers(at, "ingress", { admin: 1n, baseline: 2n, deny: 2n });
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.SYN, 41600))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 81, TCP.SYN, 41601))).toBe(DROP);
        restamp(KEY1, at, POL_F_ISOLATED_IN);
        tiers(at, "ingress", { admin: 1n, baseline: 0n, deny: 1n });
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.ACK, 41600))).toBe(DROP);
        expect(records()).toEqual([
          "ingress allowed admin 0",
          "ingress tier-denied baseline 1",
          "ingress revoked admin 0",
        ]);
      });

      it("judges and records every flow of a watched pod though nothing isolates it, letting all through", () => {
        setFlowRecording(pol, true);
        stamp += 1n;
        writePolicyPod(pol, KEY1, 0, POL_F_WATCH, stamp);
        expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 443, TCP.SYN, 43201))).toBe(NEXT);
        expect(fromPod1(tcp(POD1[af], OUTSIDE[af], 443, TCP.ACK, 43201))).toBe(NEXT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 8080, TCP.SYN, 43202))).toBe(REDIRECT);
        expect(records()).toEqual(["egress allowed none -", "ingress allowed none -"]);
        expect(readPolicyStats(pol, h1)).toMatchObject({ allowed: { egress: 1n, ingress: 1n } });
      });

      it("counts the records a full queue cannot take, and never drops a packet for them", () => {
        setFlowRecording(pol, true);
        policy(KEY1, POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT, {
          ingress: [{ peers: "any", ports: "any" }],
          egress: [{ peers: "any", ports: "any" }],
        });
        const before = readFlowRecordsLost(pol);
        const filler = Buffer.alloc(64);
        for (let i = 0; i < 16384; i++) pol.flows.push(filler);
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.SYN, 41700))).toBe(REDIRECT);
        expect(fromPod1(tcp(POD1[af], POD2[af], 81, TCP.SYN, 41701))).toBe(REDIRECT);
        expect(readFlowRecordsLost(pol) - before).toBe(2n);
        // Those waiting are the oldest, kept: the reader catches up on what it has.
        expect(takeFlowEvents(pol, Number.POSITIVE_INFINITY)).toHaveLength(16384);
      });

      it("counts each packet of a remembered flow once, where it crosses the pod's device, while recording", () => {
        policy(KEY1, POL_F_ISOLATED_IN, { ingress: [{ peers: "any", ports: "any" }] });
        const counted = () =>
          (listCountedFlows(policyFlowTables(pol), h1) ?? []).map((f) => ({
            started: f.started,
            ports: [f.a.port, f.b.port].sort((x, y) => x - y),
            packets: f.packets,
            bytes: f.bytes,
          }));
        const ipBytes = (x: PacketSpec) => BigInt(frameOf(x).length - 14);
        // Off: judged and remembered, never counted.
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.SYN, 41800))).toBe(REDIRECT);
        expect(counted()).toEqual([]);
        setFlowRecording(pol, true);
        const syn = tcp(POD2[af], POD1[af], 80, TCP.SYN, 41801);
        const synAck = tcp(POD1[af], POD2[af], 41801, TCP.SYN | TCP.ACK, 80);
        const ack = tcp(POD2[af], POD1[af], 80, TCP.ACK, 41801);
        const reply = tcp(POD1[af], POD2[af], 41801, TCP.ACK, 80);
        // In by the peer redirect (counted where it is judged), out by the pod's own program.
        expect(fromPod2(syn)).toBe(REDIRECT);
        expect(fromPod1(synAck)).toBe(REDIRECT);
        for (let i = 0; i < 3; i++) expect(fromPod2(ack)).toBe(REDIRECT);
        // In through the stack: the host device's transmit counts it.
        expect(intoPod(ack)).toBe(NEXT);
        expect(fromPod1(reply)).toBe(REDIRECT);
        // Out to the stack, met again on the uplink: counted once, in the pod's program.
        const out = tcp(POD1[af], OUTSIDE[af], 443, TCP.SYN, 41802);
        const outAck = tcp(POD1[af], OUTSIDE[af], 443, TCP.ACK, 41802);
        expect(fromPod1(out)).toBe(NEXT);
        expect(toWire(out)).toBe(NEXT);
        expect(fromPod1(outAck)).toBe(NEXT);
        expect(toWire(outAck)).toBe(NEXT);
        const inbound = {
          started: "ingress",
          ports: [80, 41801],
          packets: { egress: 2n, ingress: 5n },
          bytes: { egress: ipBytes(synAck) + ipBytes(reply), ingress: ipBytes(syn) + 4n * ipBytes(ack) },
        };
        const outbound = {
          started: "egress",
          ports: [443, 41802],
          packets: { egress: 2n, ingress: 0n },
          bytes: { egress: ipBytes(out) + ipBytes(outAck), ingress: 0n },
        };
        const byPort = (xs: ReturnType<typeof counted>) => xs.sort((x, y) => (x.ports[0] ?? 0) - (y.ports[0] ?? 0));
        expect(byPort(counted())).toEqual([inbound, outbound]);
        setFlowRecording(pol, false);
        expect(fromPod2(ack)).toBe(REDIRECT);
        expect(byPort(counted())).toEqual([inbound, outbound]);
      });
    });

    describe("remembered verdicts", () => {
      const toPod2: Rules = {
        egress: [{ peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 80 }] }],
      };

      it("judges a flow once under one stamp: the rest passes on its entry both ways, a SYN is judged again", () => {
        policy(KEY1, BOTH, toPod2);
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.SYN, 41000))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.SYN | TCP.ACK, 80))).toBe(REDIRECT);
        for (let i = 0; i < 3; i++) {
          expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.ACK, 41000))).toBe(REDIRECT);
          expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.ACK, 80))).toBe(REDIRECT);
        }
        expect(readPolicyStats(pol, h1)).toEqual({
          allowed: { egress: 1n, ingress: 0n },
          denied: { egress: 0n, ingress: 0n },
        });
        // A SYN opens a new connection whatever its 5-tuple carried: judged (allowed) again.
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.SYN, 41000))).toBe(REDIRECT);
        expect(readPolicyStats(pol, h1)).toMatchObject({ allowed: { egress: 2n } });
        // pod2 may not open one on it the other way, though pod1's flow is remembered.
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.SYN, 80))).toBe(DROP);
        expect(reasons()).toEqual(["ingress denied"]);
      });

      it("cuts a remembered flow both ways once the pod's rules change under a new stamp and deny it", () => {
        policy(KEY1, BOTH, toPod2);
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.SYN, 41000))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.SYN | TCP.ACK, 80))).toBe(REDIRECT);
        // Another slot, another stamp: port 81 only.
        policy(KEY1, BOTH, {
          egress: [{ peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "TCP", from: 81, to: 81 }] }],
        });
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.ACK, 41000))).toBe(DROP);
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.ACK, 80))).toBe(DROP);
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.SYN, 41000))).toBe(DROP);
        expect(fromPod1(tcp(POD1[af], POD2[af], 81, TCP.SYN, 41000))).toBe(REDIRECT);
        expect(reasons()).toEqual(["egress revoked", "ingress revoked", "egress denied"]);
        expect(dropsOf(h1)).toBe(3n);
      });

      it("lets a remembered flow on under a new stamp whose rules still allow it, and stamps its entry anew", () => {
        policy(KEY1, BOTH, toPod2);
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.SYN, 41000))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.SYN | TCP.ACK, 80))).toBe(REDIRECT);
        const wider = policy(KEY1, BOTH, {
          egress: [{ peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 90 }] }],
        });
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.ACK, 80))).toBe(REDIRECT);
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.ACK, 41000))).toBe(REDIRECT);
        const [entry] = flowsOf(h1);
        expect(flowsOf(h1)).toHaveLength(1);
        expect(entry?.[1].readBigUInt64LE(8)).toBe(stamp);
        // Under the stamp it carries now, the entry vouches without a judgment: the pod
        // pointed at rules allowing nothing but with that stamp kept (which the agent never
        // does) still passes the flow.
        writePolicyPod(pol, KEY1, wider + 1000, BOTH, stamp);
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.ACK, 41000))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.ACK, 80))).toBe(REDIRECT);
        expect(events()).toEqual([]);
      });

      it("cuts a flow from an address whose owner left: the prefix gone from the slot, the stamp changed", () => {
        const stranger = af === "v4" ? "10.244.2.21" : "fd00:244:2::21";
        const s = policy(KEY1, POL_F_ISOLATED_IN, {
          ingress: [
            { peers: [{ cidr: host(REMOTE[af]), except: [] }], ports: "any" },
            { peers: [{ cidr: host(POD2[af]), except: [] }], ports: "any" },
          ],
        });
        expect(fromWire(tcp(REMOTE[af], POD1[af], 8080, TCP.SYN, 43000))).toBe(REDIRECT);
        expect(fromPod1(tcp(POD1[af], REMOTE[af], 43000, TCP.SYN | TCP.ACK, 8080))).not.toBe(DROP);
        expect(fromWire(tcp(REMOTE[af], POD1[af], 8080, TCP.ACK, 43000))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 8080, TCP.SYN, 43001))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 8080, TCP.ACK, 43001))).toBe(REDIRECT);
        // REMOTE's pod is gone (its address may be someone else's next): the agent rewrites
        // the slot's peers in place and gives the pod a new stamp.
        rewrite(s, { ingress: [{ peers: [{ cidr: host(POD2[af]), except: [] }], ports: "any" }] });
        restamp(KEY1, s, POL_F_ISOLATED_IN);
        expect(fromWire(tcp(REMOTE[af], POD1[af], 8080, TCP.ACK, 43000))).toBe(DROP);
        // The pod's answers too: the flow started as ingress, whose rules it no longer meets.
        expect(fromPod1(tcp(POD1[af], REMOTE[af], 43000, TCP.ACK, 8080))).toBe(DROP);
        expect(fromPod2(tcp(POD2[af], POD1[af], 8080, TCP.ACK, 43001))).toBe(REDIRECT);
        expect(fromWire(tcp(stranger, POD1[af], 8080, TCP.SYN, 43000))).toBe(DROP);
        expect(reasons()).toEqual(["ingress revoked", "egress revoked", "ingress denied"]);
        // Now pod2 leaves.
        rewrite(s, {});
        restamp(KEY1, s, POL_F_ISOLATED_IN);
        expect(fromPod2(tcp(POD2[af], POD1[af], 8080, TCP.ACK, 43001))).toBe(DROP);
        expect(reasons()).toEqual(["ingress revoked"]);
      });

      it("denies the isolated directions of a pod whose policy could not be written in full (incomplete)", () => {
        const everything: DatapathRule[] = [{ peers: "any", ports: "any" }];
        policy(KEY1, POL_F_ISOLATED_OUT | POL_F_INCOMPLETE, { egress: everything, ingress: everything });
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.SYN, 41000))).toBe(DROP);
        expect(plain1({ src: POD1[af], dst: OUTSIDE[af], proto: "udp", dport: 53 })).toBe(DROP);
        // Not isolated for ingress: in, and the answers out on the flow's entry.
        expect(fromWire(tcp(REMOTE[af], POD1[af], 8080, TCP.SYN, 43000))).toBe(REDIRECT);
        expect(fromPod1(tcp(POD1[af], REMOTE[af], 43000, TCP.SYN | TCP.ACK, 8080))).not.toBe(DROP);
        expect(reasons()).toEqual(["egress incomplete", "egress incomplete"]);
        policy(KEY1, BOTH | POL_F_INCOMPLETE, { egress: everything, ingress: everything });
        expect(fromWire(tcp(REMOTE[af], POD1[af], 8080, TCP.SYN, 43002))).toBe(DROP);
        // A flow remembered before is judged again under the new stamp: cut too.
        expect(fromWire(tcp(REMOTE[af], POD1[af], 8080, TCP.ACK, 43000))).toBe(DROP);
        expect(reasons()).toEqual(["ingress incomplete", "ingress incomplete"]);
      });

      it("keeps a flow after FIN or RST for a short while, then judges its packets as new", () => {
        policy(KEY1, BOTH, toPod2);
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.SYN, 41000))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.SYN | TCP.ACK, 80))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.RST | TCP.ACK, 80))).toBe(REDIRECT);
        expect((flowsOf(h1)[0]?.[1].readUInt32LE(24) ?? 0) & CT_CLOSING).toBe(CT_CLOSING);
        // Within its closing time, the rest of the flow passes, both ways.
        expect(fromPod1(tcp(POD1[af], POD2[af], 80, TCP.ACK, 41000))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 41000, TCP.ACK, 80))).toBe(REDIRECT);
        expect(events()).toEqual([]);
      });

      it("forgets a flow past its lifetime: TCP days, closing TCP 10 s, UDP 120 s, ICMP 30 s", () => {
        // Flows the node opened into a pod whose egress allows nothing: its answers pass
        // while their flow is remembered, and are judged (denied) as new ones after.
        policy(KEY1, BOTH, {});
        const answers = {
          tcp: tcp(POD1[af], OUTSIDE[af], 43000, TCP.ACK, 8080),
          udp: { src: POD1[af], dst: OUTSIDE[af], proto: "udp", sport: 53, dport: 5353 } as PacketSpec,
          icmp: { src: POD1[af], dst: OUTSIDE[af], proto: "icmp", echoReply: true, echoId: 7 } as PacketSpec,
        };
        expect(intoPod(tcp(OUTSIDE[af], POD1[af], 8080, TCP.SYN, 43000))).toBe(NEXT);
        expect(intoPod({ src: OUTSIDE[af], dst: POD1[af], proto: "udp", sport: 5353, dport: 53 })).toBe(NEXT);
        expect(intoPod({ src: OUTSIDE[af], dst: POD1[af], proto: "icmp", echoId: 7 })).toBe(NEXT);
        age(h1, 29);
        for (const spec of Object.values(answers)) expect(plain1(spec)).toBe(NEXT);
        age(h1, 31);
        expect([plain1(answers.tcp), plain1(answers.udp), plain1(answers.icmp)]).toEqual([NEXT, NEXT, DROP]);
        age(h1, 121);
        expect([plain1(answers.tcp), plain1(answers.udp)]).toEqual([NEXT, DROP]);
        age(h1, 4 * 86400);
        expect(plain1(answers.tcp)).toBe(NEXT);
        // An RST starts its close: 10 s from its last packet.
        expect(plain1({ ...answers.tcp, tcpFlags: TCP.RST })).toBe(NEXT);
        age(h1, 9);
        expect(plain1(answers.tcp)).toBe(NEXT);
        age(h1, 11);
        expect(plain1(answers.tcp)).toBe(DROP);
        expect(reasons()).toEqual(["egress denied", "egress denied", "egress denied"]);
      });
    });

    describe("ClusterNetworkPolicy tiers", () => {
      /** A rule matching `ip`'s TCP port 80 (a host prefix), or anything from anyone. */
      const tcp80From = (ip: string): DatapathRule => ({
        peers: [{ cidr: host(ip), except: [] }],
        ports: [{ protocol: "TCP", from: 80, to: 80 }],
      });
      const fromAnywhere = (ip: string): DatapathRule => ({ peers: [{ cidr: host(ip), except: [] }], ports: "any" });
      const anything: DatapathRule = { peers: "any", ports: "any" };
      /** pod2 opening a connection to pod1's `port`, judged by pod1's ingress in pod2's program. */
      const pod2To1 = (port: number, sport = 41000) => fromPod2(tcp(POD2[af], POD1[af], port, TCP.SYN, sport));

      it("denies by an Admin Deny rule what a NetworkPolicy rule allows, naming the rule's bit", () => {
        // Bits 0 and 1 the NetworkPolicy's, bit 2 the Admin rule: both match pod2's port 80.
        const s = policy(KEY1, POL_F_ISOLATED_IN, {
          ingress: [tcp80From(POD2[af]), tcp80From(REMOTE[af]), tcp80From(POD2[af])],
        });
        tiers(s, "ingress", { admin: 0b100n, deny: 0b100n, networkPolicy: true });
        expect(pod2To1(80)).toBe(DROP);
        // REMOTE's port 80: the NetworkPolicy's bit 1 alone.
        expect(fromWire(tcp(REMOTE[af], POD1[af], 80))).toBe(REDIRECT);
        expect(fromWire(tcp(REMOTE[af], POD1[af], 81))).toBe(DROP);
        expect(decided()).toEqual(["ingress tier-denied admin 2", "ingress denied networkPolicy -"]);
        expect(readPolicyStats(pol, h1)).toMatchObject({ allowed: { ingress: 1n }, denied: { ingress: 2n } });
        expect(dropsOf(h1)).toBe(2n);
        // Egress the same: an Admin Deny at bit 1 over the NetworkPolicy's bit 0.
        const e = policy(KEY1, POL_F_ISOLATED_OUT, {
          egress: [
            { peers: "any", ports: [{ protocol: "UDP", from: 53, to: 53 }] },
            { peers: [{ cidr: host(OUTSIDE[af]), except: [] }], ports: "any" },
          ],
        });
        tiers(e, "egress", { admin: 0b10n, deny: 0b10n, networkPolicy: true });
        expect(plain1({ src: POD1[af], dst: OUTSIDE[af], proto: "udp", dport: 53 })).toBe(DROP);
        expect(plain1({ src: POD1[af], dst: REMOTE[af], proto: "udp", dport: 53 })).toBe(NEXT);
        expect(decided()).toEqual(["egress tier-denied admin 1"]);
      });

      it("admits by an Admin Accept rule into a direction a NetworkPolicy isolates with no rule for it", () => {
        // Bit 1 a Baseline Accept of everything: never reached where a NetworkPolicy isolates.
        const s = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [fromAnywhere(POD2[af]), anything] });
        tiers(s, "ingress", { admin: 1n, baseline: 2n, networkPolicy: true });
        expect(pod2To1(80)).toBe(REDIRECT);
        expect(pod2To1(9999, 41001)).toBe(REDIRECT);
        expect(fromWire(tcp(REMOTE[af], POD1[af], 80))).toBe(DROP);
        expect(decided()).toEqual(["ingress denied networkPolicy -"]);
      });

      it("goes on from an Admin Pass rule to the NetworkPolicy, which allows or denies", () => {
        const s = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [fromAnywhere(POD2[af]), tcp80From(POD2[af])] });
        tiers(s, "ingress", { admin: 1n, pass: 1n, networkPolicy: true });
        expect(pod2To1(80)).toBe(REDIRECT);
        expect(pod2To1(81)).toBe(DROP);
        expect(decided()).toEqual(["ingress denied networkPolicy -"]);
      });

      it("goes on from an Admin Pass rule past a direction no NetworkPolicy isolates to Baseline, and allows where it does not deny", () => {
        const s = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [fromAnywhere(POD2[af]), anything] });
        tiers(s, "ingress", { admin: 1n, pass: 1n, baseline: 2n, deny: 2n });
        expect(pod2To1(80)).toBe(DROP);
        expect(fromWire(tcp(REMOTE[af], POD1[af], 80))).toBe(DROP);
        expect(decided()).toEqual(["ingress tier-denied baseline 1", "ingress tier-denied baseline 1"]);
        // No Baseline rule: what Pass leaves undecided is allowed, as Kubernetes' default.
        const t = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [fromAnywhere(POD2[af])] });
        tiers(t, "ingress", { admin: 1n, pass: 1n });
        expect(pod2To1(80)).toBe(REDIRECT);
        expect(events()).toEqual([]);
      });

      it("lets a NetworkPolicy that isolates the pod decide before Baseline: its allow over a Baseline Deny, its default deny alone", () => {
        const s = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [tcp80From(POD2[af]), anything] });
        tiers(s, "ingress", { baseline: 2n, deny: 2n, networkPolicy: true });
        expect(pod2To1(80)).toBe(REDIRECT);
        expect(pod2To1(81)).toBe(DROP);
        expect(decided()).toEqual(["ingress denied networkPolicy -"]);
      });

      it("takes the Baseline rule of the lowest bit: an Accept before a later Deny, and the other way round", () => {
        const s = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [fromAnywhere(POD2[af]), anything] });
        tiers(s, "ingress", { baseline: 0b11n, deny: 0b10n });
        expect(pod2To1(80)).toBe(REDIRECT);
        expect(fromWire(tcp(REMOTE[af], POD1[af], 80))).toBe(DROP);
        expect(decided()).toEqual(["ingress tier-denied baseline 1"]);
        const t = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [anything, fromAnywhere(POD2[af])] });
        tiers(t, "ingress", { baseline: 0b11n, deny: 0b01n });
        expect(pod2To1(80, 41001)).toBe(DROP);
        expect(decided()).toEqual(["ingress tier-denied baseline 0"]);
      });

      it("allows what no rule matches where no NetworkPolicy isolates the pod", () => {
        const s = policy(KEY1, BOTH, {
          ingress: [tcp80From(REMOTE[af])],
          egress: [{ peers: [{ cidr: host(REMOTE[af]), except: [] }], ports: [{ protocol: "UDP", from: 53, to: 53 }] }],
        });
        tiers(s, "ingress", { admin: 1n, deny: 1n });
        tiers(s, "egress", { baseline: 1n, deny: 1n });
        // Neither the address (no prefix of the slot holds it) nor the port matches.
        expect(pod2To1(80)).toBe(REDIRECT);
        // The address matches, the port does not; and a packet without ports.
        expect(fromWire(tcp(REMOTE[af], POD1[af], 81))).toBe(REDIRECT);
        expect(forwarded("wire", "pod1", [{ src: REMOTE[af], dst: POD1[af], proto: "icmp", echoId: 9 }])).toEqual([
          true,
        ]);
        expect(plain1({ src: POD1[af], dst: OUTSIDE[af], proto: "udp", dport: 53 })).toBe(NEXT);
        expect(plain1({ src: POD1[af], dst: REMOTE[af], proto: "udp", dport: 54 })).toBe(NEXT);
        // What the rules match, they deny.
        expect(fromWire(tcp(REMOTE[af], POD1[af], 80, TCP.SYN, 40001))).toBe(DROP);
        expect(plain1({ src: POD1[af], dst: REMOTE[af], proto: "udp", dport: 53 })).toBe(DROP);
        expect(decided()).toEqual(["ingress tier-denied admin 0", "egress tier-denied baseline 0"]);
      });

      it("lets the lowest matching Admin bit decide when two Admin rules match", () => {
        const s = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [fromAnywhere(POD2[af]), anything] });
        tiers(s, "ingress", { admin: 0b11n, deny: 0b10n });
        expect(pod2To1(80)).toBe(REDIRECT);
        expect(fromWire(tcp(REMOTE[af], POD1[af], 80))).toBe(DROP);
        expect(decided()).toEqual(["ingress tier-denied admin 1"]);
        const t = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [anything, fromAnywhere(POD2[af])] });
        tiers(t, "ingress", { admin: 0b11n, deny: 0b01n });
        expect(pod2To1(80, 41001)).toBe(DROP);
        expect(decided()).toEqual(["ingress tier-denied admin 0"]);
      });

      it("reads a slot without a tier entry as NetworkPolicy alone, though its other direction has one", () => {
        const s = policy(KEY1, BOTH, {
          ingress: [tcp80From(POD2[af])],
          egress: [{ peers: "any", ports: [{ protocol: "UDP", from: 53, to: 53 }] }],
        });
        tiers(s, "egress", { admin: 1n, deny: 1n });
        expect(pod2To1(80)).toBe(REDIRECT);
        expect(pod2To1(81)).toBe(DROP);
        expect(fromWire(tcp(REMOTE[af], POD1[af], 80))).toBe(DROP);
        expect(plain1({ src: POD1[af], dst: OUTSIDE[af], proto: "udp", dport: 53 })).toBe(DROP);
        expect(decided()).toEqual([
          "ingress denied networkPolicy -",
          "ingress denied networkPolicy -",
          "egress tier-denied admin 0",
        ]);
      });

      it("counts each new flow under the tier that decided it, allowed or denied (the agent's metrics)", () => {
        const counts = () => {
          const out = new Map<string, bigint>();
          for (const c of readPolicyVerdicts(pol)) out.set(`${c.direction} ${c.tier} ${c.verdict}`, c.flows);
          return out;
        };
        const before = counts();
        // Bit 0: Admin Accept of pod2's port 80; bit 1: Admin Deny of its port 81; bit 2:
        // NetworkPolicy's port 82; bit 3: a Baseline Deny of anything, never reached (the
        // NetworkPolicy isolates).
        const port = (p: number): DatapathRule => ({
          peers: [{ cidr: host(POD2[af]), except: [] }],
          ports: [{ protocol: "TCP", from: p, to: p }],
        });
        const s = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [port(80), port(81), port(82), anything] });
        tiers(s, "ingress", { admin: 0b11n, deny: 0b1010n, baseline: 0b1000n, networkPolicy: true });
        expect(pod2To1(80, 42000)).toBe(REDIRECT);
        expect(pod2To1(81, 42001)).toBe(DROP);
        expect(pod2To1(82, 42002)).toBe(REDIRECT);
        expect(pod2To1(83, 42003)).toBe(DROP);
        // No NetworkPolicy: a Baseline Accept, then what no tier decides.
        const t = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [port(84)] });
        tiers(t, "ingress", { baseline: 1n });
        expect(pod2To1(84, 42004)).toBe(REDIRECT);
        expect(pod2To1(85, 42005)).toBe(REDIRECT);
        const after = counts();
        const delta = [...after]
          .filter(([k, n]) => n !== (before.get(k) ?? 0n))
          .map(([k, n]) => `${k} +${n - (before.get(k) ?? 0n)}`);
        expect(delta.sort()).toEqual([
          "ingress admin allowed +1",
          "ingress admin denied +1",
          "ingress baseline allowed +1",
          "ingress networkPolicy allowed +1",
          "ingress networkPolicy denied +1",
          "ingress none allowed +1",
        ]);
      });

      it("cuts a remembered flow both ways once the slot's tiers change under a new stamp to an Admin Deny", () => {
        const s = policy(KEY1, POL_F_ISOLATED_IN, { ingress: [tcp80From(POD2[af]), tcp80From(POD2[af])] });
        tiers(s, "ingress", { admin: 1n, pass: 1n, networkPolicy: true });
        expect(pod2To1(80)).toBe(REDIRECT);
        expect(fromPod1(tcp(POD1[af], POD2[af], 41000, TCP.SYN | TCP.ACK, 80))).toBe(REDIRECT);
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.ACK, 41000))).toBe(REDIRECT);
        // The Admin rule turns from Pass to Deny: the slot's bits mean something else, a new stamp.
        tiers(s, "ingress", { admin: 1n, deny: 1n, networkPolicy: true });
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.ACK, 41000))).toBe(REDIRECT);
        restamp(KEY1, s, POL_F_ISOLATED_IN);
        expect(fromPod2(tcp(POD2[af], POD1[af], 80, TCP.ACK, 41000))).toBe(DROP);
        expect(fromPod1(tcp(POD1[af], POD2[af], 41000, TCP.ACK, 80))).toBe(DROP);
        expect(decided()).toEqual(["ingress revoked admin 0", "egress revoked admin 0"]);
      });
    });

    describe("fragments", () => {
      /** One UDP datagram from `src` to `dst`:`dport` in three fragments: the first with the
       * UDP header, two later ones with bytes only (the last without more-fragments). */
      function datagram(src: string, dst: string, dport: number, id: number): PacketSpec[] {
        const base = { src, dst, proto: "udp" as const };
        const bytes = (n: number, fill: number) => Buffer.alloc(n, fill);
        if (af === "v4")
          return [
            { ...base, sport: 5353, dport, ipId: id, fragment: true, payload: bytes(32, 1) },
            { ...base, ipId: id, fragment: true, fragmentOffset: 5, fragmentData: bytes(40, 2) },
            { ...base, ipId: id, fragmentOffset: 10, fragmentData: bytes(16, 3) },
          ];
        return [
          { ...base, sport: 5353, dport, ipv6Ext: [{ type: "fragment", more: true, id }], payload: bytes(32, 1) },
          { ...base, ipv6Ext: [{ type: "fragment", offset: 5, more: true, id }], fragmentData: bytes(40, 2) },
          { ...base, ipv6Ext: [{ type: "fragment", offset: 10, id }], fragmentData: bytes(16, 3) },
        ];
      }
      const dns: Rules = { egress: [{ peers: "any", ports: [{ protocol: "UDP", from: 53, to: 53 }] }] };

      it("passes every fragment of a datagram to an allowed port to the stack, and drops every one to a refused port", () => {
        policy(KEY1, POL_F_ISOLATED_OUT, dns);
        expect(datagram(POD1[af], OUTSIDE[af], 53, 0x100).map(plain1)).toEqual([NEXT, NEXT, NEXT]);
        // Leaving the node, the same fragments meet the pod's egress again: the flow's entry.
        expect(datagram(POD1[af], OUTSIDE[af], 53, 0x100).map(toWire)).toEqual([NEXT, NEXT, NEXT]);
        // Never redirected, even between two local pods: the stack reassembles.
        expect(datagram(POD1[af], POD2[af], 53, 0x101).map(fromPod1)).toEqual([NEXT, NEXT, NEXT]);
        expect(datagram(POD1[af], OUTSIDE[af], 54, 0x102).map(plain1)).toEqual([DROP, DROP, DROP]);
        expect(readPolicyStats(pol, h1)).toMatchObject({ allowed: { egress: 2n }, denied: { egress: 3n } });
        expect(events().map((e) => [e.reason, e.dport])).toEqual([
          ["denied", 54],
          ["denied", 54],
          ["denied", 54],
        ]);
        if (af === "v6") {
          // An atomic fragment (offset 0, no more to come) is a whole packet, judged by its ports.
          const atomic = (dport: number): PacketSpec => ({
            src: POD1.v6,
            dst: OUTSIDE.v6,
            proto: "udp",
            dport,
            ipv6Ext: [{ type: "fragment", id: 0x103 }],
          });
          expect([plain1(atomic(53)), plain1(atomic(54))]).toEqual([NEXT, DROP]);
          expect(reasons()).toEqual(["egress denied"]);
        }
      });

      it("drops a later fragment whose first was not seen, and tells datagrams apart by identification", () => {
        policy(KEY1, POL_F_ISOLATED_OUT, dns);
        const [first, later, last] = datagram(POD1[af], OUTSIDE[af], 53, 0x200) as [PacketSpec, PacketSpec, PacketSpec];
        const other = datagram(POD1[af], OUTSIDE[af], 53, 0x201);
        // Reordered ahead of its first fragment: dropped (and counted), the rest pass after it.
        expect(plain1(later)).toBe(DROP);
        expect(reasons()).toEqual(["egress fragment"]);
        expect(dropsOf(h1)).toBe(1n);
        expect(plain1(first)).toBe(NEXT);
        expect(plain1(last)).toBe(NEXT);
        // Another identification is another datagram, whose first fragment nobody saw.
        expect(plain1(other[1] as PacketSpec)).toBe(DROP);
        expect(plain1(other[2] as PacketSpec)).toBe(DROP);
        // And so is the same identification between other addresses.
        expect(plain1({ ...later, dst: REMOTE[af] })).toBe(DROP);
        expect(reasons()).toEqual(["egress fragment", "egress fragment", "egress fragment"]);
        // A refused datagram's fragments stay refused beside an allowed one's.
        const refused = datagram(POD1[af], OUTSIDE[af], 54, 0x202);
        expect(refused.map(plain1)).toEqual([DROP, DROP, DROP]);
        expect(plain1(later)).toBe(NEXT);
        expect(dropsOf(h1)).toBe(7n);
      });

      it("judges a datagram's fragments at both ends between two local pods (nkc_pod_policy)", () => {
        policy(KEY1, POL_F_ISOLATED_OUT, {
          egress: [{ peers: [{ cidr: host(POD2[af]), except: [] }], ports: [{ protocol: "UDP", from: 53, to: 54 }] }],
        });
        policy(KEY2, POL_F_ISOLATED_IN, {
          ingress: [{ peers: [{ cidr: host(POD1[af]), except: [] }], ports: [{ protocol: "UDP", from: 53, to: 53 }] }],
        });
        expect(forwarded("pod1", "pod2", datagram(POD1[af], POD2[af], 53, 0x300))).toEqual([true, true, true]);
        expect(forwarded("pod1", "pod2", datagram(POD1[af], POD2[af], 54, 0x301))).toEqual([false, false, false]);
        expect(forwarded("pod1", "pod2", datagram(POD1[af], POD2[af], 55, 0x302))).toEqual([false, false, false]);
        expect(readPolicyStats(pol, h1)).toMatchObject({ allowed: { egress: 2n }, denied: { egress: 3n } });
        expect(readPolicyStats(pol, h2)).toMatchObject({ allowed: { ingress: 1n }, denied: { ingress: 3n } });
        // The receiver alone isolated: its own table carries the first fragment's ports.
        deletePolicyPod(pol, KEY1);
        expect(forwarded("pod1", "pod2", datagram(POD1[af], POD2[af], 53, 0x303))).toEqual([true, true, true]);
        expect(forwarded("pod1", "pod2", datagram(POD1[af], POD2[af], 54, 0x304))).toEqual([false, false, false]);
        const [, later] = datagram(POD1[af], POD2[af], 53, 0x305);
        expect(forwarded("pod1", "pod2", [later as PacketSpec])).toEqual([false]);
        expect(events().map((e) => `${e.ifindex === h1 ? "pod1" : "pod2"} ${e.dir} ${e.reason}`)).toEqual([
          ...Array(3).fill("pod2 ingress denied"),
          ...Array(3).fill("pod1 egress denied"),
          ...Array(3).fill("pod2 ingress denied"),
          "pod2 ingress fragment",
        ]);
      });
    });

    describe("fragmented echo", () => {
      /** An echo of `id` from `src` to `dst` in two fragments: the ICMP header, then bytes. */
      function echo(src: string, dst: string, id: number, ipId: number, reply = false): PacketSpec[] {
        const base = { src, dst, proto: "icmp" as const };
        const first: PacketSpec = { ...base, echoId: id, echoReply: reply, payload: Buffer.alloc(56, 7) };
        const later: PacketSpec = { ...base, fragmentData: Buffer.alloc(64, 8) };
        if (af === "v4")
          return [
            { ...first, ipId, fragment: true },
            { ...later, ipId, fragmentOffset: 8 },
          ];
        return [
          { ...first, ipv6Ext: [{ type: "fragment", more: true, id: ipId }] },
          { ...later, ipv6Ext: [{ type: "fragment", offset: 8, id: ipId }] },
        ];
      }

      it("passes a large ping the pod's egress allows and its fragmented replies, which no ingress rule allows", () => {
        policy(KEY1, BOTH, { egress: [{ peers: [{ cidr: host(REMOTE[af]), except: [] }], ports: "any" }] });
        expect(echo(POD1[af], REMOTE[af], 0x77, 0x400).map(fromPod1)).toEqual([NEXT, NEXT]);
        expect(forwarded("wire", "pod1", echo(REMOTE[af], POD1[af], 0x77, 0x9000, true))).toEqual([true, true]);
        // Another echo identifier is another flow, which the pod never started.
        expect(forwarded("wire", "pod1", echo(REMOTE[af], POD1[af], 0x78, 0x9001, true))).toEqual([false, false]);
        // A router's time exceeded about the pod's echo request comes in as part of it.
        const timeExceeded = (id: number) =>
          icmpError({
            src: OUTSIDE[af],
            dst: POD1[af],
            type: af === "v4" ? 11 : 3,
            quoting: { src: POD1[af], dst: REMOTE[af], proto: "icmp", echoId: id },
          });
        expect(forwarded("wire", "pod1", [timeExceeded(0x77), timeExceeded(0x78)])).toEqual([true, false]);
        expect(reasons()).toEqual(["ingress denied", "ingress denied", "ingress denied"]);
      });
    });

    describe("ICMP errors", () => {
      const ROUTER = OUTSIDE[af];

      it("lets an error about a flow the pod opened into it, and none about another flow or another pod", () => {
        policy(KEY1, BOTH, {
          egress: [
            { peers: [{ cidr: host(REMOTE[af]), except: [] }], ports: [{ protocol: "TCP", from: 80, to: 80 }] },
            { peers: [{ cidr: host(REMOTE[af]), except: [] }], ports: [{ protocol: "UDP", from: 7, to: 7 }] },
          ],
        });
        expect(fromPod1(tcp(POD1[af], REMOTE[af], 80, TCP.SYN, 41000))).not.toBe(DROP);
        const tooBig = (quoting: PacketSpec) =>
          icmpError({
            src: ROUTER,
            dst: POD1[af],
            type: af === "v4" ? 3 : 2,
            code: af === "v4" ? 4 : 0,
            mtu: 1280,
            quoting,
          });
        expect(
          forwarded("wire", "pod1", [
            tooBig(tcp(POD1[af], REMOTE[af], 80, TCP.ACK, 41000)),
            tooBig(tcp(POD1[af], REMOTE[af], 80, TCP.ACK, 41001)),
            tooBig(tcp(POD2[af], REMOTE[af], 80, TCP.ACK, 41000)),
            tooBig({ src: POD1[af], dst: REMOTE[af], proto: "udp", sport: 41000, dport: 80 }),
            // The flow's own 5-tuple, but quoted as a packet the pod received: not one it sent.
            tooBig(tcp(REMOTE[af], POD1[af], 41000, TCP.ACK, 80)),
          ]),
        ).toEqual([true, false, false, false, false]);
        // A time exceeded about a UDP flow of the pod's.
        expect(fromPod1({ src: POD1[af], dst: REMOTE[af], proto: "udp", sport: 41002, dport: 7 })).not.toBe(DROP);
        const timeExceeded = icmpError({
          src: ROUTER,
          dst: POD1[af],
          type: af === "v4" ? 11 : 3,
          quoting: { src: POD1[af], dst: REMOTE[af], proto: "udp", sport: 41002, dport: 7 },
        });
        expect(forwarded("wire", "pod1", [timeExceeded])).toEqual([true]);
        expect(reasons()).toEqual(Array(4).fill("ingress denied"));
        // Its flow's rules gone (another slot, another stamp): so is the error's way in.
        policy(KEY1, BOTH, {});
        expect(forwarded("wire", "pod1", [tooBig(tcp(POD1[af], REMOTE[af], 80, TCP.ACK, 41000))])).toEqual([false]);
        expect(reasons()).toEqual(["ingress revoked"]);
      });

      it("lets an error about a flow of the pod's in though an earlier error from that router no longer counts", () => {
        const toRemote: DatapathRule = {
          peers: [{ cidr: host(REMOTE[af]), except: [] }],
          ports: [{ protocol: "TCP", from: 80, to: 80 }],
        };
        policy(KEY1, BOTH, {
          egress: [toRemote],
          ingress: [{ peers: [{ cidr: host(ROUTER), except: [] }], ports: "any" }],
        });
        expect(fromPod1(tcp(POD1[af], REMOTE[af], 80, TCP.SYN, 41000))).not.toBe(DROP);
        const unreachable = (sport: number) =>
          icmpError({
            src: ROUTER,
            dst: POD1[af],
            type: af === "v4" ? 3 : 1,
            code: 1,
            quoting: tcp(POD1[af], REMOTE[af], 80, TCP.ACK, sport),
          });
        // About no flow of the pod's: judged as a flow of its own (router to pod, no ports), allowed.
        expect(forwarded("wire", "pod1", [unreachable(41999)])).toEqual([true]);
        // The router may no longer reach the pod; its errors about the pod's flow still do.
        policy(KEY1, BOTH, { egress: [toRemote] });
        expect(forwarded("wire", "pod1", [unreachable(41000), unreachable(41999)])).toEqual([true, false]);
        // An error is never part of a flow of its own: one about no flow is judged anew.
        expect(reasons()).toEqual(["ingress denied"]);
      });

      it("lets a pod isolated both ways send a port unreachable about a flow it was allowed, and no other", () => {
        policy(KEY1, BOTH, {
          ingress: [
            { peers: [{ cidr: host(REMOTE[af]), except: [] }], ports: [{ protocol: "UDP", from: 53, to: 53 }] },
          ],
        });
        const request: PacketSpec = { src: REMOTE[af], dst: POD1[af], proto: "udp", sport: 5353, dport: 53 };
        expect(forwarded("wire", "pod1", [request, { ...request, dport: 54 }])).toEqual([true, false]);
        const unreachable = (quoting: PacketSpec) =>
          icmpError({ src: POD1[af], dst: REMOTE[af], type: af === "v4" ? 3 : 1, code: af === "v4" ? 3 : 4, quoting });
        expect(fromPod1(unreachable(request))).toBe(NEXT);
        expect(plain1(unreachable(request))).toBe(NEXT);
        expect(fromPod1(unreachable({ ...request, dport: 54 }))).toBe(DROP);
        expect(fromPod1(unreachable({ ...request, dst: POD2[af] }))).toBe(DROP);
        expect(reasons()).toEqual(["ingress denied", "egress denied", "egress denied"]);
      });
    });
  });

  describe("IPv6 neighbour discovery", () => {
    const nd = (type: number, src: string, dst: string, ttl: number): PacketSpec => ({
      src,
      dst,
      proto: "icmp",
      icmpType: type,
      ttl,
      payload: Buffer.alloc(24, 0x5a),
    });

    it.each([
      ["pending", POL_F_PENDING],
      ["denied", BOTH],
    ] as const)("passes only as neighbour discovery, from the pod and into it (%s)", (why, flags) => {
      if (flags === POL_F_PENDING) writePolicyPod(pol, KEY1, 0, POL_F_PENDING, 0n);
      else policy(KEY1, BOTH, {});
      // Types 133-137 between global addresses, whatever the hop limit: a tunnel through the policy.
      for (const type of [133, 134, 135, 136, 137]) {
        for (const ttl of [255, 64]) {
          expect(fromPod1(nd(type, POD1.v6, POD2.v6, ttl))).toBe(DROP);
          expect(plain1(nd(type, POD1.v6, OUTSIDE.v6, ttl))).toBe(DROP);
        }
      }
      // Below hop limit 255 a router may have forwarded it: no neighbour discovery either.
      expect(fromPod1(nd(136, POD1.v6, "fe80::1", 254))).toBe(DROP);
      expect(fromPod1(nd(135, POD1.v6, "ff02::1:ff00:1", 64))).toBe(DROP);
      // Into the pod: nkc_host_in leaves what has no ports to the stack; the pod's device judges it.
      expect(fromWire(nd(136, REMOTE.v6, POD1.v6, 255))).toBe(NEXT);
      const forged = [136, 134, 137].map((type) => nd(type, REMOTE.v6, POD1.v6, 255));
      expect(forwarded("wire", "pod1", [...forged, nd(135, OUTSIDE.v6, POD1.v6, 64)])).toEqual([
        false,
        false,
        false,
        false,
      ]);
      expect(reasons()).toEqual([...Array(22).fill(`egress ${why}`), ...Array(4).fill(`ingress ${why}`)]);
      // Neighbour discovery proper: hop limit 255, on the link.
      expect(fromPod1(nd(135, POD1.v6, "ff02::1:ff00:1", 255))).toBe(NEXT);
      expect(fromPod1(nd(136, POD1.v6, "fe80::1", 255))).toBe(NEXT);
      expect(plain1(nd(136, POD1.v6, "fe80::1", 255))).toBe(NEXT);
      expect(fromPod1(nd(135, "::", "ff02::1:ff00:10", 255))).toBe(NEXT);
      expect(fromPod1(nd(133, "fe80::10", "ff02::2", 255))).toBe(NEXT);
      expect(intoPod(nd(135, "fe80::1", POD1.v6, 255))).toBe(NEXT);
      expect(events()).toEqual([]);
    });
  });
});
