/**
 * A pod's flood must never change another pod's NAT'd traffic. Pod X holds an idle TCP
 * connection through a Service VIP (iptables DNAT on node A, like kube-proxy's) to a
 * backend; pod Y on the same node then sends more distinct flows than any flow memory
 * holds, each seen twice (UDP from every source port, TCP SYNs, echo requests), to
 * addresses outside the cluster (flows that must enter no flow memory at all) and
 * to a pod on the other node (flows the fast path proves direct and remembers, in Y's
 * own table); then the backend pushes data on the idle connection
 * (what a database notification or an HTTP/2 PING does). The push must reach X with the
 * VIP as its source, which only conntrack's reverse DNAT gives it: whatever the fast
 * path remembers or forgets, that reply must take the stack.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NodeStatus } from "../../src/cli/status";
import { useCluster } from "../support/fixtures";
import { BINARY, type Fixture, inNs, TEST_DATAPATH } from "../support/harness";
import { addPod, type ClusterNode, type Pod } from "../support/topology";
import { tcpRequest } from "./tcp";

const VIP = "10.96.0.10";
/** Each flow of the flood is sent this many times in a row: a flow seen again is one a cache keeps. */
const FLOOD_TIMES = 2;
/** Addresses outside the cluster the flood goes to: flows = 3 x 65535 per address. The
 * single-CPU VM interprets every program instruction: one address there, which still
 * overflows any map of 65536 flows. */
const OUTSIDE = ["198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"].slice(
  0,
  process.env.NETKIT_VM ? 1 : 4,
);

/** Holds data connections; a connection to the control port makes it push "push" on each. */
const PUSH_SERVER = `
const net = require("net");
const [host, port, control] = process.argv.slice(1);
const held = new Set();
net.createServer((s) => { console.error("conn from", s.remoteAddress, s.remotePort); held.add(s); s.on("close", () => { console.error("closed"); held.delete(s); }); s.on("error", (e) => console.error("err", e.message)); })
  .listen(Number(port), host, () => {
    net.createServer((c) => { for (const s of held) s.write("push\\n"); c.end("pushed " + held.size + "\\n"); })
      .listen(Number(control), host, () => console.log("ready"));
  });
`;

/** Connects, says so, and prints the first data that arrives (exit 2 if none in time). */
const WAITING_CLIENT = `
const net = require("net");
const [host, port, seconds] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port) }, () => console.log("connected"));
s.setTimeout(Number(seconds) * 1000, () => { console.error("nothing arrived"); process.exit(2); });
s.on("data", (d) => { process.stdout.write(d); process.exit(0); });
s.on("error", (e) => { console.error(e.message); process.exit(1); });
`;

/** tools/flood.c, compiled once per run of this file. */
let floodTool: string;

beforeAll(() => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkt-flood-"));
  floodTool = path.join(dir, "flood");
  execFileSync("clang", ["-O2", "-Wall", "-Werror", "-o", floodTool, path.join(__dirname, "tools/flood.c")]);
});
afterAll(() => fs.rmSync(path.dirname(floodTool), { recursive: true, force: true }));

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;

useCluster((cluster) => {
  ({ fx, a, b } = cluster);
});

async function startPushServer(backend: Pod): Promise<void> {
  const child = spawn(
    "nsenter",
    [`--net=/run/netns/${backend.netns}`, process.execPath, "-e", PUSH_SERVER, "0.0.0.0", "8080", "8081"],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  await new Promise<void>((resolve, reject) => {
    child.stdout.once("data", () => resolve());
    child.on("exit", (code) => reject(new Error(`push server exited with ${code}`)));
  });
}

interface Outcome {
  code: number | null;
  out: string;
}

/** Starts X's connection to the VIP; resolves once connected, with its outcome to await
 * (wrapped: an async function returning a promise would wait for it). */
async function connectAndWait(client: Pod, seconds: number): Promise<{ outcome: Promise<Outcome> }> {
  const child = spawn(
    "nsenter",
    [`--net=/run/netns/${client.netns}`, process.execPath, "-e", WAITING_CLIENT, VIP, "80", String(seconds)],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  let out = "";
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  const done = new Promise<Outcome>((resolve) => child.on("exit", (code) => resolve({ code, out: out + err })));
  await new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (d) => {
      out += d;
      if (out.includes("connected")) resolve();
    });
    done.then(({ out: o }) => reject(new Error(`client gave up before connecting: ${o}`)));
  });
  return { outcome: done };
}

/** `netkit-cni <verb> --json` on a node. */
function cli(node: ClusterNode, ...args: string[]): unknown {
  const r = spawnSync(
    "nsenter",
    [`--net=/run/netns/${node.netns}`, BINARY, ...args, "--json", "--bpffs-root", node.bpffsRoot],
    { encoding: "utf8" },
  );
  return JSON.parse(r.stdout);
}

/** Each pod's flow table on a node, by container ID, as `endpoints` reports it. */
function flowTables(node: ClusterNode): (containerId: string) => Record<string, number> | undefined {
  const rows = cli(node, "endpoints") as { containerId: string; flowTable?: Record<string, number> }[];
  return (id) => rows.find((r) => r.containerId === id)?.flowTable;
}

describe(`NAT'd flows survive another pod's flood (${TEST_DATAPATH})`, () => {
  it.each(["on node B", "on node A"] as const)(
    "a server push on an idle Service connection reaches the client, with the backend %s",
    async (where) => {
      const client = addPod(fx, a, "client");
      const flooder = addPod(fx, a, "flooder");
      const backendNode = where === "on node B" ? b : a;
      const backend = addPod(fx, backendNode, "backend");
      // A pod elsewhere in the cluster: the flood's flows to it are pod-to-pod.
      const sink = addPod(fx, b, "sink");
      await startPushServer(backend);
      inNs(a.netns, "iptables", [
        ..."-t nat -A PREROUTING -d 10.96.0.10 -p tcp --dport 80 -j DNAT --to-destination".split(" "),
        `${backend.v4}:8080`,
      ]);
      // The client's own traffic to the Service goes through node A's PREROUTING.
      // The client waits as long as the test may run; the push gets 10 s below.
      const { outcome } = await connectAndWait(client, 600);

      const flood = spawnSync(
        "nsenter",
        [`--net=/run/netns/${flooder.netns}`, floodTool, [...OUTSIDE, sink.v4].join(","), String(FLOOD_TIMES)],
        { encoding: "utf8", timeout: 300_000 },
      );
      expect(flood.status, flood.stderr).toBe(0);
      expect(Number(flood.stdout.trim())).toBe(3 * 65535 * (OUTSIDE.length + 1) * FLOOD_TIMES);
      // The flood went through the fast path's memory, not around it: its echo requests to
      // the sink (and, without conntrack, its SYNs) overflowed the flooder's own table.
      // The client's connection never entered any table: a Service VIP is the stack's.
      const table = flowTables(a);
      expect(table("flooder")?.remembered).toBeGreaterThanOrEqual(65535);
      expect(table("flooder")?.evicted).toBeGreaterThan(0);
      expect(table("client")).toMatchObject({ remembered: 0 });

      expect(tcpRequest(backendNode.netns, backend.v4, 8081)).toBe("pushed 1");
      const late = new Promise<Outcome>((resolve) =>
        setTimeout(() => resolve({ code: null, out: "connected\nno data within 10 s of the push" }), 10_000),
      );
      const { code, out } = await Promise.race([outcome, late]);
      expect(out.trim().split("\n")).toEqual(["connected", "push"]);
      expect(code).toBe(0);
    },
    360_000,
  );
});

describe("flow memory is per pod, and visible", () => {
  it("a pod flooding another with new flows fills only its own table; endpoints and status report it", () => {
    const flooder = addPod(fx, a, "flooder");
    const target = addPod(fx, a, "target");
    const flood = spawnSync("nsenter", [`--net=/run/netns/${flooder.netns}`, floodTool, target.v4, "1"], {
      encoding: "utf8",
      timeout: 300_000,
    });
    expect(flood.status, flood.stderr).toBe(0);

    const table = flowTables(a);
    // Every echo id opened a flow in the flooder's table (and, without conntrack, every
    // SYN): it holds what fits and evicted the rest. The target's own table saw none.
    // A full LRU map does not show all its slots in use: the kernel evicts in batches of
    // LOCAL_FREE_TARGET (128) into a CPU's local free list, and each CPU may hold such a
    // batch, so a full table holds between capacity - 128 x CPUs and capacity entries.
    expect(table("flooder")).toMatchObject({ capacity: 1024 });
    expect(table("flooder")?.entries).toBeGreaterThan(1024 - 128 * os.cpus().length);
    expect(table("flooder")?.entries).toBeLessThanOrEqual(1024);
    expect(table("flooder")?.remembered).toBeGreaterThanOrEqual(65535);
    expect(table("flooder")?.evicted).toBeGreaterThanOrEqual(65535 - 1024);
    expect(table("target")).toMatchObject({ entries: 0, remembered: 0, evicted: 0 });
    const status = cli(a, "status") as NodeStatus;
    expect(status.flowTables.tables).toBe(2);
    expect(status.flowTables.evicted).toBe(table("flooder")?.evicted);
    // The fullest table is the flooder's; the outer map holds one table per pod.
    expect(status.flowTables.fullest).toEqual({
      device: flooder.hostDevice,
      ifindex: expect.any(Number),
      containerId: "flooder",
      ifname: "eth0",
      entries: table("flooder")?.entries,
      capacity: 1024,
      evicted: table("flooder")?.evicted,
    });
    expect(status.maps.find((m) => m.name === "nkc_flow_owner")).toEqual({
      name: "nkc_flow_owner",
      kind: "hash",
      entries: 2,
      capacity: 16384,
    });
  });
});
