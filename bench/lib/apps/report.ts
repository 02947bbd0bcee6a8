/**
 * The applications' part of bench/README.md: each workload's rate as a ratio against
 * host processes, per datapath and placement (the paired per-round ratio, with its spread),
 * the p99 latencies as measured, where this plugin's fast path does not beat bridge with
 * the CPU per operation beside it, and one chart per workload.
 */
import type { Placement } from "../paths";
import type { BenchResult } from "../result";
import { pairedRatio, type Summary, summarize } from "../stats";
import { barChart, type Group, PALETTE } from "../svg";
import { WORKLOAD_LABELS, type Workload } from "./clients";
import { APP_PATH_LABELS, type AppPathId, type AppsRun, type WorkloadSamples } from "./index";

const PLACEMENT_LABELS: Record<Placement, string> = { across: "across nodes", same: "one node" };
const x2 = (v: number) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : "n/a");
const cell = (s: Summary) => (s.n ? `**${x2(s.median)}** (${s.min.toFixed(2)}–${s.max.toFixed(2)})` : "–");
const rate = (v: number) =>
  Number.isFinite(v) ? (v >= 1000 ? `${(v / 1000).toFixed(1)} k/s` : `${v.toFixed(0)}/s`) : "n/a";
const msCell = (v: number) => (Number.isFinite(v) ? (v < 1 ? v.toFixed(3) : v.toFixed(2)) : "–");

function samples(a: AppsRun, id: AppPathId, pl: Placement, w: Workload): WorkloadSamples | undefined {
  return a.samples[id]?.[pl]?.[w];
}

/** X's rate ÷ Y's, round by round (both ran within seconds of each other). */
export function appRatio(a: AppsRun, id: AppPathId, base: AppPathId, pl: Placement, w: Workload): Summary {
  return pairedRatio(samples(a, id, pl, w)?.rate ?? [], samples(a, base, pl, w)?.rate ?? []);
}

const med = (v: number[] | undefined) => summarize(v ?? []).median;

function ratioTable(a: AppsRun, pl: Placement): string {
  const ids = a.order.filter((id) => id !== "host" && a.samples[id]?.[pl]);
  const head = `| workload | host processes | ${ids.map((id) => APP_PATH_LABELS[id]).join(" | ")} |`;
  const sep = `|---|---:|${ids.map(() => "---:").join("|")}|`;
  const rows = a.workloads.map((w) => {
    const host = med(samples(a, "host", pl, w)?.rate);
    return `| ${WORKLOAD_LABELS[w]} | ${rate(host)} | ${ids.map((id) => cell(appRatio(a, id, "host", pl, w))).join(" | ")} |`;
  });
  return [head, sep, ...rows].join("\n");
}

function latencyTable(a: AppsRun, pl: Placement): string {
  const ids = a.order.filter((id) => a.samples[id]?.[pl]);
  const head = `| workload, p50 / p99 ms | ${ids.map((id) => APP_PATH_LABELS[id]).join(" | ")} |`;
  const sep = `|---|${ids.map(() => "---:").join("|")}|`;
  const rows = a.workloads.map((w) => {
    const cells = ids.map((id) => {
      const s = samples(a, id, pl, w);
      return `${msCell(med(s?.p50))} / ${msCell(med(s?.p99))}`;
    });
    return `| ${WORKLOAD_LABELS[w]} | ${cells.join(" | ")} |`;
  });
  return [head, sep, ...rows].join("\n");
}

type Verdict = "wins" | "loses" | "mixed";

/** Every workload and placement: the fast path's rate ÷ bridge's, per round, and CPU per op. */
export function againstBridge(a: AppsRun, id: AppPathId = "veth") {
  const out: { pl: Placement; w: Workload; ratio: Summary; verdict: Verdict; cpu: number; bridgeCpu: number }[] = [];
  for (const pl of a.placements) {
    if (!a.samples[id]?.[pl] || !a.samples.bridge?.[pl]) continue;
    for (const w of a.workloads) {
      const ratio = appRatio(a, id, "bridge", pl, w);
      if (!ratio.n) continue;
      // Wins: above bridge in every round; loses: a median at or below bridge's.
      const verdict: Verdict = ratio.min > 1 ? "wins" : ratio.median <= 1 ? "loses" : "mixed";
      const cpu = med(samples(a, id, pl, w)?.cpuUsPerOp);
      const bridgeCpu = med(samples(a, "bridge", pl, w)?.cpuUsPerOp);
      out.push({ pl, w, ratio, verdict, cpu, bridgeCpu });
    }
  }
  return out;
}

function bypassLine(a: AppsRun): string {
  if (!a.bypass.length) return "";
  const spliced = a.bypass.filter((b) => b.redirectedBytes > 0).length;
  const mib = a.bypass.reduce((n, b) => n + b.redirectedBytes, 0) / 2 ** 20;
  return `The socket bypass's counters (nkc_sock_stats, client and server pods): ${spliced} of ${a.bypass.length} timed runs were spliced, ${mib.toFixed(0)} MiB redirected in all.`;
}

export function appsSection(r: BenchResult, vm?: BenchResult): string {
  const a = r.apps;
  if (!a) return "_no applications run on this kernel yet (make bench-apps)._";
  const out = [
    `${a.rounds} interleaved round(s), ${a.seconds} s per test, on Linux ${r.machine.kernel}; every path's servers and clients are the same programs. ` +
      "A cell is the path's rate (requests, transactions or operations per second) ÷ host processes' in the same round: the median of the per-round ratios, with their min–max. Above 1: faster than host processes.",
    "",
  ];
  for (const pl of a.placements) {
    out.push(`**${PLACEMENT_LABELS[pl]}**`, "", ratioTable(a, pl), "");
  }
  for (const pl of a.placements) {
    out.push(`Latency, ${PLACEMENT_LABELS[pl]} (medians over rounds):`, "", latencyTable(a, pl), "");
  }
  const vs = againstBridge(a);
  const losses = vs.filter((v) => v.verdict === "loses");
  const named = (v: (typeof vs)[number]) => `${WORKLOAD_LABELS[v.w]} ${PLACEMENT_LABELS[v.pl]} (${x2(v.ratio.median)})`;
  if (vs.length) {
    const wins = vs.filter((v) => v.verdict === "wins");
    const mixed = vs.filter((v) => v.verdict === "mixed");
    out.push(
      `**The veth fast path against bridge**, rate ÷ bridge's round by round: above bridge in every round for ${wins.length} of ${vs.length} workload-placements${wins.length ? ` (${wins.map(named).join(", ")})` : ""}; above by the median but not in every round for ${mixed.length}; at or below bridge by the median for ${losses.length}.`,
      "",
    );
  }
  if (losses.length) {
    out.push(
      "Where it does not beat bridge (median at or below 1), with the CPU every process of each path spent per operation (its cgroup's usage_usec ÷ operations, servers and clients):",
      "",
      "| placement | workload | veth ÷ bridge | CPU µs/op, veth | CPU µs/op, bridge |",
      "|---|---|---:|---:|---:|",
      ...losses.map(
        (l) =>
          `| ${PLACEMENT_LABELS[l.pl]} | ${WORKLOAD_LABELS[l.w]} | ${cell(l.ratio)} | ${l.cpu.toFixed(1)} | ${l.bridgeCpu.toFixed(1)} |`,
      ),
      "",
    );
  }
  const bl = bypassLine(a);
  if (bl) out.push(bl, "");
  if (a.errors.length)
    out.push(`Failed runs (left out of the figures): ${a.errors.length}; first: \`${a.errors[0]}\``, "");
  const g = vm?.apps;
  if (g) {
    const done = g.workloads.map((w) => `${WORKLOAD_LABELS[w]} ${g.completed[w] ?? 0}`).join(", ");
    out.push(
      `In the UML guest (Linux ${vm?.machine.kernel}), on ${g.order.map((id) => APP_PATH_LABELS[id]).join(", ")} pods, ${g.placements.map((pl) => PLACEMENT_LABELS[pl]).join(" and ")}, for correctness only: operations completed: ${done}${g.errors.length ? `; ${g.errors.length} runs failed` : ""}.`,
      "",
    );
  }
  return out.join("\n");
}

/** One chart per workload: each path's rate ÷ host processes', per placement. */
export function appCharts(r: BenchResult): [file: string, svg: string][] {
  const a = r.apps;
  if (!a) return [];
  const series = a.placements.map((pl, i) => ({ name: PLACEMENT_LABELS[pl], color: PALETTE[i] as string }));
  return a.workloads.map((w) => {
    const groups: Group[] = a.order
      .filter((id) => id !== "host")
      .map((id) => ({
        label: APP_PATH_LABELS[id],
        bars: a.placements.flatMap((pl, k) => {
          const s = appRatio(a, id, "host", pl, w);
          if (!s.n) return [];
          return [{ series: series[k]?.name ?? "", value: s.median, lo: s.min, hi: s.max, label: x2(s.median) }];
        }),
      }));
    const svg = barChart({
      title: `${WORKLOAD_LABELS[w]} on Linux ${r.machine.kernel}, relative to host processes`,
      subtitle: `median of per-round ratios, whiskers min–max; ${a.rounds} interleaved round(s) × ${a.seconds} s; higher is better`,
      series,
      groups,
      axisLabel: "rate ÷ host processes' (same round)",
      refLines: [{ value: 1, label: "host processes", color: "#222" }],
      format: (v) => v.toFixed(2),
    });
    return [`apps-${w}.svg`, svg];
  });
}
