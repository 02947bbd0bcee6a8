/**
 * What the socket-bypass suites share: a one-node cluster whose bypass watches a cgroup
 * v2 of the test's own (a child of the machine's cgroup v2 root, "sockBypassCgroup"),
 * TCP peers (tools/sockpeer.py) run inside that cgroup and a pod's netns, and the
 * bypass's maps read back (which sockets are spliced, each pod's counters).
 *
 * Only the test's peers run in the watched cgroup: attached to the root, the sock_ops
 * program would see every socket of the machine.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import * as path from "node:path";
import { afterEach, beforeEach, expect } from "vitest";
import {
  type BypassedSocket,
  listBypassedSockets,
  openSockMaps,
  readSockCounters,
  readSockPod,
  type SockCounters,
  type SockPod,
} from "../../src/bpf/index";
import { decodeSockKey } from "../../src/bpf/sock/abi";
import { ceiling } from "../support/ceiling";
import { makeTestCgroup, removeTestCgroup } from "../support/cgroup";
import { BINARY, Fixture, uniqueName } from "../support/harness";
import { type ClusterNode, ifindexOf, makeCluster, type Pod } from "../support/topology";

const PEER = path.resolve(__dirname, "tools/sockpeer.py");
export const MB = 1024 * 1024;
/** What sockpeer's servers send back (its REPLY). */
export const REPLY = 3 * MB + 17;

export interface SockEnv {
  fx: Fixture;
  node: ClusterNode;
  /** The cgroup the peers run in (the one the bypass watches unless the test says otherwise). */
  cgroup: string;
}

/**
 * For each test, a node whose network has the bypass on a cgroup of the test's own,
 * handed to `set`; removed after the test, the cgroup once its peers have left it.
 */
export function useSockEnv(set: (env: SockEnv) => void): void {
  let env: SockEnv | undefined;
  beforeEach(() => {
    env = undefined;
    const cgroup = makeTestCgroup(uniqueName("nkt-sock"));
    const fx = new Fixture();
    try {
      const [node] = makeCluster(fx, { sockBypass: true, sockBypassCgroup: cgroup });
      env = { fx, node, cgroup };
    } catch (e) {
      fx.cleanup();
      removeTestCgroup(cgroup);
      throw e;
    }
    set(env);
  });
  afterEach(() => {
    if (!env) return;
    env.fx.cleanup();
    removeTestCgroup(env.cgroup);
  });
}

/** argv for sh that runs `script` (with `args` as "$@") inside the test's cgroup. */
const shInCgroup = (env: SockEnv, script: string, args: string[]) => [
  "-c",
  `echo $$ > ${env.cgroup}/cgroup.procs && ${script}`,
  "sockpeer",
  ...args,
];

/** argv that runs the peer inside `netns` (a name in /run/netns) and inside the test's cgroup. */
const inCgroup = (env: SockEnv, netns: string, args: string[]) =>
  shInCgroup(env, `exec nsenter --net=/run/netns/${netns} /usr/bin/python3 ${PEER} "$@"`, args);

/** What runs the peer (sockpeer.py) from inside a script of one's own. */
export const PEER_COMMAND = `/usr/bin/python3 ${PEER}`;

/** A peer running in the background: the lines it printed so far, and its exit. */
export interface Peer {
  child: ChildProcess;
  lines: string[];
  /** Resolves with the next line printed (or one already printed and not yet taken). */
  nextLine(timeoutMs?: number): Promise<string>;
  exited: Promise<number | null>;
}

export function startPeer(env: SockEnv, netns: string, args: string[]): Peer {
  return startInCgroup(env, inCgroup(env, netns, args), args);
}

/** A process of the test's cgroup running `script` (sh), which runs the peer itself. */
export function startScript(env: SockEnv, script: string, args: string[]): Peer {
  return startInCgroup(env, shInCgroup(env, script, args), args);
}

function startInCgroup(env: SockEnv, argv: string[], args: string[]): Peer {
  const child = spawn("sh", argv, { stdio: ["pipe", "pipe", "inherit"] });
  env.fx.processes.push({ kill: () => child.kill("SIGKILL") });
  const lines: string[] = [];
  let taken = 0;
  let partial = "";
  const waiters: (() => void)[] = [];
  child.stdout?.on("data", (d: Buffer) => {
    const parts = (partial + d.toString()).split("\n");
    partial = parts.pop() ?? "";
    lines.push(...parts);
    for (const w of waiters.splice(0)) w();
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
  const nextLine = async (timeoutMs = ceiling(20_000)): Promise<string> => {
    const deadline = Date.now() + timeoutMs;
    while (taken >= lines.length) {
      if (child.exitCode !== null) throw new Error(`peer ${args.join(" ")} exited with ${child.exitCode}`);
      if (Date.now() > deadline) throw new Error(`peer ${args.join(" ")} printed nothing in ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        waiters.push(resolve);
        setTimeout(resolve, 100);
      });
    }
    taken += 1;
    return lines[taken - 1] ?? "";
  };
  return { child, lines, nextLine, exited };
}

/** How long a peer may take to start: a ceiling, not a target. In the emulated guest of
 * the distro lane, with other lanes on the same cores, starts took over 10 s. */
const PEER_START_MS = 60_000;

/** Starts a server (sockpeer's `mode`) and waits for it to listen. */
export async function startPeerServer(
  env: SockEnv,
  netns: string,
  host: string,
  port: number,
  mode = "reply",
): Promise<Peer> {
  const server = startPeer(env, netns, ["server", host, String(port), mode]);
  expect(await server.nextLine(PEER_START_MS)).toBe("ready");
  return server;
}

/** Sends `size` bytes and reads the reply; both ends compare hashes. */
export function exchange(
  env: SockEnv,
  netns: string,
  host: string,
  port: number,
  size: number,
  method = "sendall",
  sourcePort?: number,
) {
  const args = ["client", host, String(port), String(size), method, ...(sourcePort ? ["0", String(sourcePort)] : [])];
  const r = spawnSync("sh", inCgroup(env, netns, args), {
    encoding: "utf8",
    timeout: ceiling(60_000),
  });
  if (r.status !== 0) throw new Error(`client ${method} to ${host}:${port}: ${r.stderr.trim() || r.status}`);
  return r.stdout.trim().split("\n").slice(1).join("\n");
}

/** `count` short connections from one process (sockpeer's `clients`), sizes `size`,
 * `size` + 1, …; returns each connection's "ok <sent> <received>" line. */
export function exchanges(env: SockEnv, netns: string, host: string, port: number, count: number, size: number) {
  const r = spawnSync("sh", inCgroup(env, netns, ["clients", host, String(port), String(count), String(size)]), {
    encoding: "utf8",
    timeout: ceiling(120_000),
  });
  if (r.status !== 0) throw new Error(`clients to ${host}:${port}: ${r.stderr.trim() || r.status}`);
  return r.stdout
    .trim()
    .split("\n")
    .filter((line) => line !== "connected");
}

/** `netkit-cni <command> -o <output>` on the node. */
export function cli(env: SockEnv, command: string, output: "json" | "table" | "wide" = "json"): string {
  const args = [command, "--bpffs-root", env.node.bpffsRoot, "-o", output];
  const r = spawnSync("nsenter", [`--net=/run/netns/${env.node.netns}`, BINARY, ...args], { encoding: "utf8" });
  return r.stdout;
}

/** A connection kept open until the test ends. */
export async function holdConnection(env: SockEnv, netns: string, host: string, port: number): Promise<void> {
  const peer = startPeer(env, netns, ["hold", host, String(port)]);
  expect(await peer.nextLine(PEER_START_MS)).toBe("connected");
}

export function sockets(env: SockEnv): BypassedSocket[] {
  const maps = openSockMaps(env.node.bpffsRoot);
  if (!maps) return [];
  try {
    return listBypassedSockets(maps);
  } finally {
    maps.close();
  }
}

/** The sockets nkc_sock_admitted has a state for (each is also in the sockhash until its process closes it). */
export function socketStates(env: SockEnv): BypassedSocket[] {
  const maps = openSockMaps(env.node.bpffsRoot);
  if (!maps) return [];
  try {
    return [...maps.admitted.keys()].map(decodeSockKey);
  } finally {
    maps.close();
  }
}

/** The socket cookies nkc_sock_cookies holds (one per admitted socket not yet closed). */
export function socketCookies(env: SockEnv): number {
  const maps = openSockMaps(env.node.bpffsRoot);
  if (!maps) return 0;
  try {
    return maps.cookies.countKeys();
  } finally {
    maps.close();
  }
}

/** The bypass's record of a pod: its namespace, its sockets counted, those refused. */
export function sockRecordOf(env: SockEnv, pod: Pod): SockPod | undefined {
  return sockRecordAt(env, ifindexOf(env.node.netns, pod.hostDevice));
}

/** The record kept for a host ifindex (whose device may be gone). */
export function sockRecordAt(env: SockEnv, hostIfindex: number): SockPod | undefined {
  const maps = openSockMaps(env.node.bpffsRoot);
  if (!maps) return undefined;
  try {
    return readSockPod(maps.pods, hostIfindex);
  } finally {
    maps.close();
  }
}

export const ZERO: SockCounters = { added: 0n, redirectedMsgs: 0n, redirectedBytes: 0n, passedMsgs: 0n };

export function countersOf(env: SockEnv, pod: Pod): SockCounters {
  const maps = openSockMaps(env.node.bpffsRoot);
  if (!maps) return ZERO;
  try {
    return readSockCounters(maps.stats, ifindexOf(env.node.netns, pod.hostDevice)) ?? ZERO;
  } finally {
    maps.close();
  }
}

/** Polls `ok` for up to `ms`: a closing socket leaves the maps a moment after its process sees the close. */
export async function eventually(ok: () => boolean, ms = 3000): Promise<boolean> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; ) {
    if (ok()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return ok();
}
