/**
 * NetworkPolicy's verdicts in the programs (bpf/lib/policy.h), run with
 * BPF_PROG_TEST_RUN on hand-built packets in the shared test node (helpers/node.ts):
 * pod1 (h1) and pod2 (h2) local, REMOTE across the uplink. Each pod's policy is written
 * as the agent writes it (a slot's tables from policy-tables.ts, the pod's key and
 * flags); each test then sends the packets a flow is made of, through the program each
 * would meet, and checks what passes, what is dropped and what is counted.
 *
 * Verdicts: NEXT -1 (on to the stack), DROP 2, REDIRECT 7.
 *
 * BPF_PROG_TEST_RUN gives every packet a socket of its own (skb->sk), which is what
 * nkc_pod_policy takes for a packet of the node's: here it always comes from the node.
 * Its judgment of other sources is proven in real namespaces (test/integration).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createFlowTable } from "../../src/bpf/direct";
import { conntrackUnavailable } from "../../src/bpf/kernel-probe";
import { loadNodePrograms, type NatCheck, type NodePrograms } from "../../src/bpf/node";
import {
  applyTableWrites,
  openPolicyMaps,
  type PolicyMaps,
  podKey,
  policyFlowTables,
  readPolicyStats,
  recordPolicyEndpoint,
  writePolicyPod,
} from "../../src/bpf/policy";
import { POL_F_ISOLATED_IN, POL_F_ISOLATED_OUT, POL_F_PENDING, vipKey } from "../../src/bpf/policy-abi";
import { type DatapathRule, slotTables, slotWrites } from "../../src/bpf/policy-tables";
import type { BpfProgram } from "../../src/bpf/programs";
import { AF_INET, AF_INET6 } from "../../src/cni/address";
import { inNetns } from "../../src/sys/netns";
import { TestBpffs } from "./helpers/bpffs";
import type { TestNetns } from "./helpers/netns";
import { DROP, makeTestNode, NEXT, POD1, POD2, REDIRECT, REMOTE } from "./helpers/node";
import { buildObjects } from "./helpers/objects";
import { type PacketSpec, packet, TCP } from "./helpers/packets";
import { testRun } from "./helpers/test-run";

const CLUSTER = ["10.244.0.0/16", "fd00:244::/32"];
const VIP = { v4: "10.96.0.10", v6: "fd00:96::10" };
const OUTSIDE = { v4: "192.0.2.7", v6: "2001:db8::7" };
const whyNoConntrack = conntrackUnavailable();
const VARIANTS: NatCheck[] = whyNoConntrack ? ["memory"] : ["conntrack", "memory"];
const KEY1 = podKey("ns", "pod1");
const KEY2 = podKey("ns", "pod2");

let objects: ReturnType<typeof buildObjects>;
let ns: TestNetns;
let h1: number;
let h2: number;
let up: { ifindex: number; mac: string };

beforeAll(() => {
  objects = buildObjects();
  ({ ns, h1, h2, up } = makeTestNode("pol"));
}, 60_000);

afterAll(() => ns?.destroy());

describe.each(VARIANTS)("%s NAT check", (natCheck) => {
  let bpffs: TestBpffs;
  let node: NodePrograms;
  let pol: PolicyMaps;
  let slot = 0;

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
  });

  afterAll(() => {
    pol?.close();
    node?.close();
    bpffs?.release();
  });

  beforeEach(() => {
    for (const map of [pol.endpoints, pol.pods, pol.peers, pol.ports, pol.vips, pol.stats, node.maps.drops]) {
      for (const key of [...map.keys()]) map.delete(key);
    }
    // Fresh flow tables (the policy's and the fast path's): each test starts with nothing remembered.
    for (const ifindex of [h1, h2]) {
      createFlowTable(policyFlowTables(pol), ifindex);
      createFlowTable(node.maps.flows, ifindex);
    }
    recordPolicyEndpoint(pol, h1, KEY1);
    recordPolicyEndpoint(pol, h2, KEY2);
  });

  /** pod `key` isolated as `flags` says, with these rules (a new slot each time). */
  function policy(key: bigint, flags: number, rules: { ingress?: DatapathRule[]; egress?: DatapathRule[] }) {
    slot += 1;
    applyTableWrites(
      pol,
      slotWrites(slot, undefined, slotTables({ ingress: rules.ingress ?? [], egress: rules.egress ?? [] })),
    );
    writePolicyPod(pol, key, slot, flags);
  }

  const run = (program: BpfProgram, ifindex: number, frame: Buffer) =>
    inNetns(ns.path, () => testRun(program, { packet: frame, ifindex }).verdict);
  const fromPod1 = (spec: PacketSpec) => run(node.programs.fromPod, h1, packet(spec));
  const fromPod2 = (spec: PacketSpec) => run(node.programs.fromPod, h2, packet(spec));
  const plain1 = (spec: PacketSpec) => run(node.programs.sourceCheck, h1, packet(spec));
  const fromWire = (spec: PacketSpec) => run(node.programs.hostIn, up.ifindex, packet({ dstMac: up.mac, ...spec }));
  const intoPod = (spec: PacketSpec) => run(node.programs.podPolicy, h1, packet(spec));
  const toWire = (spec: PacketSpec) => run(node.programs.hostOut, up.ifindex, packet({ srcMac: up.mac, ...spec }));
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

    it("denies all but neighbour discovery to a pod wired before its policy was judged", () => {
      writePolicyPod(pol, KEY1, 0, POL_F_PENDING);
      expect(fromPod2(tcp(POD2[af], POD1[af], 80))).toBe(DROP);
      expect(fromPod1(tcp(POD1[af], POD2[af], 80))).toBe(DROP);
      if (af === "v6") {
        // Neighbour solicitation to the gateway's solicited-node address, from the pod.
        expect(fromPod1({ src: "fe80::1", dst: "ff02::1:ff00:1", proto: "icmp", icmpType: 135 })).not.toBe(DROP);
        expect(intoPod({ src: POD2[af], dst: POD1[af], proto: "icmp", icmpType: 136 })).toBe(NEXT);
      }
    });

    it("denies a fragment an isolated pod sends (it has no ports to judge)", () => {
      policy(KEY1, POL_F_ISOLATED_OUT, { egress: [{ peers: "any", ports: "any" }] });
      const fragment: PacketSpec =
        af === "v4"
          ? { ...tcp(POD1[af], OUTSIDE[af], 80), fragmentOffset: 8 }
          : { ...tcp(POD1[af], OUTSIDE[af], 80), ipv6Ext: [{ type: "fragment", offset: 8 }] };
      expect(plain1(fragment)).toBe(DROP);
      expect(plain1(tcp(POD1[af], OUTSIDE[af], 80))).toBe(NEXT);
    });
  });
});
