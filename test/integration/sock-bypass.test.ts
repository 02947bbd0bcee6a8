/**
 * The same-node socket bypass ("sockBypass": true) end to end: pods made by the real
 * executable, TCP peers (tools/sockpeer.py) that check every byte by SHA-256 on both
 * ends, and the bypass's own maps saying which sockets were spliced and how much each
 * pod's sockets redirected.
 *
 * The sock_ops program watches a cgroup v2 of the test's own (a child of the machine's
 * cgroup v2 root, "sockBypassCgroup"), and only the test's peers run in it: attached to
 * the root it would see every socket of the machine.
 */
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type BypassedSocket,
  listBypassedSockets,
  openSockMaps,
  readSockCounters,
  type SockCounters,
} from "../../src/bpf/index";
import { cgroup2Root } from "../../src/datapath/sockbypass";
import { BINARY, Fixture, inNs, uniqueName } from "./harness";
import { addPod, type ClusterNode, delPod, ifindexOf, makeCluster, type Pod } from "./topology";

const PEER = path.resolve(__dirname, "tools/sockpeer.py");
const MB = 1024 * 1024;

let fx: Fixture;
let node: ClusterNode;
let cgroup: string;

beforeEach(() => {
  const root = cgroup2Root();
  if (!root) throw new Error("no cgroup v2 hierarchy on this machine");
  cgroup = path.join(root, uniqueName("nkt-sock"));
  fs.mkdirSync(cgroup);
  fx = new Fixture();
  [node] = makeCluster(fx, { sockBypass: true, sockBypassCgroup: cgroup });
});

afterEach(() => {
  fx.cleanup();
  removeCgroup(cgroup);
});

/** rmdir succeeds once the killed peers have left the cgroup. */
function removeCgroup(dir: string): void {
  for (let i = 0; i < 100 && fs.existsSync(dir); i++) {
    try {
      fs.rmdirSync(dir);
    } catch {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
}

/** argv that runs the peer inside `netns` (a name in /run/netns) and inside the test's cgroup. */
const inCgroup = (netns: string, args: string[]) => [
  "-c",
  `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${netns} /usr/bin/python3 ${PEER} "$@"`,
  "sockpeer",
  ...args,
];

/** Starts a server and waits for it to listen. */
async function startPeerServer(netns: string, host: string, port: number): Promise<void> {
  const child = spawn("sh", inCgroup(netns, ["server", host, String(port)]), { stdio: ["ignore", "pipe", "inherit"] });
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start")), 10_000);
    child.stdout.once("data", () => {
      clearTimeout(timer);
      resolve();
    });
    child.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
}

/** Sends `size` bytes and reads the reply; both ends compare hashes. */
function exchange(netns: string, host: string, port: number, size: number, method = "sendall"): string {
  const r = spawnSync("sh", inCgroup(netns, ["client", host, String(port), String(size), method]), {
    encoding: "utf8",
    timeout: 60_000,
  });
  if (r.status !== 0) throw new Error(`client ${method} to ${host}:${port}: ${r.stderr.trim() || r.status}`);
  return r.stdout.trim().split("\n").slice(1).join("\n");
}

/** `netkit-cni <command> --json` on the node. */
function cli(command: string): Record<string, unknown> | Record<string, unknown>[] {
  const out = inNs(node.netns, BINARY, [command, "--bpffs-root", node.bpffsRoot, "--json"]);
  return JSON.parse(out) as Record<string, unknown>;
}

/** A connection kept open until the test ends. */
async function holdConnection(netns: string, host: string, port: number): Promise<void> {
  const child = spawn("sh", inCgroup(netns, ["hold", host, String(port)]), { stdio: ["ignore", "pipe", "inherit"] });
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no connection")), 10_000);
    child.stdout.once("data", () => {
      clearTimeout(timer);
      resolve();
    });
    child.on("exit", (code) => reject(new Error(`hold exited with ${code}`)));
  });
}

function sockets(): BypassedSocket[] {
  const maps = openSockMaps(node.bpffsRoot);
  if (!maps) return [];
  try {
    return listBypassedSockets(maps);
  } finally {
    maps.close();
  }
}

const ZERO: SockCounters = { added: 0n, redirectedMsgs: 0n, redirectedBytes: 0n, passedMsgs: 0n };

function countersOf(pod: Pod): SockCounters {
  const maps = openSockMaps(node.bpffsRoot);
  if (!maps) return ZERO;
  try {
    return readSockCounters(maps.stats, ifindexOf(node.netns, pod.hostDevice)) ?? ZERO;
  } finally {
    maps.close();
  }
}

describe("socket bypass between two pods of one node", () => {
  it.each([
    ["IPv4", "v4"],
    ["IPv6", "v6"],
  ] as const)("splices %s connections both ways, every byte intact", async (_, family) => {
    const server = addPod(fx, node, "srv");
    const client = addPod(fx, node, "cli");
    await startPeerServer(server.netns, server[family], 5001);
    const size = 8 * MB + 3;
    expect(exchange(client.netns, server[family], 5001, size)).toBe(`ok ${size} ${3 * MB + 17}`);
    const c = countersOf(client);
    const s = countersOf(server);
    // Each end's socket was put in the sockhash, and each direction's bytes went through it.
    expect(c.added).toBe(1n);
    expect(s.added).toBe(1n);
    expect(c.redirectedBytes).toBe(BigInt(size));
    expect(s.redirectedBytes).toBeGreaterThanOrEqual(BigInt(3 * MB + 17));
    expect(c.passedMsgs + s.passedMsgs).toBe(0n);
  });

  // eager: the client writes before its peer's end may be in the sockhash; what went
  // through the stack must not be overtaken by what is spliced after it.
  it.each(["sendfile", "splice", "small", "eager"])("keeps data intact with %s", async (method) => {
    const server = addPod(fx, node, "srv");
    const client = addPod(fx, node, "cli");
    await startPeerServer(server.netns, server.v4, 5001);
    const size = method === "small" ? 200_003 : 4 * MB + 1;
    expect(exchange(client.netns, server.v4, 5001, size, method)).toBe(`ok ${size} ${3 * MB + 17}`);
    const c = countersOf(client);
    if (method === "eager") expect(c.redirectedBytes === BigInt(size) || c.passedMsgs > 0n).toBe(true);
    else expect(c.redirectedBytes).toBe(BigInt(size));
  });

  it("holds both ends of a live connection in the sockhash, and none after the client pod's DEL", async () => {
    const server = addPod(fx, node, "srv");
    const client = addPod(fx, node, "cli");
    await startPeerServer(server.netns, server.v4, 5001);
    await holdConnection(client.netns, server.v4, 5001);
    const live = sockets();
    expect(live).toHaveLength(2);
    expect(live.map((s) => s.local.ip).sort()).toEqual([server.v4, client.v4].sort());
    const toServer = live.find((s) => s.local.ip === client.v4);
    expect(toServer?.remote).toEqual({ ip: server.v4, port: 5001 });

    const rows = cli("endpoints") as unknown as { containerId: string; bypassedSockets: number }[];
    expect(rows.find((r) => r.containerId === "cli")?.bypassedSockets).toBe(1);
    expect(rows.find((r) => r.containerId === "srv")?.bypassedSockets).toBe(1);
    const status = cli("status") as { sockBypass: { links: unknown[]; sockets: number } };
    expect(status.sockBypass.links).toHaveLength(2);
    expect(status.sockBypass.sockets).toBe(2);

    expect(delPod(client).status).toBe(0);
    // The client's process still holds its socket; the sockhash no longer does.
    expect(sockets().filter((s) => s.local.ip === client.v4)).toEqual([]);
  });

  it("survives many short connections", async () => {
    const server = addPod(fx, node, "srv");
    const client = addPod(fx, node, "cli");
    await startPeerServer(server.netns, server.v4, 5001);
    for (let i = 0; i < 30; i++) expect(exchange(client.netns, server.v4, 5001, 1000 + i)).toMatch(/^ok /);
    expect(countersOf(client).added).toBe(30n);
    // Closed sockets leave the sockhash by themselves.
    await new Promise((r) => setTimeout(r, 200));
    expect(sockets()).toEqual([]);
  });
});

describe("sockets the bypass must leave alone", () => {
  it("leaves a connection established before the programs were attached on the packet path", async () => {
    const server = addPod(fx, node, "srv");
    const client = addPod(fx, node, "cli");
    await startPeerServer(server.netns, server.v4, 5001);
    // Detach both programs (their pins hold the links), connect, attach them again.
    fs.rmSync(path.join(node.bpffsRoot, "sock"), { recursive: true });
    const child = spawn("sh", inCgroup(client.netns, ["client", server.v4, "5001", String(2 * MB), "sendall", "2"]), {
      stdio: ["ignore", "pipe", "inherit"],
    });
    fx.processes.push({ kill: () => child.kill("SIGKILL") });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const done = new Promise<number | null>((resolve) => child.on("exit", resolve));
    await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()));
    addPod(fx, node, "third"); // attaches the bypass again
    expect(fs.existsSync(path.join(node.bpffsRoot, "sock", "sk_msg"))).toBe(true);
    expect(await done).toBe(0);
    expect(out).toContain(`ok ${2 * MB}`);
    expect(countersOf(client)).toEqual(ZERO);
    // A connection made now is spliced.
    expect(exchange(client.netns, server.v4, 5001, MB)).toMatch(/^ok /);
    expect(countersOf(client).redirectedBytes).toBe(BigInt(MB));
  });

  it("never adds a connection between a host process and a pod", async () => {
    const pod = addPod(fx, node, "srv");
    await startPeerServer(pod.netns, pod.v4, 5001);
    // The node's own process, in the watched cgroup, talking to a pod.
    expect(exchange(node.netns, pod.v4, 5001, MB)).toMatch(/^ok /);
    // And the pod talking to a server of the node.
    await startPeerServer(node.netns, node.wireV4, 5002);
    expect(exchange(pod.netns, node.wireV4, 5002, MB)).toMatch(/^ok /);
    expect(countersOf(pod)).toEqual(ZERO);
    expect(sockets()).toEqual([]);
  });

  it("never adds a connection whose other end is a pod of a network without the bypass", async () => {
    const server = addPod(fx, node, "srv");
    const plain = addPod(fx, node, "plain", { ...node.conf, sockBypass: false });
    await startPeerServer(server.netns, server.v4, 5001);
    expect(exchange(plain.netns, server.v4, 5001, MB)).toMatch(/^ok /);
    expect(countersOf(server)).toEqual(ZERO);
    expect(sockets()).toEqual([]);
  });
});
