/**
 * The control plane: how long a runtime waits for the plugin. Three configurations, each
 * on a node of its own (a cluster from the integration tests' topology), measured in the
 * same run and interleaved cycle by cycle:
 *
 *   ours-embedded    this plugin, embedded IPAM (ipam.type "netkit-cni": no exec)
 *   ours-host-local  this plugin, delegating to the reference host-local
 *   ours-deferred    this plugin, embedded IPAM, "teardown": "deferred": DEL retires the pair
 *                    and the pod netns's deletion (which follows every DEL here, as a
 *                    runtime's does) deletes it, off the verb's path
 *   ours-agent       this plugin, deferred teardown, its verbs handed to a running
 *                    `netkit-cni agent --serve-verbs` (bench/lib/verb-agent.ts)
 *   ours-agent-stopped the same conflist with no agent listening: the plugin finds no
 *                    socket and does the verb itself
 *   ours-deferred-tc, ours-agent-tc  ours-deferred and ours-agent with "podHook": "tc": the
 *                    pod's programs as tc filters, which wait for no grace period (veth only)
 *   ours-no-programs this plugin, embedded IPAM, "fastPath": false: the same pods with only
 *                    the source-check program (one link, like the fast path's), which
 *                    separates the fast path's own cost (node programs, flow table) from the rest
 *   ptp              the reference ptp plugin + host-local
 *   ours-node        the same build's Node SEA executable (dist/netkit-cni-node), embedded IPAM
 *   ours-baseline    only with --baseline: another build of this plugin, embedded IPAM
 *
 * All at cniVersion 1.0.0 (Debian's host-local refuses 1.1.0, which would make our plugin
 * retry) and IPv4 only, like the ptp configuration. Figures: ADD+DEL cycle latency, a
 * parallel ADD storm (wall time, failures), peak RSS and CPU time of single invocations.
 */
import * as fs from "node:fs";
import type { ClusterNode } from "../../test/support/topology";
import { makeCluster } from "../../test/support/topology";
import type { BenchFixture } from "./cleanup";
import { newFixture, tick } from "./cleanup";
import {
  type Attachment,
  type CniRun,
  OUR_NODE_PLUGIN,
  OUR_PLUGIN,
  refPlugin,
  runCni,
  runCniAsync,
  runCniPeakRss,
} from "./cni";
import { refConf } from "./paths";
import { pool } from "./pool";
import { type Summary, summarize } from "./stats";

export type CpId =
  | "ours-baseline"
  | "ours-embedded"
  | "ours-deferred"
  | "ours-agent"
  | "ours-agent-stopped"
  | "ours-deferred-tc"
  | "ours-agent-tc"
  | "ours-node"
  | "ours-host-local"
  | "ours-no-programs"
  | "ptp";

export const CP_LABELS: Record<CpId, string> = {
  "ours-baseline": "netkit-cni baseline build (--baseline), embedded IPAM",
  "ours-embedded": "netkit-cni, embedded IPAM",
  "ours-deferred": 'netkit-cni, embedded IPAM, "teardown": "deferred"',
  "ours-agent": "netkit-cni, deferred, verbs done by the running agent",
  "ours-agent-stopped": "netkit-cni, deferred, agent's conflist, agent stopped",
  "ours-deferred-tc": 'netkit-cni, deferred, "podHook": "tc"',
  "ours-agent-tc": 'netkit-cni, deferred, "podHook": "tc", verbs done by the running agent',
  "ours-node": "netkit-cni Node SEA (dist/netkit-cni-node), embedded IPAM",
  "ours-host-local": "netkit-cni + host-local",
  "ours-no-programs": "netkit-cni, embedded IPAM, fastPath false (source check only)",
  ptp: "ptp + host-local",
};

export interface CpConfig {
  id: CpId;
  fx: BenchFixture;
  node: ClusterNode;
  plugin: string;
  conf: Record<string, unknown>;
}

export function makeConfig(id: CpId, datapath: string, baselinePlugin?: string): CpConfig {
  const fx = newFixture(`cp-${id}`);
  const [node] = makeCluster(fx, { logLevel: "info", datapath });
  const dataDir = fx.tempDir(`nkb-ipam-${id}-`);
  if (id === "ptp") return { id, fx, node, plugin: refPlugin("ptp"), conf: refConf("ptp", node, dataDir) };
  const ranges = [[{ subnet: node.podSubnet4 }]];
  const ipam =
    id === "ours-host-local" ? { type: "host-local", ranges, dataDir } : { type: "netkit-cni", ranges, dataDir };
  const plugin = id === "ours-baseline" ? baselinePlugin : id === "ours-node" ? OUR_NODE_PLUGIN : OUR_PLUGIN;
  if (!plugin) throw new Error("the baseline configuration needs --baseline PATH");
  const variant = configVariant(id, fx);
  return { id, fx, node, plugin, conf: { ...node.conf, ...variant, cniVersion: "1.0.0", ipam } };
}

/** What each configuration adds to the node's network config. */
function configVariant(id: CpId, fx: BenchFixture): Record<string, unknown> {
  // The socket's directory; for the agent rows, runControlPlane points it at the agent's.
  const agent = () => ({ teardown: "deferred", agentStateDir: fx.tempDir(`nkb-agent-state-${id}-`) });
  switch (id) {
    case "ours-no-programs":
      return { fastPath: false };
    case "ours-deferred":
      return { teardown: "deferred" };
    case "ours-deferred-tc":
      return { teardown: "deferred", podHook: "tc" };
    case "ours-agent":
    case "ours-agent-stopped":
      return agent();
    case "ours-agent-tc":
      return { ...agent(), podHook: "tc" };
    default:
      return {};
  }
}

const att = (containerId: string, netns: string): Attachment => ({
  containerId,
  netns: `/run/netns/${netns}`,
  ifname: "eth0",
});

function add(cfg: CpConfig, a: Attachment): CniRun {
  return runCni(cfg.plugin, cfg.node.netns, "ADD", a, cfg.conf);
}

function del(cfg: CpConfig, a: Attachment, prevResult: unknown): CniRun {
  return runCni(cfg.plugin, cfg.node.netns, "DEL", a, { ...cfg.conf, prevResult });
}

export interface CycleResult {
  /** The very first ADD on a fresh node (ours: loads and pins the node's programs). */
  firstAddMs: number;
  add: Summary;
  del: Summary;
  cycle: Summary;
  failures: number;
  samples: { add: number[]; del: number[] };
}

/** Cycles run first and left out of the figures (the first ADD loads the node's programs). */
export const CYCLE_WARMUP = 2;

/** `cycles` ADD+DEL cycles per configuration, configurations interleaved within each cycle. */
export async function measureCycles(
  cfgs: CpConfig[],
  cycles: number,
  warmup = CYCLE_WARMUP,
): Promise<Record<string, CycleResult>> {
  const out: Record<string, CycleResult> = {};
  const samples = new Map(cfgs.map((c) => [c.id, { add: [] as number[], del: [] as number[], failures: 0, first: 0 }]));
  for (let i = 0; i < warmup + cycles; i++) {
    await tick();
    for (const cfg of cfgs) {
      const s = samples.get(cfg.id) as { add: number[]; del: number[]; failures: number; first: number };
      // A pod netns of its own, deleted after the DEL, as a runtime's sandbox is.
      const netns = cfg.fx.makeNetns("nkp");
      const a = att(`cycle-${cfg.id}-${i}`, netns);
      const r = add(cfg, a);
      if (i === 0) s.first = r.ms;
      const d = del(cfg, a, r.json);
      cfg.fx.deleteNetns(netns);
      if (r.status !== 0 || d.status !== 0) {
        s.failures += 1;
        process.stderr.write(`  ${cfg.id} cycle ${i}: ADD ${r.status} DEL ${d.status} ${r.stdout}${d.stdout}\n`);
      }
      if (i >= warmup) {
        s.add.push(r.ms);
        s.del.push(d.ms);
      }
    }
  }
  for (const cfg of cfgs) {
    const s = samples.get(cfg.id) as { add: number[]; del: number[]; failures: number; first: number };
    out[cfg.id] = {
      firstAddMs: s.first,
      add: summarize(s.add),
      del: summarize(s.del),
      cycle: summarize(s.add.map((x, i) => x + (s.del[i] as number))),
      failures: s.failures,
      samples: { add: s.add, del: s.del },
    };
  }
  return out;
}

export interface StormResult {
  pods: number;
  concurrency: number;
  wallMs: number;
  failures: number;
  firstError?: string;
  add: Summary;
  delWallMs: number;
  delFailures: number;
}

/** `pods` ADDs, `concurrency` at a time, into fresh pod namespaces; then DEL them all the same way. */
export async function storm(cfg: CpConfig, pods: number, concurrency: number): Promise<StormResult> {
  const netnses = Array.from({ length: pods }, () => cfg.fx.makeNetns("nks"));
  const results = new Map<string, CniRun>();
  const t0 = process.hrtime.bigint();
  await pool(netnses, concurrency, async (ns) => {
    results.set(ns, await runCniAsync(cfg.plugin, cfg.node.netns, "ADD", att(`storm-${ns}`, ns), cfg.conf));
  });
  const wallMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const failed = [...results.values()].filter((r) => r.status !== 0);
  const t1 = process.hrtime.bigint();
  let delFailures = 0;
  await pool(netnses, concurrency, async (ns) => {
    const prevResult = results.get(ns)?.json;
    const d = await runCniAsync(cfg.plugin, cfg.node.netns, "DEL", att(`storm-${ns}`, ns), { ...cfg.conf, prevResult });
    if (d.status !== 0) delFailures += 1;
  });
  const delWallMs = Number(process.hrtime.bigint() - t1) / 1e6;
  for (const ns of netnses) cfg.fx.deleteNetns(ns);
  return {
    pods,
    concurrency,
    wallMs,
    failures: failed.length,
    firstError: failed[0]?.stdout.trim().slice(0, 300),
    add: summarize([...results.values()].map((r) => r.ms)),
    delWallMs,
    delFailures,
  };
}

export interface RssResult {
  addKb: Summary;
  delKb: Summary;
  /** CPU time (user + system) of the same invocations; absent in older results. */
  addCpuMs?: Summary;
  delCpuMs?: Summary;
}

/** Peak RSS and CPU time of single ADD and DEL invocations (GNU time), `n` of each. */
export async function measureRss(cfg: CpConfig, n: number): Promise<RssResult> {
  const scratch = cfg.fx.tempDir("nkb-rss-");
  const addKb: number[] = [];
  const delKb: number[] = [];
  const addCpuMs: number[] = [];
  const delCpuMs: number[] = [];
  for (let i = 0; i < n; i++) {
    await tick();
    const netns = cfg.fx.makeNetns("nkp");
    const a = att(`rss-${cfg.id}-${i}`, netns);
    const r = runCniPeakRss(cfg.plugin, cfg.node.netns, "ADD", a, cfg.conf, scratch);
    const d = runCniPeakRss(cfg.plugin, cfg.node.netns, "DEL", a, { ...cfg.conf, prevResult: r.run.json }, scratch);
    cfg.fx.deleteNetns(netns);
    if (r.run.status === 0) {
      addKb.push(r.peakKb);
      addCpuMs.push(r.cpuMs);
    }
    if (d.run.status === 0) {
      delKb.push(d.peakKb);
      delCpuMs.push(d.cpuMs);
    }
  }
  fs.rmSync(scratch, { recursive: true, force: true });
  return {
    addKb: summarize(addKb),
    delKb: summarize(delKb),
    addCpuMs: summarize(addCpuMs),
    delCpuMs: summarize(delCpuMs),
  };
}
