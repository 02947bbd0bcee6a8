/**
 * Real applications over each datapath (bench/README.md, "Applications"): the same
 * servers and load clients as host processes in two node namespaces, and as pods of
 * bridge, ptp and this plugin (fast path on and off; on one node also with the socket
 * bypass), across nodes and on one node. Paths and placements are interleaved workload
 * by workload and round by round (their order turning each round), so a slow drift of
 * this shared machine lands on all of them alike.
 *
 * Every process of a path (servers and clients) runs in that path's cgroup v2 directory
 * under this run's own parent: its CPU per operation is read from there, and the socket
 * bypass's sock_ops is attached to the bypass path's directory alone.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import { cgroup2Root } from "../../../src/datapath/sockbypass";
import { addPod, makeCluster } from "../../../test/support/topology";
import { type BenchFixture, newFixture, onCleanup, tick } from "../cleanup";
import { buildPath, type Endpoint, type PathId, type Placement } from "../paths";
import { Counters, removeCgroups } from "../sockbypass";
import { turnedBy } from "../stats";
import { type Sample, STEPS, type Step, WARMUP_STEPS, WORKLOADS, type Workload } from "./clients";
import { cpuUsec, type Place } from "./exec";
import { pgTemplate, type ServerSet, startServers } from "./servers";

export type AppPathId = "host" | "bridge" | "ptp" | "veth" | "veth-plain" | "veth-bypass" | "netkit" | "netkit-plain";

export const APP_PATH_LABELS: Record<AppPathId, string> = {
  host: "host processes",
  bridge: "bridge + host-local",
  ptp: "ptp + host-local",
  veth: "netkit-cni veth (fast path)",
  "veth-plain": "netkit-cni veth, fastPath false",
  "veth-bypass": "netkit-cni veth + socket bypass",
  netkit: "netkit-cni netkit (fast path)",
  "netkit-plain": "netkit-cni netkit, fastPath false",
};

export interface WorkloadSamples {
  /** Requests (transactions, operations) per second. */
  rate: number[];
  /** Latency percentiles, ms. */
  p50: number[];
  p99: number[];
  /** CPU of every process of the path (its cgroup) per operation, µs. */
  cpuUsPerOp: number[];
}

export interface BypassCheck {
  workload: Workload;
  /** Client and server pods' counter deltas over the run (nkc_sock_stats). */
  redirectedBytes: number;
  passedMsgs: number;
  added: number;
}

export interface AppsRun {
  rounds: number;
  seconds: number;
  workloads: Workload[];
  order: AppPathId[];
  placements: Placement[];
  samples: Partial<Record<AppPathId, Partial<Record<Placement, Partial<Record<Workload, WorkloadSamples>>>>>>;
  /** Operations completed per workload over the whole run (all paths). */
  completed: Partial<Record<Workload, number>>;
  bypass: BypassCheck[];
  errors: string[];
}

interface AppPath {
  id: AppPathId;
  fx: BenchFixture;
  cgroup: string;
  pairs: Partial<Record<Placement, { client: Place & { ip: string }; server: ServerSet }>>;
  counters?: Counters;
}

type Pairs = Partial<Record<Placement, { client: Endpoint; server: Endpoint }>>;

/** One path's cluster and pods (paths.ts), or the socket bypass's one-node cluster. */
function buildCluster(id: AppPathId, cgroup: string): { fx: BenchFixture; pairs: Pairs; counters?: Counters } {
  if (id !== "veth-bypass") {
    const p = buildPath(id as PathId);
    return { fx: p.fx, pairs: p.pairs };
  }
  const fx = newFixture(id);
  const [a] = makeCluster(fx, {
    logLevel: "info",
    datapath: "veth",
    fastPath: true,
    sockBypass: true,
    sockBypassCgroup: cgroup,
  });
  const client = addPod(fx, a, "a1");
  const server = addPod(fx, a, "a2");
  const counters = new Counters(a.bpffsRoot, client, server);
  const ep = (p: typeof client): Endpoint => ({ netns: p.netns, ip: p.v4 });
  return { fx, pairs: { same: { client: ep(client), server: ep(server) } }, counters };
}

export async function measureApps(opts: {
  paths: AppPathId[];
  placements: Placement[];
  rounds: number;
  seconds: number;
  log: (msg: string) => void;
}): Promise<AppsRun> {
  const { parent, cgroups } = runCgroups(opts.paths);
  const base = fs.mkdtempSync("/dev/shm/netkit-cni-bench-apps-");
  onCleanup(() => fs.rmSync(base, { recursive: true, force: true }));
  fs.chmodSync(base, 0o755);

  opts.log("applications: PostgreSQL template (initdb, pgbench -i)");
  const template = pgTemplate(base);
  const paths: AppPath[] = [];
  for (const id of opts.paths) {
    await tick();
    paths.push(startPath(id, path.join(parent, id), opts.placements, { base, template, log: opts.log }));
  }

  const run: AppsRun = {
    rounds: opts.rounds,
    seconds: opts.seconds,
    workloads: [...WORKLOADS],
    order: [...opts.paths],
    placements: [...opts.placements],
    samples: {},
    completed: {},
    bypass: [],
    errors: [],
  };
  // Untimed warm-up: first connections, caches, the flows the fast path learns; the Redis
  // steps also learn each pair's rate, which sizes their timed runs.
  for (const p of paths) {
    for (const [, pair] of Object.entries(p.pairs)) {
      for (const step of WARMUP_STEPS) {
        await tick();
        step(pair.client, pair.server.ip, 1);
      }
    }
  }
  for (let round = 0; round < opts.rounds; round++) {
    const t0 = Date.now();
    const order = turnedBy(paths, round);
    for (const step of STEPS) {
      for (const pl of opts.placements) {
        for (const p of order) {
          if (!p.pairs[pl]) continue;
          await tick();
          measureStep(run, p, pl, step, opts.seconds);
        }
      }
    }
    opts.log(`  applications round ${round + 1}/${opts.rounds} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  }
  for (const p of paths) p.fx.cleanup();
  removeCgroups(parent, cgroups);
  return run;
}

/** A cgroup v2 directory per path under this run's own parent. */
function runCgroups(ids: AppPathId[]): { parent: string; cgroups: string[] } {
  const root = cgroup2Root();
  if (!root) throw new Error("applications: no cgroup v2 hierarchy on this machine");
  const parent = path.join(root, `netkit-cni-bench-${process.pid}-apps`);
  const cgroups = ids.map((id) => path.join(parent, id));
  // Registered before anything that runs inside them: cleanup runs newest first, so the
  // servers are stopped and the pins removed before the cgroups and the data go.
  onCleanup(() => removeCgroups(parent, cgroups));
  fs.mkdirSync(parent);
  for (const dir of cgroups) fs.mkdirSync(dir);
  return { parent, cgroups };
}

/** One path's cluster, with one set of servers per server namespace its placements use. */
function startPath(
  id: AppPathId,
  cgroup: string,
  placements: Placement[],
  data: { base: string; template: string; log: (msg: string) => void },
): AppPath {
  const built = buildCluster(id, cgroup);
  const pairs: AppPath["pairs"] = {};
  const started = new Map<string, ServerSet>();
  for (const pl of placements) {
    const pair = built.pairs[pl];
    if (!pair) continue;
    const { client, server } = pair;
    let set = started.get(server.netns);
    if (!set) {
      data.log(`applications: servers for ${id} in ${server.netns} (${server.ip})`);
      const dir = path.join(data.base, `${id}-${pl}`);
      set = startServers(built.fx, { netns: server.netns, cgroup }, server.ip, dir, data.template);
      started.set(server.netns, set);
    }
    pairs[pl] = { client: { netns: client.netns, cgroup, ip: client.ip }, server: set };
  }
  return { id, fx: built.fx, cgroup, pairs, counters: built.counters };
}

/** One client step on one path and placement: its samples, its CPU and, with the bypass, its splicing. */
function measureStep(run: AppsRun, p: AppPath, pl: Placement, step: Step, seconds: number): void {
  const pair = p.pairs[pl] as NonNullable<AppPath["pairs"][Placement]>;
  const before = p.counters?.read();
  const cpu0 = cpuUsec(p.cgroup);
  const out = step(pair.client, pair.server.ip, seconds);
  const cpuUs = cpuUsec(p.cgroup) - cpu0;
  const after = p.counters?.read();
  const totalOps = Object.values(out).reduce((n, s) => n + (s?.ops ?? 0), 0);
  for (const [w, s] of Object.entries(out) as [Workload, Sample][]) record(run, p, pl, w, s, cpuUs, totalOps);
  if (before && after) {
    const d = (k: "redirectedBytes" | "passedMsgs" | "added") =>
      Number(after.client[k] - before.client[k] + (after.server[k] - before.server[k]));
    const check: BypassCheck = {
      workload: Object.keys(out)[0] as Workload,
      redirectedBytes: d("redirectedBytes"),
      passedMsgs: d("passedMsgs"),
      added: d("added"),
    };
    run.bypass.push(check);
    // A bypass figure that was not spliced would be a veth figure under a wrong name.
    if (check.redirectedBytes === 0) run.errors.push(`${p.id}: ${check.workload} was not spliced`);
  }
}

/** One workload's sample; a step's CPU is shared by its workloads per operation of them all. */
function record(run: AppsRun, p: AppPath, pl: Placement, w: Workload, s: Sample, cpuUs: number, ops: number): void {
  const byPl = run.samples[p.id] ?? {};
  run.samples[p.id] = byPl;
  const byW = byPl[pl] ?? {};
  byPl[pl] = byW;
  const ws = byW[w] ?? { rate: [], p50: [], p99: [], cpuUsPerOp: [] };
  byW[w] = ws;
  ws.rate.push(s.rate);
  ws.p50.push(s.p50);
  ws.p99.push(s.p99);
  ws.cpuUsPerOp.push(ops > 0 ? cpuUs / ops : Number.NaN);
  run.completed[w] = (run.completed[w] ?? 0) + s.ops;
  if (s.error) run.errors.push(`${p.id} ${pl}: ${s.error}`);
}
