/**
 * Packets the node's stack forwards, for the programs on a pod's host device transmit
 * (nkc_pod_policy): BPF_PROG_TEST_RUN gives every packet a socket (skb->sk), which those
 * programs take for the node's own traffic, so what they do with a forwarded packet (no
 * socket) is seen only by forwarding one.
 *
 *   nkbwire <-> nkbup      frames come in here, addressed to nkbup's MAC (from the wire)
 *   nkbp1 <-> nkbh1 ┐      or on a pod's end of its pair (what the pod sends);
 *   nkbp2 <-> nkbh2 ┘      the pods' addresses are routed out of nkbh1 and nkbh2, and
 *                          what arrives on nkbp1 or nkbp2 passed the host end's egress
 *
 * A frame is sent with a probe behind it, through the same devices: the probe goes to an
 * address on the same pod device that no endpoint holds, which the programs let by
 * unjudged. Each queue on the way is first in, first out (one CPU's backlog: the sender
 * is pinned to one), so once the probe arrives the frame has arrived or never will: no
 * waiting on a guess.
 */
import { AF_INET6, familyOf } from "../../../src/cni/address";
import { packet } from "./packets";
import { GATEWAY_MAC, makeTestNode, POD1, POD2, type TestNode } from "./test-node";

/** Unjudged addresses routed like the pods': the probes'. */
const PROBE = {
  nkbh1: { v4: "10.244.1.99", v6: "fd00:244:1::99" },
  nkbh2: { v4: "10.244.1.98", v6: "fd00:244:1::98" },
};

// Sends each frame and its probe; prints 1 or 0 per frame: seen on the receiving device
// (by its addresses and everything after the IP header: the forward rewrites MACs and
// the hop limit) before its probe.
const SEND_AND_SNIFF = `
import os, select, socket, sys, time
send_dev, recv_dev = sys.argv[1], sys.argv[2]
pairs = [(bytes.fromhex(f), bytes.fromhex(p)) for f, p in zip(sys.argv[3::2], sys.argv[4::2])]
def ident(f):
    if f[12:14] == b"\\x08\\x00":
        ihl = (f[14] & 15) * 4
        return f[18:22] + f[23:24] + f[26:34] + f[14 + ihl:]
    return f[22:54] + f[54:]
# One CPU: both sends go through its backlog, in order, whatever the scheduler does.
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
rx.bind((recv_dev, 0))
tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
tx.bind((send_dev, 0))
out = ""
for frame, probe in pairs:
    want, done = ident(frame), ident(probe)
    tx.send(frame)
    tx.send(probe)
    seen = False
    deadline = time.monotonic() + 5
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([rx], [], [], left)[0]:
            sys.exit("probe never arrived on " + recv_dev)
        got, addr = rx.recvfrom(65535)
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        if ident(got) == want:
            seen = True
        elif ident(got) == done:
            break
    out += "1" if seen else "0"
print(out)
`;

export interface ForwardingNode {
  node: TestNode;
  /** `frames` sent in on `from` (the wire, or a pod's end), each to `to`'s pod device:
   * for each, whether it came out on the pod's end. */
  send(from: "wire" | "pod1" | "pod2", to: "pod1" | "pod2", frames: Buffer[]): boolean[];
  destroy(): void;
}

const SENDERS = { wire: ["nkbwire", "nkbup"], pod1: ["nkbp1", "nkbh1"], pod2: ["nkbp2", "nkbh2"] } as const;
const RECEIVERS = { pod1: ["nkbh1", "nkbp1"], pod2: ["nkbh2", "nkbp2"] } as const;

/** The test node's topology (test-node.ts), forwarding to POD1 and POD2 out of their pairs. */
export function makeForwardingNode(label: string): ForwardingNode {
  const node = makeTestNode(label);
  const { ns } = node;
  ns.sysctl("net.ipv4.conf.all.rp_filter", "0");
  ns.sysctl("net.ipv4.conf.default.rp_filter", "0");
  for (const dev of ["nkbup", "nkbh1", "nkbh2"]) ns.sysctl(`net.ipv4.conf.${dev}.rp_filter`, "0");
  for (const [host, pod, ips] of [
    ["nkbh1", "nkbp1", [POD1.v4, POD1.v6, PROBE.nkbh1.v4, PROBE.nkbh1.v6]],
    ["nkbh2", "nkbp2", [POD2.v4, POD2.v6, PROBE.nkbh2.v4, PROBE.nkbh2.v6]],
  ] as const) {
    const podMac = ns.link(pod).mac;
    for (const ip of ips) {
      const v6 = familyOf(ip) === AF_INET6;
      ns.ip(v6 ? "-6" : "-4", "route", "add", `${ip}/${v6 ? 128 : 32}`, "dev", host);
      ns.ip(v6 ? "-6" : "-4", "neigh", "replace", ip, "lladdr", podMac, "dev", host, "nud", "permanent");
    }
  }
  return {
    node,
    send(from, to, frames) {
      const [sendDev, gatewayDev] = SENDERS[from];
      const [hostDev, recvDev] = RECEIVERS[to];
      const gatewayMac = ns.link(gatewayDev).mac;
      const args = frames.flatMap((f, i) => {
        const frame = Buffer.from(f);
        Buffer.from(gatewayMac.split(":").map((h) => Number.parseInt(h, 16))).copy(frame, 0);
        const v6 = frame.readUInt16BE(12) === 0x86dd;
        const probe = packet({
          src: v6 ? "2001:db8::99" : "192.0.2.99",
          dst: PROBE[hostDev][v6 ? "v6" : "v4"],
          proto: "udp",
          sport: 9,
          dport: 9,
          dstMac: gatewayMac,
          srcMac: GATEWAY_MAC,
          payload: Buffer.from(`probe ${process.pid} ${i} ${Math.random()}`),
        });
        return [frame.toString("hex"), probe.toString("hex")];
      });
      const out = ns.run("/usr/bin/python3", "-c", SEND_AND_SNIFF, sendDev, recvDev, ...args).trim();
      return [...out].map((c) => c === "1");
    },
    destroy: () => ns.destroy(),
  };
}
