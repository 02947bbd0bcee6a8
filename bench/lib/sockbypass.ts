/**
 * The same-node socket bypass ("sockBypass": true) against the packet path it skips and
 * against host loopback: netperf TCP_RR and TCP_STREAM and sockperf ping-pong latency at
 * several message sizes, CPU per transaction, all interleaved round by round.
 *
 * Same node, same pods: one node, two pods (client and server) made by the real
 * executable with the bypass on, its sock_ops program attached to a cgroup v2 of this
 * run. The bypass is toggled by where the peers run, not by the pods:
 *
 *   on        peers in <run cgroup>/on, the cgroup sock_ops watches: their sockets are
 *             spliced (sk_msg → the peer's receive queue)
 *   off       the same pods, the same devices and programs, peers in <run cgroup>/off,
 *             which sock_ops does not watch: their sockets take the packet path (the
 *             veth pair and the plugin's tc programs), as with "sockBypass": false
 *   loopback  peers in one namespace (the node's) over 127.0.0.1, in <run cgroup>/loopback
 *
 * CPU is the usage of each variant's cgroup (cpu.stat usage_usec) over a run: every peer
 * process of the variant, client and server, including the softirq work that runs in
 * their context (this kernel has no IRQ time accounting); unlike system-wide /proc/stat
 * figures it does not count what other jobs on the machine do. Softirq work deferred to
 * ksoftirqd is not counted.
 *
 * The bypass's own counters (nkc_sock_stats, per pod) say whether each run was spliced:
 * an "on" run must have redirected (nearly) every byte it moved, an "off" or "loopback"
 * run must not have touched the counters. Anything else fails the run.
 */

import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { openSockMaps, readSockCounters, type SockCounters, sockLinkPins } from "../../src/bpf/index";
import { cgroup2Root } from "../../src/datapath/sockbypass";
import { startListening } from "../../test/support/servers";
import { addPod, type ClusterNode, ifindexOf, makeCluster, type Pod } from "../../test/support/topology";
import { type BenchFixture, newFixture, onCleanup, tick } from "./cleanup";
import { turnedBy } from "./stats";

export const SOCK_VARIANTS = ["on", "off", "loopback"] as const;
export type SockVariant = (typeof SOCK_VARIANTS)[number];
export const SOCK_VARIANT_LABELS: Record<SockVariant, string> = {
  on: "bypass on",
  off: "bypass off (veth, fast path)",
  loopback: "host loopback",
};

/** Message sizes: 64 B, 1 KiB, 16 KiB, 64 KiB. */
export const SOCK_SIZES = [64, 1024, 16384, 65536];
/** sockperf frames a TCP message with a 16-bit length: its largest is 65507 B. */
export const SOCKPERF_MAX = 65507;

export interface SockSizeSamples {
  /** netperf TCP_RR, request and response of the size: transactions/s. */
  rr: number[];
  /** CPU (all of the variant's peers) per TCP_RR transaction, µs. */
  rrCpuUs: number[];
  /** netperf TCP_STREAM, sends of the size: Mbit/s. */
  stream: number[];
  /** CPU per MiB moved by TCP_STREAM, µs. */
  streamCpuUsPerMiB: number[];
  /** sockperf ping-pong round trip, µs. */
  p50: number[];
  p99: number[];
}

export interface SockBypassCheck {
  variant: SockVariant;
  size: number;
  test: "TCP_RR" | "TCP_STREAM" | "sockperf";
  /** What the run moved from the client (bytes), by the tool's own figures. */
  bytes: number;
  /** The client and server pods' counter deltas over the run. */
  client: Record<keyof SockCounters, number>;
  server: Record<keyof SockCounters, number>;
}

export interface SockBypassRun {
  rounds: number;
  seconds: number;
  sizes: number[];
  order: SockVariant[];
  datapath: string;
  samples: Record<SockVariant, Record<string, SockSizeSamples>>;
  /** Every run's counter deltas: the evidence that "on" was spliced and the others not. */
  checks: SockBypassCheck[];
  errors: string[];
}

const NETSERVER_PORT: Record<SockVariant, number> = { on: 12865, off: 12866, loopback: 12865 };
const SOCKPERF_PORT: Record<SockVariant, number> = { on: 11111, off: 11112, loopback: 11111 };

interface Peers {
  netns: string;
  cgroup: string;
  /** Where the client connects. */
  ip: string;
}

const sleepMs = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** argv for `sh` that runs `cmd` inside `netns` and inside `cgroup` (cgroup v2 directory). */
const inside = (p: Peers, cmd: string[]) => [
  "-c",
  `echo $$ > ${p.cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${p.netns} "$@"`,
  "peer",
  ...cmd,
];

function startServer(fx: BenchFixture, p: Peers, cmd: string[], port: number): void {
  startListening(fx, ["sh", ...inside(p, cmd)], p.netns, port, cmd[0] ?? "server");
}

function cpuUsec(cgroup: string): number {
  const m = /^usage_usec (\d+)$/m.exec(fs.readFileSync(path.join(cgroup, "cpu.stat"), "utf8"));
  return m ? Number(m[1]) : Number.NaN;
}

/** Kills what is left in the run's cgroups, then removes them (children first). */
export function removeCgroups(parent: string, children: string[]): void {
  if (!fs.existsSync(parent)) return;
  try {
    fs.writeFileSync(path.join(parent, "cgroup.kill"), "1");
  } catch {
    // older kernels: the fixture's process kills did it
  }
  for (const dir of [...children, parent]) {
    for (let i = 0; i < 100 && fs.existsSync(dir); i++) {
      try {
        fs.rmdirSync(dir);
      } catch {
        sleepMs(50);
      }
    }
    if (fs.existsSync(dir)) process.stderr.write(`cleanup: could not remove cgroup ${dir}\n`);
  }
}

interface ToolRun {
  /** The figure of merit (transactions/s, Mbit/s). */
  value: number;
  /** Bytes the client sent, by the tool's own count. */
  bytes: number;
  /** Transactions (RR) for per-transaction CPU. */
  transactions: number;
  error?: string;
}

function netperfRun(p: Peers, variant: SockVariant, test: "TCP_RR" | "TCP_STREAM", size: number, seconds: number) {
  const testArgs = test === "TCP_RR" ? ["-r", `${size},${size}`] : ["-m", String(size)];
  const r = spawnSync(
    "sh",
    inside(p, [
      "netperf",
      "-4",
      "-H",
      p.ip,
      "-p",
      String(NETSERVER_PORT[variant]),
      "-t",
      test,
      "-l",
      String(seconds),
      "-P",
      "0",
      "--",
      ...testArgs,
      "-o",
      "THROUGHPUT,ELAPSED_TIME",
    ]),
    { encoding: "utf8", timeout: (seconds + 30) * 1000 },
  );
  const [value, elapsed] = (r.stdout.trim().split("\n").pop() ?? "").split(",").map(Number.parseFloat) as [
    number,
    number,
  ];
  if (r.status !== 0 || !Number.isFinite(value) || !Number.isFinite(elapsed)) {
    const error = `${test} ${size} B ${variant}: ${(r.stderr || r.stdout || "").trim() || `exit ${r.status}`}`;
    return { value: Number.NaN, bytes: 0, transactions: 0, error } satisfies ToolRun;
  }
  const transactions = test === "TCP_RR" ? value * elapsed : 0;
  const bytes = test === "TCP_RR" ? transactions * size : (value * 1e6 * elapsed) / 8;
  return { value, bytes, transactions } satisfies ToolRun;
}

interface SockperfRun {
  p50: number;
  p99: number;
  bytes: number;
  error?: string;
}

function sockperfRun(p: Peers, variant: SockVariant, size: number, seconds: number): SockperfRun {
  const msg = Math.min(size, SOCKPERF_MAX);
  const r = spawnSync(
    "sh",
    inside(p, [
      "sockperf",
      "ping-pong",
      "--tcp",
      "-i",
      p.ip,
      "-p",
      String(SOCKPERF_PORT[variant]),
      "-m",
      String(msg),
      "-t",
      String(seconds),
      "--full-rtt",
    ]),
    { encoding: "utf8", timeout: (seconds + 30) * 1000 },
  );
  const out = `${r.stdout}\n${r.stderr}`;
  const pct = (q: string) => Number.parseFloat(new RegExp(`percentile ${q} =\\s*([0-9.]+)`).exec(out)?.[1] ?? "");
  const sent = Number(/SentMessages=(\d+)/.exec(out)?.[1] ?? Number.NaN);
  const p50 = pct("50\\.000");
  const p99 = pct("99\\.000");
  if (r.status !== 0 || !Number.isFinite(p50) || !Number.isFinite(p99) || /ERROR/.test(out)) {
    const line = out.split("\n").find((l) => /ERROR/.test(l)) ?? `exit ${r.status}`;
    return { p50: Number.NaN, p99: Number.NaN, bytes: 0, error: `sockperf ${size} B ${variant}: ${line.trim()}` };
  }
  return { p50, p99, bytes: Number.isFinite(sent) ? sent * msg : 0 };
}

const COUNTER_KEYS = ["added", "redirectedMsgs", "redirectedBytes", "passedMsgs"] as const;

/** The client and server pods' bypass counters, read from the node's pinned maps. */
export class Counters {
  private readonly ifindex: { client: number; server: number };

  constructor(
    private readonly bpffsRoot: string,
    client: Pod,
    server: Pod,
  ) {
    this.ifindex = {
      client: ifindexOf(client.node.netns, client.hostDevice),
      server: ifindexOf(server.node.netns, server.hostDevice),
    };
  }

  read(): { client: SockCounters; server: SockCounters } {
    const maps = openSockMaps(this.bpffsRoot);
    if (!maps) throw new Error(`socket bypass: no maps pinned under ${this.bpffsRoot}`);
    const zero: SockCounters = { added: 0n, redirectedMsgs: 0n, redirectedBytes: 0n, passedMsgs: 0n };
    try {
      return {
        client: readSockCounters(maps.stats, this.ifindex.client) ?? zero,
        server: readSockCounters(maps.stats, this.ifindex.server) ?? zero,
      };
    } finally {
      maps.close();
    }
  }
}

const delta = (a: SockCounters, b: SockCounters) =>
  Object.fromEntries(COUNTER_KEYS.map((k) => [k, Number(b[k] - a[k])])) as Record<keyof SockCounters, number>;

/** Why a run's counters contradict its variant, or undefined. */
export function checkFailure(c: SockBypassCheck): string | undefined {
  const what = `${c.test} ${c.size} B, ${c.variant}`;
  if (c.variant === "on") {
    if (c.client.added < 1 || c.server.added < 1) return `${what}: the sockets were not added to the sockhash`;
    // A few bytes may take the stack (netperf's control connection's first message);
    // the test's own data must have been spliced.
    if (c.client.redirectedBytes < 0.95 * c.bytes) {
      return `${what}: ${c.client.redirectedBytes} of ${Math.round(c.bytes)} bytes the client sent were spliced`;
    }
    if (c.server.redirectedBytes <= 0) return `${what}: nothing the server sent was spliced`;
    return undefined;
  }
  const touched = COUNTER_KEYS.filter((k) => c.client[k] !== 0 || c.server[k] !== 0);
  return touched.length ? `${what}: the bypass's counters moved (${touched.join(", ")})` : undefined;
}

export async function measureSockBypass(opts: {
  rounds: number;
  seconds: number;
  sizes?: number[];
  datapath: "veth" | "netkit";
}): Promise<SockBypassRun> {
  const sizes = opts.sizes ?? SOCK_SIZES;
  const { parent, cgroups } = runCgroups();
  const fx = newFixture("sockbypass");
  const { node, server, client } = bypassPods(fx, opts.datapath, cgroups.on);
  const peers = peersOf(node, server, client, cgroups);
  for (const v of SOCK_VARIANTS) {
    const s = peers.server[v];
    startServer(fx, s, ["netserver", "-D", "-4", "-L", s.ip, "-p", String(NETSERVER_PORT[v])], NETSERVER_PORT[v]);
    startServer(fx, s, ["sockperf", "server", "--tcp", "-i", s.ip, "-p", String(SOCKPERF_PORT[v])], SOCKPERF_PORT[v]);
  }
  const runs = new CheckedRuns(new Counters(node.bpffsRoot, client, server), cgroups);
  const samples = emptySamples(sizes);

  // Warm-up, untimed: first connections, netserver's first fork; also the first check
  // that each variant is what it claims.
  for (const v of SOCK_VARIANTS) {
    await tick();
    runs.measured(v, 64, "TCP_RR", () => netperfRun(peers.client[v], v, "TCP_RR", 64, 1));
  }
  runs.checks.splice(0);

  for (let round = 0; round < opts.rounds; round++) {
    const t0 = Date.now();
    // The variants' order turns each round, so none always runs first after a test of
    // another size.
    const order = turnedBy(SOCK_VARIANTS, round);
    for (const size of sizes) {
      for (const v of order) {
        const into = samples[v][String(size)] as SockSizeSamples;
        await measureOne(runs, peers.client[v], v, size, opts.seconds, into);
      }
    }
    process.stderr.write(
      `  socket bypass round ${round + 1}/${opts.rounds} (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`,
    );
  }
  fx.cleanup();
  removeCgroups(parent, Object.values(cgroups));
  return {
    rounds: opts.rounds,
    seconds: opts.seconds,
    sizes,
    order: [...SOCK_VARIANTS],
    datapath: opts.datapath,
    samples,
    checks: runs.checks,
    errors: runs.errors,
  };
}

/** The run's own cgroups, never the machine's root: sock_ops sees only <parent>/on. */
function runCgroups(): { parent: string; cgroups: Record<SockVariant, string> } {
  const root = cgroup2Root();
  if (!root) throw new Error("socket bypass: no cgroup v2 hierarchy on this machine");
  const parent = path.join(root, `netkit-cni-bench-${process.pid}`);
  const cgroups = Object.fromEntries(SOCK_VARIANTS.map((v) => [v, path.join(parent, v)])) as Record<
    SockVariant,
    string
  >;
  // Registered before the fixture: cleanup runs newest first, so the peers are killed
  // and the bypass's pins removed before the cgroups go.
  onCleanup(() => removeCgroups(parent, Object.values(cgroups)));
  fs.mkdirSync(parent);
  for (const dir of Object.values(cgroups)) fs.mkdirSync(dir);
  return { parent, cgroups };
}

/** One node with the bypass on for `watched` alone, and its two pods; fails if ADD set up no bypass. */
function bypassPods(fx: BenchFixture, datapath: "veth" | "netkit", watched: string) {
  const [node] = makeCluster(fx, {
    logLevel: "info",
    datapath,
    sockBypass: true,
    sockBypassCgroup: watched,
  });
  const server = addPod(fx, node, "srv");
  const client = addPod(fx, node, "cli");
  if (
    !fs.existsSync(sockLinkPins.skMsg(node.bpffsRoot)) ||
    !fs.existsSync(sockLinkPins.cgroup(node.bpffsRoot, watched))
  ) {
    throw new Error(`socket bypass: ADD went on without it (see ${String(node.conf.logFile)})`);
  }
  return { node, server, client };
}

/**
 * Where each variant's peers run: on and off in the same pods (only the cgroup differs),
 * loopback in the node's namespace.
 */
function peersOf(node: ClusterNode, server: Pod, client: Pod, cgroups: Record<SockVariant, string>) {
  const at = (pod: Pod, v: SockVariant): Peers =>
    v === "loopback"
      ? { netns: node.netns, cgroup: cgroups.loopback, ip: "127.0.0.1" }
      : { netns: pod.netns, cgroup: cgroups[v], ip: server.v4 };
  const each = (pod: Pod) =>
    Object.fromEntries(SOCK_VARIANTS.map((v) => [v, at(pod, v)])) as Record<SockVariant, Peers>;
  return { server: each(server), client: each(client) };
}

function emptySamples(sizes: number[]): Record<SockVariant, Record<string, SockSizeSamples>> {
  return Object.fromEntries(
    SOCK_VARIANTS.map((v) => [
      v,
      Object.fromEntries(
        sizes.map((s) => [s, { rr: [], rrCpuUs: [], stream: [], streamCpuUsPerMiB: [], p50: [], p99: [] }]),
      ),
    ]),
  ) as unknown as Record<SockVariant, Record<string, SockSizeSamples>>;
}

/** Runs tests with their CPU and counter deltas, keeping every check and tool error. */
class CheckedRuns {
  readonly checks: SockBypassCheck[] = [];
  readonly errors: string[] = [];

  constructor(
    private readonly counters: Counters,
    private readonly cgroups: Record<SockVariant, string>,
  ) {}

  /** One measurement with its CPU and counter deltas; a contradiction fails the run. */
  measured<T extends { bytes: number; error?: string }>(
    v: SockVariant,
    size: number,
    test: SockBypassCheck["test"],
    run: () => T,
  ): { result: T; cpuUs: number } {
    const before = this.counters.read();
    const cpu0 = cpuUsec(this.cgroups[v]);
    const result = run();
    const cpuUs = cpuUsec(this.cgroups[v]) - cpu0;
    const after = this.counters.read();
    if (result.error) {
      this.errors.push(result.error);
      return { result, cpuUs: Number.NaN };
    }
    const check: SockBypassCheck = {
      variant: v,
      size,
      test,
      bytes: Math.round(result.bytes),
      client: delta(before.client, after.client),
      server: delta(before.server, after.server),
    };
    this.checks.push(check);
    const why = checkFailure(check);
    if (why) throw new Error(`socket bypass: ${why}`);
    return { result, cpuUs };
  }
}

/** One variant at one size: TCP_RR, TCP_STREAM and sockperf, with CPU per transaction and per MiB. */
async function measureOne(
  runs: CheckedRuns,
  c: Peers,
  v: SockVariant,
  size: number,
  seconds: number,
  s: SockSizeSamples,
) {
  await tick();
  const rr = runs.measured(v, size, "TCP_RR", () => netperfRun(c, v, "TCP_RR", size, seconds));
  s.rr.push(rr.result.value);
  s.rrCpuUs.push(rr.result.transactions > 0 ? rr.cpuUs / rr.result.transactions : Number.NaN);
  await tick();
  const st = runs.measured(v, size, "TCP_STREAM", () => netperfRun(c, v, "TCP_STREAM", size, seconds));
  s.stream.push(st.result.value);
  s.streamCpuUsPerMiB.push(st.result.bytes > 0 ? st.cpuUs / (st.result.bytes / 2 ** 20) : Number.NaN);
  await tick();
  const sp = runs.measured(v, size, "sockperf", () => sockperfRun(c, v, size, seconds));
  s.p50.push(sp.result.p50);
  s.p99.push(sp.result.p99);
}
