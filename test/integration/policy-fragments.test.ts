/**
 * What travels with an allowed flow reaches an isolated pod through the real datapath:
 * a UDP datagram the sender's kernel fragments (a DNS answer with EDNS, syslog, NFS), in
 * both directions, on one node and across; and the ICMP errors of path MTU discovery, so
 * a TCP upload through a hop with a smaller MTU completes. Refused ports stay refused,
 * fragments and all. The pods' policies are written into the node's maps as the agent
 * writes them (KernelPolicyWriter, PolicySlots), the plugin's ADD having recorded each
 * pod's key.
 *
 *   node A: p1 (isolated both ways), p2                     node B: p3
 *   wire0 A <-> B (MTU 1500);  node B lan0 (MTU 1280 its end) <-> host "far" (MTU 1500),
 *   198.51.100.0/24 and 2001:db8:100::/64, outside the cluster: node B routes p1's
 *   packets there and tells p1 (ICMP "fragmentation needed", ICMPv6 "packet too big")
 *   when they are too big for lan0.
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PolicySlots } from "../../src/agent/policy/slots";
import { KernelPolicyWriter } from "../../src/agent/policy/writer";
import { objectsDir } from "../bpf/helpers/bpf-objects";
import { ceiling } from "../support/ceiling";
import { Fixture, inNs } from "../support/harness";
import { NETPOL_PROBE as PROBE, probeAnswers } from "../support/netpol-probe";
import { addPod, type ClusterNode, makeCluster, type Pod } from "../support/topology";

const FAR = { v4: "198.51.100.10", v6: "2001:db8:100::10" };
const LAN = { v4: "198.51.100.1", v6: "2001:db8:100::1" };

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;
let p1: Pod;
let p2: Pod;
let p3: Pod;
let far: string;
let writer: KernelPolicyWriter;
let slots: PolicySlots;

const named = (name: string) => ({ CNI_ARGS: `K8S_POD_NAMESPACE=pol;K8S_POD_NAME=${name}` });

function serve(netns: string, ...ports: number[]): ChildProcess {
  const server = spawn("nsenter", [`--net=/run/netns/${netns}`, "python3", PROBE, "serve", ...ports.map(String)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  fx.processes.push({ kill: () => server.kill("SIGKILL") });
  return server;
}

const host = (ip: string) => ({ cidr: `${ip}/${ip.includes(":") ? 128 : 32}`, except: [] });

beforeAll(async () => {
  fx = new Fixture();
  [a, b] = makeCluster(fx, { networkPolicy: true });
  p1 = addPod(fx, a, "frag-p1", a.conf, named("p1"));
  p2 = addPod(fx, a, "frag-p2", a.conf, named("p2"));
  p3 = addPod(fx, b, "frag-p3", b.conf, named("p3"));
  // The far host behind node B, on a link whose node end carries only 1280 bytes.
  far = fx.makeNetns("nkf");
  inNs(b.netns, "ip", ["link", "add", "lan0", "type", "veth", "peer", "name", "eth0", "netns", `/run/netns/${far}`]);
  inNs(b.netns, "sysctl", ["-qw", "net.ipv6.conf.lan0.accept_dad=0"]);
  inNs(b.netns, "ip", ["link", "set", "lan0", "mtu", "1280", "up"]);
  inNs(b.netns, "ip", ["addr", "add", `${LAN.v4}/24`, "dev", "lan0"]);
  inNs(b.netns, "ip", ["-6", "addr", "add", `${LAN.v6}/64`, "dev", "lan0", "nodad"]);
  inNs(far, "sysctl", ["-qw", "net.ipv6.conf.all.accept_dad=0"]);
  inNs(far, "ip", ["link", "set", "lo", "up"]);
  inNs(far, "ip", ["link", "set", "eth0", "up"]);
  inNs(far, "ip", ["addr", "add", `${FAR.v4}/24`, "dev", "eth0"]);
  inNs(far, "ip", ["-6", "addr", "add", `${FAR.v6}/64`, "dev", "eth0", "nodad"]);
  inNs(far, "ip", ["route", "add", "default", "via", LAN.v4]);
  inNs(far, "ip", ["-6", "route", "add", "default", "via", LAN.v6]);
  inNs(a.netns, "ip", ["route", "add", "198.51.100.0/24", "via", b.wireV4]);
  inNs(a.netns, "ip", ["-6", "route", "add", "2001:db8:100::/64", "via", b.wireV6]);
  for (const node of [a, b]) {
    inNs(node.netns, "sysctl", ["-qw", "net.ipv4.ip_forward=1"]);
    inNs(node.netns, "sysctl", ["-qw", "net.ipv6.conf.all.forwarding=1"]);
  }
  const ready = [serve(p1.netns, 80, 81), serve(p3.netns, 80, 81)].map(
    (s) => new Promise((r) => s.stdout?.once("data", r)),
  );
  await Promise.all(ready);

  // p1 isolated both ways: in, UDP 80 from anyone; out, UDP 80 to p3 and TCP 5001 to the far host.
  // The object the plugin built and ADD loaded (the agent carries the same one).
  writer = new KernelPolicyWriter(a.bpffsRoot, fs.readFileSync(path.join(objectsDir, "bpf_lxc.o")));
  slots = new PolicySlots(writer);
  slots.place("pol/p1", {
    ingress: [{ peers: "any", ports: [{ protocol: "UDP", from: 80, to: 80 }] }],
    egress: [
      { peers: [host(p3.v4), host(p3.v6)], ports: [{ protocol: "UDP", from: 80, to: 80 }] },
      { peers: [host(FAR.v4), host(FAR.v6)], ports: [{ protocol: "TCP", from: 5001, to: 5001 }] },
    ],
    origins: { ingress: ["pol/p1 ingress[0]"], egress: ["pol/p1 egress[0]", "pol/p1 egress[1]"] },
  });
}, ceiling(120_000));

afterAll(() => {
  writer?.close();
  fx?.cleanup();
});

/** Whether `from` gets the answers to each target ("HOST PORT udp size=N"). */
const answers = (from: Pod, targets: string[]) => probeAnswers(from.netns, 3, targets);

describe.each([4, 6] as const)("IPv%i", (family) => {
  const ip = (p: Pod) => (family === 4 ? p.v4 : p.v6);

  it("lets a fragmented datagram to an allowed port and its fragmented answer through, on one node and across", async () => {
    // 3000 bytes out, 4000 back: both fragmented by their senders at the pods' MTU.
    const big = (p: Pod, port: number) => `${ip(p)} ${port} udp size=3000`;
    expect(await answers(p3, [big(p1, 80), big(p1, 81)])).toEqual(["yes", "no"]);
    expect(await answers(p2, [big(p1, 80), big(p1, 81)])).toEqual(["yes", "no"]);
    // p1's own egress to p3, fragments both ways.
    expect(await answers(p1, [big(p3, 80), big(p3, 81)])).toEqual(["yes", "no"]);
  });

  it(
    "lets path MTU discovery through: a TCP upload from the isolated pod through a 1280-byte hop completes",
    async () => {
      const dst = family === 4 ? FAR.v4 : FAR.v6;
      const sink = spawn(
        "nsenter",
        [
          `--net=/run/netns/${far}`,
          "python3",
          "-c",
          [
            "import socket, sys",
            "s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)",
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 5001)); s.listen(1)",
            "print('ready', flush=True)",
            "c, _ = s.accept(); n = 0",
            "while True:",
            "    d = c.recv(65536)",
            "    if not d: break",
            "    n += len(d)",
            "c.sendall(str(n).encode()); c.close()",
          ].join("\n"),
          dst,
        ],
        { stdio: ["ignore", "pipe", "inherit"] },
      );
      fx.processes.push({ kill: () => sink.kill("SIGKILL") });
      await new Promise((r) => sink.stdout?.once("data", r));
      const upload = inNs(p1.netns, "python3", [
        "-c",
        [
          "import socket, sys",
          "s = socket.create_connection((sys.argv[1], 5001), timeout=10)",
          "s.sendall(b'x' * 1_000_000); s.shutdown(socket.SHUT_WR)",
          "print(s.recv(64).decode())",
        ].join("\n"),
        dst,
      ]);
      expect(upload.trim()).toBe("1000000");
    },
    ceiling(60_000),
  );
});
