/**
 * The frame corpus through the real datapath: frames an attacker with CAP_NET_RAW sends
 * from a pod, and frames from the wire, each carrying a marker, sent with packet sockets
 * (tools/frames.py) while sniffers record where each one lands: inside the victim pod,
 * inside a pod on the other node, on the other node's end of the wire (it left the node).
 * No spoofed or unreadable frame may land anywhere; honest ones must. Here the kernel does
 * what a test run cannot show: it takes the outer VLAN tag off before the programs run
 * (veth; netkit hands the pod's tags over in the data), trusts the packet socket's
 * skb->protocol (netkit), and keeps a large frame's headers in paged data.
 *
 *   node A: p1 (the attacker), p2 (the victim)      node B: p3
 *   wire0 (MTU 9000) A <-> B; VLAN devices on both ends: wire0.100 (802.1Q), and
 *   wire0.200.100 (802.1ad 200 carrying 802.1Q 100: QinQ) for the nodes' own traffic.
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from "node:child_process";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PacketSpec, packet, TPID, tagged, withEthertype } from "../bpf/helpers/packets";
import { BINARY, Fixture, inNs, TEST_DATAPATH } from "../support/harness";
import { addPod, type ClusterNode, makeCluster, type Pod } from "../support/topology";

const FRAMES_PY = path.join(__dirname, "tools/frames.py");
const MARK = Buffer.from("NKCF");
const Q0 = { tpid: TPID.q, vid: 0 };
const AD0 = { tpid: TPID.ad, vid: 0 };

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;
let p1: Pod;
let p2: Pod;
let p3: Pod;
/** The pods frames are sent from, by the name cases use. */
const senders: Record<string, string> = {};
/** MACs the frames are addressed with: the pod's gateway (its host device), node A's wire0. */
let p1Mac: string;
let gatewayMac: string;
let wireMacA: string;
let wireMacB: string;
/** VLAN devices need 8021q, which this machine's kernel lacks; both guests have it. Asked
 * in a throwaway namespace that goes with the probe's process. */
const vlanDevices =
  spawnSync("unshare", [
    "--net",
    "sh",
    "-c",
    "ip link add v0 type veth peer name v1 && ip link add link v0 name v0.9 type vlan id 9",
  ]).status === 0;

const macOf = (netns: string, dev: string) =>
  (JSON.parse(inNs(netns, "ip", ["-j", "link", "show", dev])) as { address: string }[])[0]?.address ?? "";

beforeAll(() => {
  fx = new Fixture();
  [a, b] = makeCluster(fx);
  for (const node of [a, b]) {
    // Jumbo frames: a large frame's headers end up in paged data.
    inNs(node.netns, "ip", ["link", "set", "wire0", "mtu", "9000"]);
    if (!vlanDevices) continue;
    const n = node === a ? 1 : 2;
    // The nodes' own VLANs on the uplink: 802.1Q 100, and QinQ (802.1ad 200, then 100).
    inNs(node.netns, "ip", ["link", "add", "link", "wire0", "name", "wire0.100", "type", "vlan", "id", "100"]);
    inNs(node.netns, "ip", [
      "link",
      "add",
      "link",
      "wire0",
      "name",
      "wire0.200",
      "type",
      "vlan",
      "proto",
      "802.1ad",
      "id",
      "200",
    ]);
    inNs(node.netns, "ip", ["link", "add", "link", "wire0.200", "name", "w0.200.100", "type", "vlan", "id", "100"]);
    for (const [dev, v4, v6] of [
      ["wire0.100", `10.230.100.${n}`, `fd30:100::${n}`],
      ["wire0.200", undefined, undefined],
      ["w0.200.100", `10.230.201.${n}`, `fd30:201::${n}`],
    ] as const) {
      inNs(node.netns, "sysctl", ["-qw", `net.ipv6.conf.${dev.replaceAll(".", "/")}.accept_dad=0`]);
      inNs(node.netns, "ip", ["link", "set", dev, "up"]);
      if (v4) inNs(node.netns, "ip", ["addr", "add", `${v4}/24`, "dev", dev]);
      if (v6) inNs(node.netns, "ip", ["-6", "addr", "add", `${v6}/64`, "dev", dev, "nodad"]);
    }
  }
  p1 = addPod(fx, a, "frames-attacker");
  p2 = addPod(fx, a, "frames-victim");
  p3 = addPod(fx, b, "frames-remote");
  senders.pod = p1.netns;
  p1Mac = macOf(p1.netns, "eth0");
  gatewayMac = macOf(a.netns, p1.hostDevice);
  wireMacA = macOf(a.netns, "wire0");
  wireMacB = macOf(b.netns, "wire0");
}, 120_000);

afterAll(() => fx?.cleanup());

/** Where a frame may be seen: in p2, in p3, on node B's end of the wire. */
type Place = "p2" | "p3" | "wireB";
const PLACES: Place[] = ["p2", "p3", "wireB"];

interface Case {
  name: string;
  /** p1's eth0, node B's end of the wire, or the rate-limited pod's eth0. */
  from: "pod" | "wire" | "limited";
  frame: Buffer;
  /** The packet socket's protocol (skb->protocol of what it sends); default: the frame's own. */
  protocol?: number;
  /** Where it must land (all others: never). Empty: nowhere. */
  lands: Place[];
}

let nextMark = 1;
/** A payload carrying a fresh marker, padded to `size` bytes. */
function marked(size = 32): { id: number; payload: Buffer } {
  const id = nextMark++;
  const payload = Buffer.alloc(Math.max(size, 8));
  MARK.copy(payload, 0);
  payload.writeUInt32BE(id, 4);
  return { id, payload };
}

class Sniffer {
  private readonly child: ChildProcessWithoutNullStreams;
  private out = "";
  private err = "";
  readonly ready: Promise<void>;
  /** Its exit status, once its output is read to the end ("exit" may come before that). */
  private readonly closed: Promise<number | null>;

  constructor(netns: string, dev: string) {
    this.child = spawn("nsenter", [`--net=/run/netns/${netns}`, "python3", FRAMES_PY, "sniff", dev]);
    this.child.stdout.on("data", (d: Buffer) => {
      this.out += d.toString();
    });
    this.child.stderr.on("data", (d: Buffer) => {
      this.err += d.toString();
    });
    this.closed = new Promise((resolve) => this.child.on("close", (code) => resolve(code)));
    this.ready = new Promise((resolve, reject) => {
      this.child.stdout.on("data", () => {
        if (this.out.startsWith("ready\n")) resolve();
      });
      this.child.on("exit", (code) => reject(new Error(`sniffer on ${dev} exited ${code}: ${this.err}`)));
    });
    fx.processes.push({ kill: () => this.child.kill() });
  }

  /** The markers it saw, once it is told to stop. */
  async seen(): Promise<Set<number>> {
    this.child.stdin.end();
    const code = await this.closed;
    const last = this.out.trim().split("\n").pop() ?? "";
    if (code !== 0 || !last.startsWith("[")) throw new Error(`sniffer exited ${code}: ${this.err || this.out}`);
    return new Set(JSON.parse(last) as number[]);
  }
}

function send(netns: string, dev: string, frames: Buffer[], protocol?: number): void {
  const proto = protocol === undefined ? "frame" : protocol.toString(16).padStart(4, "0");
  const r = spawnSync("nsenter", [
    `--net=/run/netns/${netns}`,
    "python3",
    FRAMES_PY,
    "send",
    dev,
    proto,
    ...frames.map((f) => f.toString("hex")),
  ]);
  if (r.status !== 0) throw new Error(`frames.py send on ${dev}: ${r.stderr}`);
}

/** Sends every case (in order, each from where it says) and returns where each landed. */
async function deliver(cases: Case[]): Promise<Map<Case, Place[]>> {
  const sniffers: Record<Place, Sniffer> = {
    p2: new Sniffer(p2.netns, "eth0"),
    p3: new Sniffer(p3.netns, "eth0"),
    wireB: new Sniffer(b.netns, "wire0"),
  };
  await Promise.all(Object.values(sniffers).map((s) => s.ready));
  // One sender per run of cases from the same place with the same socket protocol:
  // process starts are what costs in the guests.
  for (let i = 0; i < cases.length; ) {
    const first = cases[i] as Case;
    let j = i;
    while (j < cases.length && cases[j]?.from === first.from && cases[j]?.protocol === first.protocol) j++;
    const frames = cases.slice(i, j).map((c) => c.frame);
    if (first.from === "wire") send(b.netns, "wire0", frames, first.protocol);
    else send(senders[first.from] ?? "", "eth0", frames, first.protocol);
    i = j;
  }
  // Frames the stack queues (a neighbour to resolve) land within moments.
  await new Promise((r) => setTimeout(r, 500));
  const seen = Object.fromEntries(
    await Promise.all(PLACES.map(async (p) => [p, await sniffers[p].seen()] as const)),
  ) as Record<Place, Set<number>>;
  return new Map(
    cases.map((c) => {
      const id = c.frame.readUInt32BE(c.frame.indexOf(MARK) + 4);
      return [c, PLACES.filter((p) => seen[p].has(id))];
    }),
  );
}

const fromPod = (spec: PacketSpec) => packet({ srcMac: p1Mac, dstMac: gatewayMac, sport: 5000, dport: 5000, ...spec });
const fromWire = (spec: PacketSpec) =>
  packet({ srcMac: wireMacB, dstMac: wireMacA, sport: 5000, dport: 5000, ...spec });

async function expectLandings(cases: Case[]): Promise<void> {
  const landed = await deliver(cases);
  const wrong = cases
    .map((c) => ({
      name: c.name,
      expected: [...c.lands].sort().join(",") || "nowhere",
      landed: [...(landed.get(c) ?? [])].sort().join(",") || "nowhere",
    }))
    .filter((r) => r.expected !== r.landed);
  expect(wrong).toEqual([]);
}

/** What the plugin's CLI says was refused: per pod (endpoints), per uplink (status). */
function refusedBy(pod: Pod): Record<string, number> {
  const rows = JSON.parse(inNs(a.netns, BINARY, ["endpoints", "--bpffs-root", a.bpffsRoot, "--json"])) as {
    hostDevice: string;
    drops: Record<string, number>;
  }[];
  return rows.find((r) => r.hostDevice === pod.hostDevice)?.drops ?? {};
}
function refusedOnWire(): Record<string, number> {
  const status = JSON.parse(inNs(a.netns, BINARY, ["status", "--bpffs-root", a.bpffsRoot, "--json"])) as {
    drops: { uplinks: { device: string; drops: Record<string, number> }[] };
  };
  return status.drops.uplinks.find((u) => u.device === "wire0")?.drops ?? {};
}
const nonZero = (drops: Record<string, number>) => Object.fromEntries(Object.entries(drops).filter(([, n]) => n > 0));

describe.each(["v4", "v6"] as const)("frames (%s)", (af) => {
  const ip = (pod: Pod) => (af === "v4" ? pod.v4 : pod.v6);
  const foreign = () => (af === "v4" ? "10.221.1.250" : "fd21:1::fa");
  /** A first fragment: more to come, so no router may read past it as a whole packet. */
  const fragment: Partial<PacketSpec> =
    af === "v4" ? { fragment: true } : { ipv6Ext: [{ type: "fragment", more: true }] };
  const udp = (src: string, dst: string, extra: Partial<PacketSpec> = {}) => ({
    src,
    dst,
    proto: "udp" as const,
    payload: marked().payload,
    ...extra,
  });

  it("from a pod: only untagged IP from its own address lands, and each refusal is counted by reason", async () => {
    const before = refusedBy(p1);
    const ext: Partial<PacketSpec> =
      af === "v4" ? { ipv4Options: Buffer.from([1, 1, 1, 0]) } : { ipv6Ext: [{ type: "hop" }, { type: "dest" }] };
    const cases: Case[] = [
      { name: "honest to p2", from: "pod", frame: fromPod(udp(ip(p1), ip(p2))), lands: ["p2"] },
      { name: "honest to p3", from: "pod", frame: fromPod(udp(ip(p1), ip(p3))), lands: ["wireB", "p3"] },
      {
        name: "honest, large (paged) to p2",
        from: "pod",
        frame: fromPod(udp(ip(p1), ip(p2), { payload: marked(4200).payload })),
        lands: ["p2"],
      },
      {
        name: "honest with options/extension headers",
        from: "pod",
        frame: fromPod(udp(ip(p1), ip(p2), ext)),
        lands: ["p2"],
      },
      { name: "spoofed (p2's) to p3", from: "pod", frame: fromPod(udp(ip(p2), ip(p3))), lands: [] },
      { name: "spoofed (foreign) to p2", from: "pod", frame: fromPod(udp(foreign(), ip(p2))), lands: [] },
      {
        name: "spoofed, large (paged)",
        from: "pod",
        frame: fromPod(udp(ip(p2), ip(p3), { payload: marked(4200).payload })),
        lands: [],
      },
      {
        name: "spoofed with options/extension headers",
        from: "pod",
        frame: fromPod(udp(ip(p2), ip(p3), ext)),
        lands: [],
      },
      {
        name: "spoofed IPv4-mapped source",
        from: "pod",
        frame: fromPod(udp(`::ffff:${p2.v4}`, p3.v6)),
        lands: [],
      },
      { name: "spoofed first fragment", from: "pod", frame: fromPod(udp(ip(p2), ip(p3), fragment)), lands: [] },
      {
        name: "spoofed to the broadcast or all-nodes address",
        from: "pod",
        frame: fromPod(udp(ip(p2), af === "v4" ? "255.255.255.255" : "ff02::1")),
        lands: [],
      },
      // Passed on (the link's own), but no router forwards a link-local source.
      ...(af === "v6"
        ? [{ name: "link-local source to p2", from: "pod" as const, frame: fromPod(udp("fe80::1", p2.v6)), lands: [] }]
        : []),
      { name: "spoofed, one tag", from: "pod", frame: tagged(fromPod(udp(ip(p2), ip(p3))), [Q0]), lands: [] },
      { name: "spoofed, one 802.1ad tag", from: "pod", frame: tagged(fromPod(udp(ip(p2), ip(p3))), [AD0]), lands: [] },
      { name: "spoofed, two tags", from: "pod", frame: tagged(fromPod(udp(ip(p2), ip(p3))), [Q0, Q0]), lands: [] },
      { name: "spoofed, QinQ", from: "pod", frame: tagged(fromPod(udp(ip(p2), ip(p2))), [AD0, Q0]), lands: [] },
      { name: "honest, two tags", from: "pod", frame: tagged(fromPod(udp(ip(p1), ip(p2))), [Q0, Q0]), lands: [] },
      {
        name: "spoofed, two tags, socket says IP",
        from: "pod",
        frame: tagged(fromPod(udp(ip(p2), ip(p3))), [Q0, Q0]),
        protocol: af === "v4" ? 0x0800 : 0x86dd,
        lands: [],
      },
      {
        name: "IP under an ethertype no pod speaks",
        from: "pod",
        frame: withEthertype(fromPod(udp(ip(p1), ip(p2))), 0x88b5),
        lands: [],
      },
      {
        name: "IP header cut short",
        from: "pod",
        frame: Buffer.concat([fromPod(udp(ip(p1), ip(p2))).subarray(0, 14 + 10), marked(8).payload]),
        lands: [],
      },
    ];
    await expectLandings(cases);
    const after = refusedBy(p1);
    const delta = Object.fromEntries(Object.keys(after).map((k) => [k, (after[k] ?? 0) - (before[k] ?? 0)]));
    // veth: the kernel takes one tag off before the program, netkit leaves it in the data:
    // tagged either way. A socket claiming IP for a tagged frame: veth re-reads the header
    // (tagged), netkit keeps the claim (the header's tag disagrees: tagged as well).
    expect(nonZero(delta)).toEqual({ spoofed: 7, tagged: 6, ethertype: 1, unparsable: 1 });
  });

  it("from the wire: a local pod's source is refused under up to two tags, and in paged headers", async () => {
    const before = refusedOnWire();
    const cases: Case[] = [
      { name: "honest (p3's) to p2", from: "wire", frame: fromWire(udp(ip(p3), ip(p2))), lands: ["p2"] },
      {
        name: "honest, large (paged)",
        from: "wire",
        frame: fromWire(udp(ip(p3), ip(p2), { payload: marked(4200).payload })),
        lands: ["p2"],
      },
      { name: "spoofed (p1's)", from: "wire", frame: fromWire(udp(ip(p1), ip(p2))), lands: [] },
      {
        name: "spoofed, large (paged)",
        from: "wire",
        frame: fromWire(udp(ip(p1), ip(p2), { payload: marked(4200).payload })),
        lands: [],
      },
      { name: "spoofed first fragment", from: "wire", frame: fromWire(udp(ip(p1), ip(p2), fragment)), lands: [] },
      {
        name: "IP header cut short",
        from: "wire",
        frame: Buffer.concat([fromWire(udp(ip(p3), ip(p2))).subarray(0, 14 + 10), marked(8).payload]),
        lands: [],
      },
      { name: "spoofed, one tag", from: "wire", frame: tagged(fromWire(udp(ip(p1), ip(p2))), [Q0]), lands: [] },
      {
        name: "spoofed, one 802.1ad tag",
        from: "wire",
        frame: tagged(fromWire(udp(ip(p1), ip(p2))), [AD0]),
        lands: [],
      },
      { name: "spoofed, two tags", from: "wire", frame: tagged(fromWire(udp(ip(p1), ip(p2))), [Q0, Q0]), lands: [] },
      { name: "spoofed, QinQ", from: "wire", frame: tagged(fromWire(udp(ip(p1), ip(p2))), [AD0, Q0]), lands: [] },
      {
        name: "spoofed, three tags",
        from: "wire",
        frame: tagged(fromWire(udp(ip(p1), ip(p2))), [Q0, Q0, Q0]),
        lands: [],
      },
      {
        name: "honest, three tags (unreadable)",
        from: "wire",
        frame: tagged(fromWire(udp(ip(p3), ip(p2))), [Q0, Q0, Q0]),
        lands: [],
      },
    ];
    await expectLandings(cases);
    const after = refusedOnWire();
    const delta = Object.fromEntries(Object.keys(after).map((k) => [k, (after[k] ?? 0) - (before[k] ?? 0)]));
    expect(nonZero(delta)).toEqual({ spoofed: 7, tagged: 2, unparsable: 1 });
  });

  // The guests' kernels have 8021q (test/vm/kernel.sh, the packaged kernel's module), and
  // the guest lanes run this file: there it must run.
  it.runIf(vlanDevices || process.env.NETKIT_VM)(
    "the nodes' own VLAN devices on the uplink keep working: 802.1Q and QinQ",
    () => {
      expect(vlanDevices, "VLAN devices in the guest").toBe(true);
      const peer = (net: string) => (af === "v4" ? `10.230.${net}.1` : `fd30:${net}::1`);
      for (const net of ["100", "201"]) {
        const r = spawnSync("nsenter", [
          `--net=/run/netns/${b.netns}`,
          "ping",
          ...(af === "v6" ? ["-6"] : []),
          "-c2",
          "-i0.2",
          "-W2",
          peer(net),
        ]);
        expect(r.status, `ping ${peer(net)} over VLAN ${net}: ${r.stdout}`).toBe(0);
      }
    },
  );
});

it(`runs on ${TEST_DATAPATH} pods`, () => {
  // The guest suite runs this file again with netkit pods; the datapath is the pods' own.
  const link = JSON.parse(inNs(a.netns, "ip", ["-j", "-d", "link", "show", p1.hostDevice])) as {
    linkinfo?: { info_kind?: string };
  }[];
  expect(link[0]?.linkinfo?.info_kind).toBe(TEST_DATAPATH);
});

describe("a pod's egress limit", () => {
  // 100 kbit/s with a 4 kB burst: 100 frames of 1 kB sent as fast as a script can are
  // far over it, however slowly a loaded machine runs the sender (2 s refill 25 kB).
  const LIMIT = { egressRate: 100_000, egressBurst: 32_000 };
  let limited: Pod;
  let limitedMac: string;

  beforeAll(() => {
    limited = addPod(fx, a, "frames-limited", { ...a.conf, runtimeConfig: { bandwidth: LIMIT } });
    limitedMac = macOf(limited.netns, "eth0");
    senders.limited = limited.netns;
  });

  const frames = (n: number, spec: (i: number) => PacketSpec) =>
    Array.from({ length: n }, (_, i) => packet({ srcMac: limitedMac, dstMac: gatewayMac, ...spec(i) }));

  it("holds for what only the link hears: IPv6 from a link-local source is policed too", () => {
    const before = refusedBy(limited);
    const linkLocal = frames(100, () => ({
      src: "fe80::aa",
      dst: "ff02::1",
      proto: "udp",
      sport: 5000,
      dport: 5000,
      payload: Buffer.alloc(1000),
    }));
    send(limited.netns, "eth0", linkLocal);
    const after = refusedBy(limited);
    expect((after.limit ?? 0) - (before.limit ?? 0)).toBeGreaterThanOrEqual(50);
  });

  it("never lets tagged frames through, so tags cannot carry a pod past its limit", async () => {
    const before = refusedBy(limited);
    const cases: Case[] = Array.from({ length: 20 }, () => ({
      name: "honest, two tags, from the limited pod",
      from: "limited" as const,
      frame: tagged(
        packet({
          srcMac: limitedMac,
          dstMac: gatewayMac,
          src: limited.v4,
          dst: p2.v4,
          proto: "udp",
          sport: 5000,
          dport: 5000,
          payload: marked(1000).payload,
        }),
        [Q0, Q0],
      ),
      lands: [],
    }));
    await expectLandings(cases);
    const after = refusedBy(limited);
    expect((after.tagged ?? 0) - (before.tagged ?? 0)).toBe(20);
    expect((after.limit ?? 0) - (before.limit ?? 0)).toBe(0);
  });
});
