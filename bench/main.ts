/**
 * The benchmark runner (bench/README.md). Bundled by bench/build.mjs and run as root:
 *
 *   node bench/.build/bench.js host [options]   this kernel: host, bridge, ptp, veth, veth plain;
 *                                               control plane; start-up breakdown; the socket
 *                                               bypass on, off and host loopback; rate limits,
 *                                               ours (veth) against ptp + bandwidth; Service
 *                                               traffic; NetworkPolicy's cost (section "policy":
 *                                               no policy, none for the pods, 100 policies with
 *                                               a few selecting them, and 50 ClusterNetwork-
 *                                               Policies beside those; --rounds, --seconds,
 *                                               --transactions); the agent at scale
 *   node bench/.build/bench.js vm [options]     inside the UML guest (make bench-vm): host,
 *                                               bridge, veth and netkit, with and without programs;
 *                                               the socket bypass with netkit pods (correctness);
 *                                               rate limits, ours on netkit and veth
 *   node bench/.build/bench.js report           renders the latest results (tables, SVG, README)
 *
 * Both run real applications too (nginx, Redis, PostgreSQL, etcd, memcached; section
 * "apps"): timed on this kernel, once on netkit pods in the guest for correctness.
 *
 * Options: --rounds N --seconds S --pings N --transactions N --cycles N --storm N
 *          --concurrency N --sock-rounds N --quick (a smoke run: few rounds, small counts)
 *          --app-rounds N --app-seconds S --bw-rounds N --bw-seconds S (rate limits)
 *          --agent-changes N (the agent at scale: changes timed per size)
 *          --smoke (the applications once, one path, results not kept: make test's check)
 *          --skip netperf,control,startup,crossings,sockbypass,apps,bandwidth,services,policy,agent
 *          --only (the same, inverted)
 *          --baseline PATH (another build of the executable, measured side by side in the
 *          data plane and the control plane: before/after figures for a change, from one run)
 * Writes bench/results/<UTC date and time>-<kernel release>.json, then the report.
 */
import { execFileSync, spawnSync } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { NetperfTest } from "../test/support/netperf";
import { measureAgentScale } from "./lib/agent-scale";
import { type AppPathId, type AppsRun, measureApps } from "./lib/apps/index";
import { type BandwidthRun, LATENCY_LIMITS, measureBandwidth, RATE_LIMITS } from "./lib/bandwidth";
import { BURSTS_MS, type BwVariant } from "./lib/bandwidth-pods";
import { cleanupAll, newFixture, tick } from "./lib/cleanup";
import { OUR_PLUGIN } from "./lib/cni";
import { CP_LABELS, type CpId, CYCLE_WARMUP, makeConfig, measureCycles, measureRss, storm } from "./lib/control-plane";
import { NetifRxCounter, pingSized } from "./lib/crossings";
import { measureCrossings, measureNetperf, startServers } from "./lib/dataplane";
import { type KernelFloor, measureAttachStorm, measureKernelFloor } from "./lib/kernel-floor";
import { type Options, parseOptions, SECTIONS } from "./lib/options";
import { type BenchPath, buildPath, checkPath, type PathId } from "./lib/paths";
import { measurePolicy, type PolicyRun } from "./lib/policy";
import { drainFlows } from "./lib/policy-flows";
import { renderReport } from "./lib/report";
import type { BenchResult } from "./lib/result";
import { measureServices, type ServicesRun } from "./lib/services";
import { measureSockBypass, type SockBypassRun } from "./lib/sockbypass";
import { measureStartup } from "./lib/startup";
import { VerbAgent } from "./lib/verb-agent";
import { type InProcessTimes, inProcessTimes, TIMED_IN_PROCESS } from "./lib/verb-times";

const BENCH_DIR = path.resolve(__dirname, "..");
export const RESULTS_DIR = path.join(BENCH_DIR, "results");

/** Seconds per socket bypass test: 36 tests a round. */
const SOCK_SECONDS = 1;

function sh(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "";
  }
}

function machine(): BenchResult["machine"] {
  const cpuinfo = fs.readFileSync("/proc/cpuinfo", "utf8");
  const osRelease = fs.existsSync("/etc/os-release") ? fs.readFileSync("/etc/os-release", "utf8") : "";
  const binary = fs.readFileSync(OUR_PLUGIN);
  const root = path.resolve(BENCH_DIR, "..");
  return {
    kernel: os.release(),
    kernelVersion: os.version(),
    os: /^PRETTY_NAME="?([^"\n]*)"?/m.exec(osRelease)?.[1] ?? "",
    cpu: /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? os.cpus()[0]?.model ?? "",
    cpus: os.cpus().length,
    memGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    netperf: sh("netperf", ["-V"]).replace(/^Netperf version /, ""),
    sockperf: /version (\S+)/.exec(sh("sockperf", ["--version"]))?.[1] ?? "",
    iperf3: /^iperf (\S+)/.exec(sh("iperf3", ["--version"]))?.[1] ?? "",
    plugin: {
      sha256: crypto.createHash("sha256").update(binary).digest("hex").slice(0, 16),
      builtAt: fs.statSync(OUR_PLUGIN).mtime.toISOString(),
      commit: sh("git", ["-C", root, "rev-parse", "--short", "HEAD"]),
      srcChanged: sh("git", ["-C", root, "status", "--porcelain", "--", "src", "bpf"]) !== "",
    },
  };
}

/** The applications' programs (scripts/deps.sh apps). */
const APP_TOOLS = ["nginx", "wrk", "redis-server", "redis-benchmark", "pgbench", "etcd", "memcached", "setpriv"];

/** The programs each section runs besides nsenter and ss, and what installs them. */
const SECTION_TOOLS: Record<string, { tools: string[]; install: string }> = {
  crossings: { tools: ["ping"], install: "scripts/deps.sh" },
  netperf: { tools: ["netperf", "netserver"], install: "scripts/deps.sh" },
  control: { tools: [], install: "scripts/deps.sh" },
  startup: { tools: [], install: "scripts/deps.sh bench" },
  sockbypass: { tools: ["netperf", "netserver", "sockperf"], install: "scripts/deps.sh bench" },
  apps: { tools: APP_TOOLS, install: "scripts/deps.sh apps" },
  bandwidth: { tools: ["iperf3", "netperf", "netserver"], install: "scripts/deps.sh bench" },
  services: {
    tools: ["netperf", "netserver", "nft", "nginx", "wrk", "redis-server", "redis-benchmark"],
    install: "scripts/deps.sh apps",
  },
  policy: { tools: ["netperf", "netserver", "timeout", "bash"], install: "scripts/deps.sh" },
  agent: { tools: ["python3"], install: "scripts/deps.sh" },
};

/** Only the sections that run need their tools: make test's smoke round needs no sockperf. */
function preflight(o: Options): void {
  if (process.getuid?.() !== 0) throw new Error("run as root (namespaces, bpffs, tracefs)");
  if (!fs.existsSync(OUR_PLUGIN)) throw new Error(`${OUR_PLUGIN} is missing: make build`);
  const missing = (tool: string) => spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0;
  for (const tool of ["nsenter", "ss"]) if (missing(tool)) throw new Error(`${tool} is not installed`);
  for (const section of SECTIONS.filter((s) => !o.skip.has(s))) {
    const { tools, install } = SECTION_TOOLS[section] ?? { tools: [], install: "" };
    const absent = tools.filter(missing);
    if (absent.length > 0) throw new Error(`the ${section} section needs ${absent.join(", ")}: ${install}`);
  }
}

const stamp = () =>
  new Date()
    .toISOString()
    .replace(/\.\d+Z$/, "Z")
    .replace(/:/g, "");

function log(msg: string): void {
  process.stderr.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

type Kind = "host" | "vm";

/** The results document before any section ran: the machine and the settings. */
function newResult(kind: Kind, o: Options, started: number): BenchResult {
  return {
    schema: 1,
    kind,
    startedAt: new Date(started).toISOString(),
    finishedAt: "",
    durationS: 0,
    machine: machine(),
    settings: {
      rounds: o.rounds,
      seconds: o.seconds,
      pings: o.pings,
      transactions: o.transactions,
      cycles: o.cycles,
      storm: o.storm,
      stormRepeats: o.stormRepeats,
      concurrency: o.concurrency,
      sockRounds: o.sockRounds,
      appRounds: o.appRounds,
      appSeconds: o.appSeconds,
      bwRounds: o.bwRounds,
      bwSeconds: o.bwSeconds,
      agentChanges: o.agentChanges,
      skipped: [...o.skip],
    },
  };
}

/** The paths each kind builds, and those of them netperf times. */
function dataplanePaths(kind: Kind, o: Options): { ids: PathId[]; netperfIds: PathId[] } {
  // The baseline build's path, when given, sits beside ours in every data plane round.
  const baseline: PathId[] = o.baseline && kind === "host" ? ["veth-baseline"] : [];
  return kind === "host"
    ? {
        ids: ["host", "bridge", "ptp", "veth", "veth-memory", ...baseline, "veth-plain"],
        netperfIds: ["host", "bridge", "ptp", "veth", "veth-memory", ...baseline, "veth-plain"],
      }
    : {
        ids: ["host", "bridge", "veth", "veth-plain", "netkit", "netkit-plain"],
        netperfIds: ["host", "bridge", "veth", "netkit"],
      };
}

/** Crossings and netperf, on one two-node cluster per path. */
async function runDataplane(kind: Kind, o: Options, result: BenchResult): Promise<void> {
  const { ids, netperfIds } = dataplanePaths(kind, o);
  result.paths = ids;
  if (o.skip.has("crossings") && o.skip.has("netperf")) return;
  log(`building ${ids.length} two-node clusters: ${ids.join(", ")}`);
  const paths: BenchPath[] = [];
  for (const id of ids) {
    paths.push(buildPath(id, o.baseline));
    await tick();
  }
  for (const p of paths) checkPath(p, pingSized);
  startServers(paths);

  if (!o.skip.has("crossings")) {
    log(`crossings: ${o.pings} pings and ${o.transactions} TCP_RR transactions per path and placement`);
    const counter = new NetifRxCounter(`netkit-cni-bench-${process.pid}`);
    result.crossings = await measureCrossings(paths, counter, { pings: o.pings, transactions: o.transactions });
  }
  if (!o.skip.has("netperf") && o.rounds > 0) {
    const tests: NetperfTest[] = ["TCP_RR", "TCP_CRR", "TCP_STREAM"];
    log(
      `netperf: ${o.rounds} rounds × ${tests.length} tests × 2 placements × ${netperfIds.length} paths, ${o.seconds} s each`,
    );
    const np = paths.filter((p) => netperfIds.includes(p.id));
    result.netperf = await measureNetperf(np, {
      rounds: o.rounds,
      seconds: o.seconds,
      tests,
      placements: ["across", "same"],
    });
  }
  for (const p of paths) p.fx.cleanup();
}

/** ADD+DEL cycles, storms, peak RSS, then the floor below them, measured in the same run. */
async function runControlPlane(kind: Kind, o: Options): Promise<NonNullable<BenchResult["controlPlane"]>> {
  const ids: CpId[] = [
    "ours-embedded",
    "ours-deferred",
    "ours-agent",
    "ours-agent-stopped",
    "ours-node",
    "ours-host-local",
    "ours-no-programs",
    "ptp",
  ];
  if (o.baseline) ids.unshift("ours-baseline");
  const datapath = kind === "vm" ? "netkit" : "veth";
  // The pod's hook on tc's clsact: a veth pod's choice (netkit pods keep netkit's hooks).
  if (datapath === "veth") ids.splice(ids.indexOf("ours-agent-stopped") + 1, 0, "ours-deferred-tc", "ours-agent-tc");
  const cfgs = ids.map((id) => makeConfig(id, datapath, o.baseline));
  const verbAgents = new Map<CpId, VerbAgent>();
  for (const cfg of cfgs.filter((c) => c.id === "ours-agent" || c.id === "ours-agent-tc")) {
    const agent = await VerbAgent.start(cfg.fx, cfg.node.netns, cfg.node.conf.hostInterface as string);
    cfg.conf.agentStateDir = agent.stateDir;
    verbAgents.set(cfg.id, agent);
  }
  log(`control plane: ${o.cycles} ADD+DEL cycles each, interleaved: ${ids.map((i) => CP_LABELS[i]).join(", ")}`);
  const cycles = await measureCycles(cfgs, o.cycles);
  const inProcess: Partial<Record<CpId, InProcessTimes>> = {};
  for (const cfg of cfgs.filter((c) => TIMED_IN_PROCESS.includes(c.id))) {
    const times = inProcessTimes(cfg, CYCLE_WARMUP);
    if (times) inProcess[cfg.id] = times;
  }
  const storms: Record<string, Awaited<ReturnType<typeof storm>>[]> = {};
  for (let rep = 0; rep < o.stormRepeats; rep++) {
    const order = rep % 2 === 0 ? cfgs : [...cfgs].reverse();
    for (const cfg of order) {
      log(`storm ${rep + 1}/${o.stormRepeats}: ${o.storm} ADDs, ${o.concurrency} at a time, ${CP_LABELS[cfg.id]}`);
      const outcome = await storm(cfg, o.storm, o.concurrency);
      storms[cfg.id] = [...(storms[cfg.id] ?? []), outcome];
    }
  }
  log(`peak RSS: ${o.rssRuns} ADD and DEL each`);
  const rss: Record<string, Awaited<ReturnType<typeof measureRss>>> = {};
  for (const c of cfgs) rss[c.id] = await measureRss(c, o.rssRuns);
  const verbAgentMemory = await (verbAgents.get("ours-agent") as VerbAgent).stop();
  for (const [id, agent] of verbAgents) if (id !== "ours-agent") await agent.stop();
  const kernelFloor = await runKernelFloor(o);
  for (const c of cfgs) c.fx.cleanup();
  return { cycles, storms, rss, kernelFloor, verbAgent: verbAgentMemory, inProcess };
}

async function runKernelFloor(o: Options): Promise<KernelFloor> {
  log(
    `the floor: ${o.cycles} tcx attaches and releases on fresh veth pairs, ${o.cycles} moves of a pair's end, ${o.cycles} starts of a bare Bun executable`,
  );
  const floorFx = newFixture("cp-floor");
  const kernelFloor = await measureKernelFloor(floorFx, o.cycles);
  if (o.storm > 0) {
    log(`the storm's floor: ${o.storm} tcx attachments, ${o.concurrency} at a time, ${o.stormRepeats} rounds`);
    kernelFloor.attachStorm = await measureAttachStorm(floorFx, o.storm, o.concurrency, o.stormRepeats);
  }
  floorFx.cleanup();
  return kernelFloor;
}

async function runSockBypass(kind: Kind, o: Options): Promise<SockBypassRun> {
  const datapath = kind === "vm" ? "netkit" : "veth";
  log(
    `socket bypass (${datapath} pods): ${o.sockRounds} rounds × on, off, loopback × 4 sizes × TCP_RR, TCP_STREAM, sockperf, ${SOCK_SECONDS} s each`,
  );
  return await measureSockBypass({ rounds: o.sockRounds, seconds: SOCK_SECONDS, datapath });
}

async function runApps(kind: Kind, o: Options): Promise<AppsRun> {
  // The guest (and the smoke run) only checks that every workload completes on our pods.
  const appPaths: AppPathId[] = o.smoke
    ? ["veth"]
    : kind === "vm"
      ? ["netkit"]
      : ["host", "bridge", "ptp", "veth", "veth-plain", "veth-bypass"];
  const placements = o.smoke ? (["across"] as const) : (["across", "same"] as const);
  log(
    `applications: ${o.appRounds} rounds × 11 workloads × ${appPaths.join(", ")} × ${placements.join(", ")}, ${o.appSeconds} s each`,
  );
  const apps = await measureApps({
    paths: appPaths,
    placements: [...placements],
    rounds: o.appRounds,
    seconds: o.appSeconds,
    log,
  });
  const missing = apps.workloads.filter((w) => !(apps.completed[w] ?? 0));
  for (const e of apps.errors) log(`  applications: ${e}`);
  log(`applications: completed ${JSON.stringify(apps.completed)}`);
  if (missing.length) throw new Error(`applications: no operation completed for ${missing.join(", ")}`);
  // Where timing is not the point, any failed run is a failure.
  if ((o.smoke || kind === "vm") && apps.errors.length) {
    throw new Error(`applications: ${apps.errors.length} runs failed`);
  }
  return apps;
}

async function runBandwidth(kind: Kind, o: Options): Promise<BandwidthRun> {
  // The reference plugins run on this kernel only; the guest has netkit for ours.
  const variants: BwVariant[] = kind === "vm" ? ["ours-netkit", "ours-veth"] : ["ours-veth", "reference"];
  log(
    `rate limits: ${o.bwRounds} rounds × ${variants.join(", ")} × ${RATE_LIMITS.join(", ")} Mbit/s × bursts of ${BURSTS_MS.join(" and ")} ms both ways, then TCP_RR at ${LATENCY_LIMITS.join(" and ")} Mbit/s unloaded and beside a bulk flow each way, ${o.bwSeconds} s each`,
  );
  const bandwidth = await measureBandwidth({ variants, rounds: o.bwRounds, seconds: o.bwSeconds });
  for (const [v, modes] of Object.entries(bandwidth.modes))
    log(`  rate limits: ${v} modes (egress/ingress) ${JSON.stringify(modes)}`);
  for (const e of bandwidth.errors) log(`  rate limits: ${e}`);
  return bandwidth;
}

async function runServices(o: Options): Promise<ServicesRun> {
  log(`services: translated vs kube-proxy DNAT vs pod to pod, ${o.rounds} rounds of TCP_RR and TCP_CRR`);
  const counter = new NetifRxCounter(`netkit-cni-bench-svc-${process.pid}`);
  const services = await measureServices(counter, {
    rounds: o.rounds,
    seconds: o.seconds,
    transactions: o.transactions,
  });
  for (const e of services.errors) log(`  services: ${e}`);
  return services;
}

async function runPolicy(o: Options): Promise<PolicyRun> {
  log(
    `policy: no policy vs policy on, none for the pods vs 100 policies, a few selecting them, vs 50 ClusterNetworkPolicies beside those; ${o.rounds} rounds of TCP_RR and TCP_CRR`,
  );
  const counter = new NetifRxCounter(`netkit-cni-bench-pol-${process.pid}`);
  const policy = await measurePolicy(counter, { rounds: o.rounds, seconds: o.seconds, transactions: o.transactions });
  for (const m of policy.maps) {
    log(
      `  policy: node ${m.node}: ${m.pods} pods judged on ${m.slots} slots, ${m.peers} peer and ${m.ports} port prefixes`,
    );
  }
  for (const m of policy.tiers?.maps ?? []) {
    log(
      `  policy tiers: node ${m.node}: ${m.pods} pods judged on ${m.slots} slots, ${m.tiers} read by tiers, ${m.peers} peer and ${m.ports} port prefixes`,
    );
  }
  for (const p of policy.tiers?.probes ?? []) {
    log(`  policy tiers: ${p.flow}: ${p.refused ? "refused" : "NOT refused"}, ${p.denied} denied by ${p.rule}`);
  }
  for (const e of policy.errors) log(`  policy: ${e}`);
  return policy;
}

/** Every section the options leave in, in order, each into its part of `result`. */
async function runSections(kind: Kind, o: Options, result: BenchResult): Promise<void> {
  await runDataplane(kind, o, result);
  if (!o.skip.has("control") && o.cycles > 0) result.controlPlane = await runControlPlane(kind, o);
  if (!o.skip.has("startup") && o.startupRuns > 0) {
    log(`start-up breakdown: ${o.startupRuns} probed runs per verb, ${o.profileRuns} CPU profiles, one strace each`);
    result.startup = await measureStartup({
      runs: o.startupRuns,
      profileRuns: o.profileRuns,
      datapath: kind === "vm" ? "netkit" : "veth",
    });
  }
  if (!o.skip.has("sockbypass") && o.sockRounds > 0) result.sockBypass = await runSockBypass(kind, o);
  if (!o.skip.has("apps") && o.appRounds > 0) result.apps = await runApps(kind, o);
  if (!o.skip.has("bandwidth") && o.bwRounds > 0) result.bandwidth = await runBandwidth(kind, o);
  // Service traffic on this kernel only: the guest's kernel has no JIT for what the agent
  // runs beside translation, and its figures cannot tell paths apart.
  if (!o.skip.has("services") && kind === "host" && o.rounds > 0) result.services = await runServices(o);
  // NetworkPolicy's cost, this kernel only: the guest's timings cannot tell it apart.
  if (!o.skip.has("policy") && kind === "host" && o.rounds > 0) result.policy = await runPolicy(o);
  // The agent's control plane, this kernel only (it needs the JIT for --service-translation).
  if (!o.skip.has("agent") && kind === "host" && o.agentChanges > 0) {
    result.agent = await measureAgentScale({ changes: o.agentChanges, settleSeconds: 8, log });
    for (const e of result.agent.errors) log(`  agent: ${e}`);
  }
}

/** bench/results/<UTC date and time>-<kernel release>.json; its path. */
function writeResult(result: BenchResult): string {
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  const file = path.join(RESULTS_DIR, `${stamp()}-${result.machine.kernel.replace(/[^A-Za-z0-9._-]/g, "_")}.json`);
  fs.writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  log(`wrote ${path.relative(process.cwd(), file)} (${result.durationS} s)`);
  return file;
}

/** One run of `kind`: the results file written, or "" for a smoke run, which keeps nothing. */
async function run(kind: Kind, argv: string[]): Promise<string> {
  const o = parseOptions(kind, argv);
  preflight(o);
  const started = Date.now();
  const result = newResult(kind, o, started);
  log(`${kind} run on ${result.machine.kernel}, plugin ${result.machine.plugin.sha256}`);
  await runSections(kind, o, result);
  result.finishedAt = new Date().toISOString();
  result.durationS = Math.round((Date.now() - started) / 1000);
  if (o.smoke) {
    log(`smoke run passed (${result.durationS} s); nothing written`);
    return "";
  }
  return writeResult(result);
}

async function main(): Promise<number> {
  const [cmd, ...argv] = process.argv.slice(2);
  try {
    if (cmd === "host" || cmd === "vm") {
      const file = await run(cmd, argv);
      cleanupAll();
      if (file && process.env.NETKIT_VM !== "1") renderReport(RESULTS_DIR, path.join(BENCH_DIR, "README.md"));
      return 0;
    }
    if (cmd === "drain-flows") {
      // The policy section's reader of flow records (policy-flows.ts), a process of its own.
      drainFlows(argv);
      return await new Promise<number>(() => {});
    }
    if (cmd === "report") {
      renderReport(RESULTS_DIR, path.join(BENCH_DIR, "README.md"));
      return 0;
    }
    process.stderr.write("usage: bench.js host|vm|report [options]  (see bench/README.md)\n");
    return 2;
  } catch (e) {
    process.stderr.write(`bench: ${(e as Error).stack ?? e}\n`);
    return 1;
  } finally {
    cleanupAll();
  }
}

main().then((code) => {
  process.exitCode = code;
});
