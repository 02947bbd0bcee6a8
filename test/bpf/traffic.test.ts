/**
 * Real packets through attached programs (tcx on veth), not test-run: two pods and a
 * "remote node" around a node namespace.
 *
 *   nkb-tn-pod1 eth0 10.244.1.10/32 <-> nkbh1 ┐
 *   nkb-tn-pod2 eth0 10.244.1.11/32 <-> nkbh2 ├ nkb-tn-node (forwarding, proxy ARP)
 *   nkb-tn-rem  nkbwire 10.244.2.1/24 <-> nkbup 10.244.2.254/24 ┘
 *
 * Programs: nkc_from_pod on tcx ingress of nkbh1, nkbh2 (a pod's only program);
 * nkc_host_in on tcx ingress of nkbup, in whichever NAT check variant this kernel loads.
 * The node DNATs 10.96.0.10:9000/udp to pod1 like a kube-proxy Service.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFlowTable } from "../../src/bpf/fastpath/direct";
import { attachTcx, type BpfLink } from "../../src/bpf/loader/links";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import { inNetns } from "../../src/sys/netns";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { clearFlowTable } from "./helpers/flows";
import { TestNetns } from "./helpers/test-netns";

const POD1 = "10.244.1.10";
const POD2 = "10.244.1.11";
const REMOTE = "10.244.2.1";
const SERVICE = "10.96.0.10";

const UDP_ECHO = `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9000))
while True:
    data, peer = s.recvfrom(100)
    s.sendto(data, peer)
`;

// A connected UDP socket only accepts datagrams from the address it sent to: a reply
// that skipped conntrack's reverse DNAT (source = pod, not Service) never arrives.
const UDP_CLIENT = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
s.connect((sys.argv[1], 9000))
for _ in range(int(sys.argv[2])):
    s.send(b"nkb")
    try:
        print(s.recv(100).decode())
        sys.exit(0)
    except OSError:
        pass
sys.exit(1)
`;

let node: TestNetns;
let pod1: TestNetns;
let pod2: TestNetns;
let remote: TestNetns;
let bpffs: TestBpffs;
let programs: NodePrograms;
let echo: ChildProcess | undefined;
const links = new Map<string, BpfLink>();
let h1: number;
let h2: number;

function plumbPod(pod: TestNetns, hostDev: string, ip: string): void {
  node.ip("link", "add", hostDev, "type", "veth", "peer", "name", "eth0", "netns", pod.name);
  node.ip("link", "set", hostDev, "up");
  node.sysctl(`net.ipv4.conf.${hostDev}.proxy_arp`, "1");
  node.ip("route", "add", `${ip}/32`, "dev", hostDev);
  pod.ip("addr", "add", `${ip}/32`, "dev", "eth0");
  pod.ip("link", "set", "eth0", "up");
  pod.ip("route", "add", "default", "dev", "eth0");
}

function udpRequest(from: TestNetns, to: string, attempts: number): boolean {
  try {
    return from.run("/usr/bin/python3", "-c", UDP_CLIENT, to, String(attempts)).trim() === "nkb";
  } catch {
    return false;
  }
}

beforeAll(() => {
  const objects = buildObjects();
  node = TestNetns.create("tn-node");
  pod1 = TestNetns.create("tn-pod1");
  pod2 = TestNetns.create("tn-pod2");
  remote = TestNetns.create("tn-rem");
  bpffs = TestBpffs.mount();

  node.sysctl("net.ipv4.ip_forward", "1");
  plumbPod(pod1, "nkbh1", POD1);
  plumbPod(pod2, "nkbh2", POD2);
  node.ip("link", "add", "nkbup", "type", "veth", "peer", "name", "nkbwire", "netns", remote.name);
  node.ip("addr", "add", "10.244.2.254/24", "dev", "nkbup");
  node.ip("link", "set", "nkbup", "up");
  remote.ip("addr", "add", `${REMOTE}/24`, "dev", "nkbwire");
  remote.ip("link", "set", "nkbwire", "up");
  remote.ip("route", "add", "10.244.1.0/24", "via", "10.244.2.254");
  remote.ip("route", "add", "10.96.0.0/16", "via", "10.244.2.254");
  // Pods resolve every address by proxy ARP, which answers only for routed destinations;
  // DNAT in PREROUTING takes the Service's packets before this route would.
  node.ip("route", "add", "10.96.0.0/16", "dev", "nkbup");
  node.run(
    "iptables",
    ..."-t nat -A PREROUTING -d 10.96.0.10 -p udp --dport 9000 -j DNAT --to-destination 10.244.1.10:9000".split(" "),
  );
  h1 = node.link("nkbh1").ifindex;
  h2 = node.link("nkbh2").ifindex;
  const up = node.link("nkbup").ifindex;

  programs = loadNodePrograms(bpffs.root, objects, { clusterCidrs: ["10.244.0.0/16"] });
  for (const [ip, ifindex] of [
    [POD1, h1],
    [POD2, h2],
  ] as const) {
    createFlowTable(programs.maps.flows, ifindex);
    programs.endpoints.upsert(ip, { hostIfindex: ifindex, datapath: "veth" });
  }
  inNetns(node.path, () => {
    links.set("h1-in", attachTcx(programs.programs.fromPod, h1, "ingress"));
    links.set("h2-in", attachTcx(programs.programs.fromPod, h2, "ingress"));
    links.set("up-in", attachTcx(programs.programs.hostIn, up, "ingress"));
  });

  echo = spawn("nsenter", [`--net=${pod1.path}`, "/usr/bin/python3", "-c", UDP_ECHO], { stdio: "ignore" });
}, 60_000);

afterAll(() => {
  echo?.kill();
  for (const link of links.values()) link.close();
  programs?.close();
  bpffs?.release();
  for (const ns of [remote, pod2, pod1, node]) ns?.destroy();
});

describe("real traffic through attached programs", () => {
  it("pod to pod on one node: both directions redirected by nkc_from_pod", () => {
    pod1.run("ping", "-c", "3", "-i", "0.2", "-W", "2", POD2);
    expect(programs.readCounters(h1).redirectedLocal).toBeGreaterThanOrEqual(3n);
    expect(programs.readCounters(h2).redirectedLocal).toBeGreaterThanOrEqual(3n);
    expect(programs.readCounters(h1).droppedSpoofed).toBe(0n);
  });

  it("remote to pod: nkc_host_in redirects in, nkc_from_pod forwards the replies by FIB", () => {
    remote.run("ping", "-c", "3", "-i", "0.2", "-W", "2", POD1);
    const c = programs.readCounters(h1);
    expect(c.redirectedPeer).toBeGreaterThanOrEqual(3n);
    expect(c.redirectedFib + c.redirectedNeigh).toBeGreaterThanOrEqual(3n);
  });

  it("a DNATed Service flow from a pod elsewhere: its replies go back through the stack, un-NATed", () => {
    const before = programs.readCounters(h1).passedStackUnproven;
    expect(udpRequest(remote, SERVICE, 5)).toBe(true);
    expect(programs.readCounters(h1).passedStackUnproven).toBeGreaterThan(before);
    // The same pod reached directly (no NAT) works too: on the fast path where conntrack
    // can be asked, through the stack where UDP cannot be proven direct.
    expect(udpRequest(remote, POD1, 5)).toBe(true);
  });

  it("a DNATed Service flow from a pod on the same node: un-NATed too, with no program on pod1's device egress", () => {
    const before = programs.readCounters(h1).passedStackUnproven;
    expect(udpRequest(pod2, SERVICE, 5)).toBe(true);
    expect(programs.readCounters(h1).passedStackUnproven).toBeGreaterThan(before);
  });

  it("needs no memory to stay correct: with every flow table emptied, Services still answer", () => {
    for (const ifindex of [h1, h2]) clearFlowTable(programs.maps.flows, ifindex);
    expect(udpRequest(remote, SERVICE, 2)).toBe(true);
    expect(udpRequest(pod2, SERVICE, 2)).toBe(true);
    pod1.run("ping", "-c", "2", "-i", "0.2", "-W", "2", POD2);
  });
});
