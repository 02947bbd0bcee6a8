/**
 * Where one invocation's time goes, measured on the Node SEA executable (dist/netkit-cni-
 * node: the probe hooks Node's internals) without changing it:
 *
 * 1. Process start: the bare Node runtime (`node -e 0`, the floor any Node SEA pays) and
 *    the executable answering VERSION (start + loading the bundle, no work).
 * 2. Phases of ADD and DEL, from a probe preloaded through NODE_OPTIONS (bench/lib/
 *    startup-probe.js): Node bootstrap (performance.nodeTiming), module loading (probe →
 *    first read of stdin, which main() does first), the verb (→ exit), and the time spent
 *    inside wrapped built-ins (addon dlopen, SEA asset reads, hashing, process.report,
 *    the IPAM exec).
 * 3. System calls, from one strace of each verb: netlink requests and the kernel time
 *    they took, bpf(2) commands, file-system calls, the IPAM exec.
 * 4. A CPU profile (inspector, 100 µs sampling) of several ADDs, each sample charged to
 *    the innermost frame of the bundle (mapped back to its source module through the
 *    bundle's `// src/...` markers), split into module loading and verb.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { type ClusterNode, makeCluster } from "../../test/support/topology";
import { newFixture, tick } from "./cleanup";
import { type Attachment, cniEnv, OUR_NODE_PLUGIN, runCni } from "./cni";
import { makeConfig } from "./control-plane";
import { type Summary, summarize } from "./stats";

const PROBE = path.resolve(__dirname, "../lib/startup-probe.js");
const BUNDLE = path.resolve(path.dirname(OUR_NODE_PLUGIN), "netkit-cni-node.js");

interface ProbeDoc {
  code: number;
  nodeTiming: { v8Start: number; environment: number; bootstrapComplete: number };
  probeAt: number;
  mainAt?: number;
  mainHr?: string;
  exitAt: number;
  spans: Record<string, { ms: number; calls: number }>;
  profile?: CpuProfile;
}

interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface PhaseReport {
  runs: number;
  /** Wall time seen by the caller (fork → exit, including nsenter). */
  wall: Summary;
  /** Process start to the end of Node's bootstrap (V8, OpenSSL, ICU, the runtime's JS). */
  bootstrap: Summary;
  /** Bootstrap end to main(): the SEA bundle compiled (code cache) and evaluated, addons loaded. */
  moduleLoad: Summary;
  /** main() to exit: parsing, the verb's work, printing the result. */
  verb: Summary;
  /** The rest of the caller's wall time: fork/exec, nsenter, process teardown. */
  outside: Summary;
  /** Time inside wrapped built-ins (median per run). */
  spans: Record<string, { ms: number; calls: number }>;
}

export interface SyscallReport {
  /** Requests the plugin sent (sendmsg on its rtnetlink sockets), and the sockets it opened. */
  netlinkRequests: number;
  netlinkSockets: number;
  netlinkKernelMs: number;
  /** Interface dumps by glibc's getifaddrs: process.report, called by ffi-rs to tell glibc from musl. */
  getifaddrsDumps: number;
  bpf: Record<string, { calls: number; ms: number }>;
  counts: Record<string, number>;
  ipamExecMs?: number;
}

export interface ProfileReport {
  runs: number;
  sampledMs: number;
  /** ms per run, by source module group, for module loading and for the verb. */
  load: Record<string, number>;
  verb: Record<string, number>;
  /** CPU time per step of the verb (what cmdAdd was calling), ms per run. */
  steps: { name: string; ms: number }[];
  /** CPU time in the verb by innermost function of src/ (its callees included), ms per run. */
  srcFunctions: { name: string; ms: number }[];
}

export interface StartupReport {
  nodeBare: Summary;
  seaVersion: Summary;
  add: PhaseReport;
  addHostLocal: PhaseReport;
  del: PhaseReport;
  strace?: {
    add: SyscallReport;
    addHostLocal: SyscallReport;
    del: SyscallReport;
    ptpAdd: SyscallReport;
    ptpDel: SyscallReport;
  };
  profile?: ProfileReport;
  /** The same for the DEL that follows each profiled ADD (absent in older results). */
  profileDel?: ProfileReport;
}

function timeCommand(cmd: string, args: string[], env: Record<string, string>, n: number): Summary {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    spawnSync(cmd, args, { env, input: "", stdio: ["pipe", "ignore", "ignore"] });
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return summarize(ms);
}

function medianSpans(docs: ProbeDoc[]): Record<string, { ms: number; calls: number }> {
  const names = new Set(docs.flatMap((d) => Object.keys(d.spans)));
  const out: Record<string, { ms: number; calls: number }> = {};
  for (const name of names) {
    const ms = summarize(docs.map((d) => d.spans[name]?.ms ?? 0)).median;
    const calls = summarize(docs.map((d) => d.spans[name]?.calls ?? 0)).median;
    out[name] = { ms, calls };
  }
  return out;
}

function phases(docs: ProbeDoc[], walls: number[]): PhaseReport {
  return {
    runs: docs.length,
    wall: summarize(walls),
    bootstrap: summarize(docs.map((d) => d.nodeTiming.bootstrapComplete)),
    moduleLoad: summarize(docs.map((d) => (d.mainAt ?? d.exitAt) - d.nodeTiming.bootstrapComplete)),
    verb: summarize(docs.map((d) => d.exitAt - (d.mainAt ?? d.exitAt))),
    outside: summarize(docs.map((d, i) => (walls[i] as number) - d.exitAt)),
    spans: medianSpans(docs),
  };
}

// --- strace -------------------------------------------------------------------------

const TRACED =
  "socket,close,sendto,sendmsg,recvfrom,recvmsg,bpf,execve,setns,mkdir,readlink,openat,unlink,rename,flock,clone,clone3,vfork,wait4,exit_group";

function parseStrace(file: string, binary: string): SyscallReport {
  const lines = fs.readFileSync(file, "utf8").split("\n");
  const counts: Record<string, number> = {};
  const bpf: Record<string, { calls: number; ms: number }> = {};
  const netlinkFds = new Map<string, Map<number, "new" | "plugin" | "libc">>();
  let netlinkRequests = 0;
  let getifaddrsDumps = 0;
  let netlinkSockets = 0;
  let netlinkKernelMs = 0;
  const pending = new Map<string, string>(); // pid → unfinished call name
  const startOf = new Map<string, number>();
  const endOf = new Map<string, number>();
  let ipamPid = "";
  for (const line of lines) {
    const m = /^(\d+)\s+(\d+\.\d+)\s+(.*)$/.exec(line);
    if (!m) continue;
    const [, pid = "", ts = "0", rest = ""] = m;
    const t = Number(ts);
    if (!startOf.has(pid)) startOf.set(pid, t);
    if (rest.startsWith("+++ exited")) {
      endOf.set(pid, t);
      continue;
    }
    let name: string;
    let body: string;
    const resumed = /^<\.\.\. (\w+) resumed>(.*)$/.exec(rest);
    if (resumed) {
      name = resumed[1] ?? "";
      body = `${pending.get(pid) ?? ""}${resumed[2] ?? ""}`;
      pending.delete(pid);
    } else {
      const call = /^(\w+)\((.*)$/.exec(rest);
      if (!call) continue;
      name = call[1] ?? "";
      body = call[2] ?? "";
      if (body.endsWith("<unfinished ...>")) {
        pending.set(pid, body);
        counts[name] = (counts[name] ?? 0) + 1;
        continue;
      }
      counts[name] = (counts[name] ?? 0) + 1;
    }
    const dur = Number(/<(\d+\.\d+)>$/.exec(body)?.[1] ?? 0) * 1000;
    const ret = /= (-?\d+)/.exec(body)?.[1];
    if (name === "execve" && /\/host-local"/.test(body)) ipamPid = pid;
    const fds = netlinkFds.get(pid) ?? new Map<number, "new" | "plugin" | "libc">();
    netlinkFds.set(pid, fds);
    const fd = Number(/^(\d+)/.exec(body)?.[1] ?? -1);
    const kind = fds.get(fd);
    if (name === "socket" && body.startsWith("AF_NETLINK") && ret !== undefined) {
      fds.set(Number(ret), "new");
    } else if (name === "close") {
      fds.delete(fd);
    } else if (kind !== undefined && ["sendto", "sendmsg", "recvfrom", "recvmsg"].includes(name)) {
      // In our executable, glibc's getifaddrs (behind process.report) uses sendto and the
      // netlink package sendmsg; Go plugins send their requests with sendto.
      const k = kind === "new" ? (name === "sendto" && binary === OUR_NODE_PLUGIN ? "libc" : "plugin") : kind;
      if (kind === "new" && k === "plugin") netlinkSockets += 1;
      fds.set(fd, k);
      if (k === "libc") {
        if (name === "sendto") getifaddrsDumps += 1;
      } else {
        netlinkKernelMs += dur;
        if (name.startsWith("send")) netlinkRequests += 1;
      }
    } else if (name === "bpf") {
      const cmd = /^(BPF_\w+)/.exec(body)?.[1] ?? "?";
      const b = bpf[cmd] ?? { calls: 0, ms: 0 };
      b.calls += 1;
      b.ms += dur;
      bpf[cmd] = b;
    }
  }
  const ipamExecMs =
    ipamPid && startOf.has(ipamPid) && endOf.has(ipamPid)
      ? ((endOf.get(ipamPid) as number) - (startOf.get(ipamPid) as number)) * 1000
      : undefined;
  return { netlinkRequests, netlinkSockets, netlinkKernelMs, getifaddrsDumps, bpf, counts, ipamExecMs };
}

const STRACE_RUNS = 3;

/** The first report's counts with the median of every time over all of them. */
function medianReport(rs: SyscallReport[]): SyscallReport {
  const first = rs[0] as SyscallReport;
  const med = (pick: (r: SyscallReport) => number | undefined) => {
    const v = rs.map(pick).filter((x): x is number => x !== undefined);
    return v.length ? summarize(v).median : undefined;
  };
  const bpf = Object.fromEntries(
    Object.entries(first.bpf).map(([cmd, b]) => [cmd, { calls: b.calls, ms: med((r) => r.bpf[cmd]?.ms) ?? b.ms }]),
  );
  return {
    ...first,
    netlinkKernelMs: med((r) => r.netlinkKernelMs) ?? first.netlinkKernelMs,
    ipamExecMs: med((r) => r.ipamExecMs),
    bpf,
  };
}

// --- CPU profile ----------------------------------------------------------------------

/** [first line (0-based), module] of each module in the bundle, from esbuild's markers. */
function bundleModules(): [number, string][] {
  const out: [number, string][] = [];
  fs.readFileSync(BUNDLE, "utf8")
    .split("\n")
    .forEach((l, i) => {
      const m = /^\/\/ ((?:src|node_modules)\/\S+)$/.exec(l);
      if (m) out.push([i, m[1] ?? ""]);
    });
  return out;
}

function moduleAt(mods: [number, string][], line: number): string {
  let lo = 0;
  let hi = mods.length - 1;
  let found = "bundle runtime helpers";
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const [start, name] = mods[mid] as [number, string];
    if (start <= line) {
      found = name;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found;
}

function groupOf(module: string): string {
  if (module.startsWith("node_modules/netlink/")) return "netlink package (JS)";
  if (module.startsWith("node_modules/ffi-rs/")) return "ffi-rs package (JS)";
  if (module.startsWith("node_modules/")) return "other packages";
  const m = /^src\/([^/]+)\//.exec(module);
  if (m) return `src/${m[1]}`;
  return module;
}

function addTo(rec: Record<string, number>, key: string, v: number) {
  rec[key] = (rec[key] ?? 0) + v;
}

const VERBS = new Set(["cmdAdd", "cmdDel", "cmdCheck", "cmdGc", "cmdStatus"]);

interface SampleInfo {
  group: string;
  /** The step of the verb: the function the verb (cmdAdd, ...) was calling, or "" outside it. */
  step: string;
  /** The innermost function of our own source (src/), or "" if none is on the stack. */
  srcFunction: string;
}

interface Frame {
  /** A frame of our bundle (its module known), or of Node and the runtime. */
  bundle: boolean;
  module: string;
  fn: string;
}

/** Profile time summed over every run, by where it was charged. */
interface Tally {
  load: Record<string, number>;
  verb: Record<string, number>;
  steps: Record<string, number>;
  src: Record<string, number>;
  sampled: number;
}

function analyseProfiles(docs: ProbeDoc[]): ProfileReport {
  const mods = bundleModules();
  const tally: Tally = { load: {}, verb: {}, steps: {}, src: {}, sampled: 0 };
  for (const doc of docs) if (doc.profile) tallyProfile(doc.profile, doc.mainHr, mods, tally);
  const n = docs.filter((d) => d.profile).length || 1;
  const perRun = (r: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(r)
        .map(([k, v]) => [k, v / n] as const)
        .sort((a, b) => b[1] - a[1]),
    );
  const top = (r: Record<string, number>, k: number) =>
    Object.entries(r)
      .map(([name, ms]) => ({ name, ms: ms / n }))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, k);
  return {
    runs: n,
    sampledMs: tally.sampled / n,
    load: perRun(tally.load),
    verb: perRun(tally.verb),
    steps: top(tally.steps, 15),
    srcFunctions: top(tally.src, 15),
  };
}

/**
 * Adds one run's samples to the tally: before main() they are module loading, after it
 * the verb; functions of src/ are counted in the verb only.
 */
function tallyProfile(p: CpuProfile, mainHr: string | undefined, mods: [number, string][], tally: Tally): void {
  const info = sampleClassifier(p, mods);
  const mainUs = mainHr ? Number(BigInt(mainHr) / 1000n) : Number.POSITIVE_INFINITY;
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    const dt = (p.timeDeltas[i] ?? 0) / 1000;
    t += p.timeDeltas[i] ?? 0;
    const s = info(p.samples[i] as number);
    addTo(t < mainUs ? tally.load : tally.verb, s.group, dt);
    if (s.step) addTo(tally.steps, s.step, dt);
    if (s.srcFunction && t >= mainUs) addTo(tally.src, s.srcFunction, dt);
    tally.sampled += dt;
  }
}

/** What a sample's stack says, by its leaf node; computed once per leaf (samples repeat). */
function sampleClassifier(p: CpuProfile, mods: [number, string][]): (leaf: number) => SampleInfo {
  const parent = new Map<number, number>();
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const frameOf = (id: number): Frame => {
    const f = (byId.get(id) as CpuProfile["nodes"][number]).callFrame;
    const bundle = f.url.endsWith("/netkit-cni-node.js");
    return { bundle, module: bundle ? moduleAt(mods, f.lineNumber) : f.url, fn: f.functionName || "(anonymous)" };
  };
  const infoOf = new Map<number, SampleInfo>();
  return (leaf) => {
    const cached = infoOf.get(leaf);
    if (cached) return cached;
    const stack: number[] = []; // leaf first
    for (let cur: number | undefined = leaf; cur !== undefined; cur = parent.get(cur)) stack.push(cur);
    const frames = stack.map(frameOf);
    const src = frames.find((f) => f.bundle && f.module.startsWith("src/"));
    const result = {
      group: groupOfStack(frames),
      step: stepOf(frames),
      srcFunction: src ? `${src.fn} (${src.module})` : "",
    };
    infoOf.set(leaf, result);
    return result;
  };
}

/** The module group of the innermost bundle frame; without one, what the runtime was doing. */
function groupOfStack(frames: Frame[]): string {
  const innermost = frames.find((f) => f.bundle);
  if (innermost) return groupOf(innermost.module);
  const fn = frames[0]?.fn ?? "";
  if (fn === "(garbage collector)") return "garbage collection";
  if (fn === "(idle)") return "idle (waiting: I/O, child processes)";
  if (fn === "(program)") return "native code outside JS (V8, libuv, addons)";
  return "Node runtime (loader, built-ins)";
}

/** The function the verb was calling (leaf first, so the frame before the verb's), or "". */
function stepOf(frames: Frame[]): string {
  const v = frames.findIndex((f) => f.bundle && VERBS.has(f.fn));
  if (v === 0) return `${frames[0]?.fn} itself`;
  if (v < 0) return "";
  const callee = frames[v - 1] as Frame;
  return callee.bundle ? `${callee.fn} (${callee.module})` : `${callee.fn} (Node)`;
}

// --- the measurement -----------------------------------------------------------------

/** The node, the pod namespace and the two configurations every timed invocation uses. */
interface Bench {
  node: ClusterNode;
  podNs: string;
  /** Embedded IPAM, and the same with host-local. */
  embedded: Record<string, unknown>;
  hostLocal: Record<string, unknown>;
  att: (id: string) => Attachment;
  /** A new file in the run's scratch folder. */
  scratch: (prefix: string, ext: string) => string;
}

export async function measureStartup(opts: {
  runs: number;
  profileRuns: number;
  datapath: string;
}): Promise<StartupReport> {
  const b = warmNode(opts.datapath);
  const nodeBare = timeCommand(process.execPath, ["-e", "0"], { PATH: process.env.PATH ?? "" }, opts.runs);
  const seaVersion = timeCommand(OUR_NODE_PLUGIN, [], { CNI_COMMAND: "VERSION" }, opts.runs);
  const emb = await probedPairs(b, b.embedded, "probe-emb", opts.runs);
  const hl = await probedPairs(b, b.hostLocal, "probe-hl", opts.runs);
  const { profiled, profiledDel } = await profiledPairs(b, opts.profileRuns);
  await tick();
  const strace = spawnSync("strace", ["-V"]).status === 0 ? tracedVerbs(b, opts.datapath) : undefined;
  return {
    nodeBare,
    seaVersion,
    add: emb.add,
    addHostLocal: hl.add,
    del: emb.del,
    strace,
    profile: opts.profileRuns > 0 ? analyseProfiles(profiled) : undefined,
    profileDel: opts.profileRuns > 0 ? analyseProfiles(profiledDel) : undefined,
  };
}

/** A node with its programs loaded and pinned by a first ADD: not part of what a pod pays. */
function warmNode(datapath: string): Bench {
  const fx = newFixture("startup");
  const [node] = makeCluster(fx, { logLevel: "info", datapath });
  const scratchDir = fx.tempDir("nkb-startup-");
  const dataDir = fx.tempDir("nkb-startup-ipam-");
  const ranges = [[{ subnet: node.podSubnet4 }]];
  const embedded = { ...node.conf, cniVersion: "1.0.0", ipam: { type: "netkit-cni", ranges, dataDir } };
  const hostLocal = { ...node.conf, cniVersion: "1.0.0", ipam: { type: "host-local", ranges, dataDir } };
  const podNs = fx.makeNetns("nkp");
  const att = (id: string): Attachment => ({ containerId: id, netns: `/run/netns/${podNs}`, ifname: "eth0" });
  let seq = 0;
  const scratch = (prefix: string, ext: string) => path.join(scratchDir, `${prefix}-${seq++}.${ext}`);
  const warm = runCni(OUR_NODE_PLUGIN, node.netns, "ADD", att("warm"), embedded);
  runCni(OUR_NODE_PLUGIN, node.netns, "DEL", att("warm"), { ...embedded, prevResult: warm.json });
  return { node, podNs, embedded, hostLocal, att, scratch };
}

/** One invocation with the probe preloaded: its exit and what the probe wrote. */
function probed(b: Bench, verb: string, a: Attachment, conf: unknown, profile: boolean) {
  const out = b.scratch("probe", "json");
  const env = {
    NODE_OPTIONS: `--require ${PROBE}`,
    NKBENCH_PROBE_OUT: out,
    NKBENCH_PROBE_PROFILE: profile ? "1" : "0",
  };
  const run = runCni(OUR_NODE_PLUGIN, b.node.netns, verb, a, conf, { extraEnv: env });
  if (run.status !== 0) throw new Error(`probed ${verb} failed: ${run.stdout}`);
  const doc = JSON.parse(fs.readFileSync(out, "utf8")) as ProbeDoc;
  fs.rmSync(out);
  return { run, doc };
}

/** ADD then DEL of a pod, `runs` times with one configuration: the phases of each verb. */
async function probedPairs(b: Bench, conf: Record<string, unknown>, label: string, runs: number) {
  const adds: ProbeDoc[] = [];
  const addWalls: number[] = [];
  const dels: ProbeDoc[] = [];
  const delWalls: number[] = [];
  for (let i = 0; i < runs; i++) {
    await tick();
    const a = b.att(`${label}-${i}`);
    const r = probed(b, "ADD", a, conf, false);
    adds.push(r.doc);
    addWalls.push(r.run.ms);
    const d = probed(b, "DEL", a, { ...conf, prevResult: r.run.json }, false);
    dels.push(d.doc);
    delWalls.push(d.run.ms);
  }
  return { add: phases(adds, addWalls), del: phases(dels, delWalls) };
}

/** CPU profiles of ADDs (embedded IPAM), each followed by its profiled DEL. */
async function profiledPairs(b: Bench, runs: number) {
  const profiled: ProbeDoc[] = [];
  const profiledDel: ProbeDoc[] = [];
  for (let i = 0; i < runs; i++) {
    await tick();
    const a = b.att(`prof-${i}`);
    const r = probed(b, "ADD", a, b.embedded, true);
    profiled.push(r.doc);
    profiledDel.push(probed(b, "DEL", a, { ...b.embedded, prevResult: r.run.json }, true).doc);
  }
  return { profiled, profiledDel };
}

/** The system calls of ADD and DEL: ours with each IPAM, and ptp's for comparison. */
function tracedVerbs(b: Bench, datapath: string): NonNullable<StartupReport["strace"]> {
  const tracedEmb = tracedPairs(b, OUR_NODE_PLUGIN, b.node.netns, b.embedded, "emb", b.podNs);
  const tracedHl = tracedPairs(b, OUR_NODE_PLUGIN, b.node.netns, b.hostLocal, "hl", b.podNs);
  const ptp = makeConfig("ptp", datapath);
  const ptpRuns = tracedPairs(b, ptp.plugin, ptp.node.netns, ptp.conf, "ptp", ptp.fx.makeNetns("nkp"));
  return {
    add: tracedEmb.add,
    addHostLocal: tracedHl.add,
    del: tracedEmb.del,
    ptpAdd: ptpRuns.add,
    ptpDel: ptpRuns.del,
  };
}

/** A few traced ADD+DEL pairs of one configuration: counts from the first, times as medians. */
function tracedPairs(
  b: Bench,
  plugin: string,
  nodeNs: string,
  conf: Record<string, unknown>,
  label: string,
  podNetns: string,
) {
  const adds: SyscallReport[] = [];
  const dels: SyscallReport[] = [];
  for (let i = 0; i < STRACE_RUNS; i++) {
    const a = { containerId: `strace-${label}-${i}`, netns: `/run/netns/${podNetns}`, ifname: "eth0" };
    const add = traced(b, plugin, nodeNs, "ADD", a, conf);
    adds.push(add.report);
    dels.push(traced(b, plugin, nodeNs, "DEL", a, { ...conf, prevResult: add.json }).report);
  }
  return { add: medianReport(adds), del: medianReport(dels) };
}

/** One invocation under strace: its system calls, and its result for the DEL that follows. */
function traced(b: Bench, plugin: string, nodeNs: string, verb: string, a: Attachment, conf: unknown) {
  const file = b.scratch("strace", "txt");
  const r = spawnSync(
    "strace",
    [
      "-f",
      "-q",
      "-T",
      "-ttt",
      "--seccomp-bpf",
      "-e",
      `trace=${TRACED}`,
      "-o",
      file,
      "nsenter",
      `--net=/run/netns/${nodeNs}`,
      plugin,
    ],
    { input: JSON.stringify(conf), env: cniEnv(verb, a), encoding: "utf8", timeout: 60_000 },
  );
  if (r.status !== 0) throw new Error(`strace ${verb} failed: ${r.stdout}${r.stderr}`);
  const report = parseStrace(file, plugin);
  fs.rmSync(file);
  return { report, json: JSON.parse(r.stdout || "null") as unknown };
}
