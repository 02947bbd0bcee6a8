/**
 * The control-plane section of bench/README.md (bench/lib/control-plane.ts's cycles, storms
 * and peak RSS, bench/lib/kernel-floor.ts's floor): every configuration beside ptp +
 * host-local, the least any build of this design can take measured in the same run, and
 * the chart.
 */
import { CP_LABELS, type CpId } from "./control-plane";
import { type Img, mb, ms, x2 } from "./format";
import type { KernelFloor } from "./kernel-floor";
import type { BenchResult } from "./result";
import { cycleFloor, stormMean } from "./run-figures";
import { quantile } from "./stats";
import { barChart, type Group, PALETTE } from "./svg";
import { OWN_WORK_TARGET_MS } from "./targets-report";
import type { InProcessTimes } from "./verb-times";

const sum = (a: number[], b: number[]) => a.map((x, i) => x + (b[i] ?? Number.NaN));
/** "12.3 / 15.6 / 20.1 ms": p50, p95 and p99 of a cycle's samples. */
const percentiles = (v: number[]) => [0.5, 0.95, 0.99].map((q) => ms(quantile(v, q))).join(" / ");

function controlPlaneTable(r: BenchResult): string {
  const cp = r.controlPlane;
  if (!cp) return "_control plane skipped in this run._";
  const ptp = cp.cycles.ptp;
  const ptpStorm = stormMean(r, "ptp");
  const rows = [
    `| configuration | ADD p50 / p95 / p99 | DEL p50 / p95 / p99 | ADD+DEL p50 / p95 / p99 | ADD+DEL p50 × ptp | first ADD on a fresh node | storm: ${r.settings.storm} ADDs, ${r.settings.concurrency} at a time (wall) | storm × ptp | storm failures | peak RSS ADD / DEL | CPU per ADD / DEL (p50) |`,
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const id of Object.keys(CP_LABELS) as CpId[]) {
    const c = cp.cycles[id];
    if (!c) continue;
    const st = stormMean(r, id);
    const rss = cp.rss[id];
    rows.push(
      `| ${CP_LABELS[id]} | ${percentiles(c.samples.add)} | ${percentiles(c.samples.del)} | ${percentiles(sum(c.samples.add, c.samples.del))} | ${id === "ptp" ? "1" : `**${x2(c.cycle.median / (ptp?.cycle.median ?? Number.NaN))}**`} | ${ms(c.firstAddMs)} | ${st.walls.map((w) => ms(w)).join(", ")} | ${id === "ptp" ? "1" : `**${x2(st.wall / ptpStorm.wall)}**`} | ${st.failures} | ${rss ? `${mb(rss.addKb.max)} / ${mb(rss.delKb.max)}` : "n/a"} | ${rss?.addCpuMs && rss.delCpuMs ? `${ms(rss.addCpuMs.median)} / ${ms(rss.delCpuMs.median)}` : "n/a"} |`,
    );
  }
  return [rows.join("\n"), floorLine(r), stormFloorLine(r), verbAgentLine(r), handOverLine(r)]
    .filter((x) => x !== undefined)
    .join("\n\n");
}

/** The memory of the agent that did the ours-agent row's verbs, before and after them. */
function verbAgentLine(r: BenchResult): string | undefined {
  const m = r.controlPlane?.verbAgent;
  if (!m) return undefined;
  return [
    `**The agent doing the verbs** (${CP_LABELS["ours-agent"]}): ${m.syncedMb} MB resident once synced,`,
    `${m.afterMb} MB after every cycle, storm and single run of its row (${x2(m.afterMb / m.syncedMb)}),`,
    `${m.peakMb} MB at most.`,
  ].join(" ");
}

/**
 * Where the agent rows' verbs spent their time: inside the process that did the verb (the
 * agent, or the plugin itself with the agent stopped), as that process recorded it, and
 * outside it (the plugin's start and exit, and for a handed verb the hand-over), which is
 * the runtime's wall time less the verb's.
 */
export function handOverLine(r: BenchResult): string | undefined {
  const cp = r.controlPlane;
  if (!cp?.inProcess) return undefined;
  const parts: string[] = [];
  const outside: Partial<Record<CpId, number>> = {};
  for (const [id, t] of Object.entries(cp.inProcess) as [CpId, InProcessTimes][]) {
    const wall = cp.cycles[id];
    if (!wall) continue;
    outside[id] = wall.add.median - t.add.median + (wall.del.median - t.del.median);
    parts.push(
      `${CP_LABELS[id]}: ADD ${ms(t.add.median)} of ${ms(wall.add.median)}, DEL ${ms(t.del.median)} of ${ms(wall.del.median)}, ${ms(outside[id] as number)} of the cycle outside the verb`,
    );
  }
  if (parts.length === 0) return undefined;
  const handed = outside["ours-agent"];
  const alone = outside["ours-agent-stopped"];
  return [
    "**Where a verb's time goes** (cycles, medians: the time inside the process that did the verb, as it",
    `recorded it in verbs.log, of the runtime's wall time): ${parts.join("; ")}.`,
    handed !== undefined && alone !== undefined
      ? `Handing ADD and DEL over costs ${ms(handed - alone)} a cycle above the plugin's own start and exit.`
      : "",
  ]
    .filter(Boolean)
    .join(" ");
}

/**
 * The least any build of this design can take for an ADD+DEL, measured in the same run:
 * the pod's tcx link (two RCU grace periods), two bare Bun starts and the veth pair, beside
 * ptp's cycle; what the default executable takes above it is the plugin's own work.
 */
function floorLine(r: BenchResult): string | undefined {
  const f = r.controlPlane?.kernelFloor;
  const ptp = r.controlPlane?.cycles.ptp?.cycle.median;
  if (!f || ptp === undefined) return undefined;
  const { link, starts, pair, total } = cycleFloor(f);
  const ours = r.controlPlane?.cycles["ours-embedded"]?.cycle.median;
  return [
    `**The floor, same run** (${f.tcxAttachMs.n} rounds each, medians): the pod's one tcx link costs`,
    `${ms(f.tcxAttachMs.median)} to attach and ${ms(f.linkReleaseMs.median)} to release on a fresh veth pair`,
    `(each an RCU grace period under RTNL): ${ms(link)}, ${x2(link / ptp)} ptp's whole ADD+DEL (${ms(ptp)}).`,
    `Two starts of a bare Bun-compiled executable: ${ms(starts)}. Creating and deleting the pair with`,
    `ip(8), which ptp pays too: ${ms(pair)}. Link, starts and pair together: ${ms(total)}`,
    `(${x2(total / ptp)} ptp).`,
    ours === undefined
      ? ""
      : `The plugin's own work, its ADD+DEL p50 above that: ${ms(ours - total)} (the target: ≤ ${OWN_WORK_TARGET_MS} ms).`,
    moveSentence(f),
    tcHookSentence(f),
  ]
    .filter(Boolean)
    .join(" ");
}

/**
 * What a pair made ahead (its programs attached off the verb's path) would still cost an
 * ADD: its pod end moved into the pod's namespace, which waits out pending RCU callbacks,
 * beside the attachment it would spare (a pod with NetworkPolicy has two).
 */
function moveSentence(f: KernelFloor): string {
  if (!f.vethMoveMs) return "";
  const move = f.vethMoveMs.median;
  return [
    `A pair made ahead with its programs attached would spare an ADD its attachments (${ms(f.tcxAttachMs.median)} each;`,
    `two with NetworkPolicy) and cost it the move of its pod end into the pod's namespace: ${ms(move)}`,
    `(${x2(move / f.tcxAttachMs.median)} one attachment).`,
  ].join(" ");
}

/**
 * What the pod's program would cost on tc's clsact hook instead of a tcx link, beside the
 * link: the filter is published without waiting for a grace period.
 */
function tcHookSentence(f: KernelFloor): string {
  if (!f.tcHook) return "";
  const { qdiscMs, filterAttachMs, filterReleaseMs } = f.tcHook;
  const attach = qdiscMs.median + filterAttachMs.median;
  return [
    `The same program as a cls_bpf filter on a clsact qdisc (tc's hook before tcx): the qdisc`,
    `${ms(qdiscMs.median)}, the filter ${ms(filterAttachMs.median)} to add and ${ms(filterReleaseMs.median)} to delete;`,
    `the pair's hook in ${ms(attach)} against the link's ${ms(f.tcxAttachMs.median)}`,
    `(${x2(attach / f.tcxAttachMs.median)}).`,
  ].join(" ");
}

/**
 * The least a storm of pods that each carry a tcx link can take, measured in the same run:
 * the attachments alone, made as concurrently as the storm's ADDs, beside ptp's storm.
 */
function stormFloorLine(r: BenchResult): string | undefined {
  const f = r.controlPlane?.kernelFloor?.attachStorm;
  const ptp = stormMean(r, "ptp").wall;
  if (!f?.attachWallMs.length || Number.isNaN(ptp)) return undefined;
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const attach = mean(f.attachWallMs);
  const processes = mean(f.processWallMs);
  const kernel = attach - processes;
  return [
    `**The storm's floor, same run** (${f.attachWallMs.length} rounds, means): ${f.pods} tcx attachments,`,
    `${f.concurrency} at a time, each by its own bpftool process, took ${ms(attach)}; the same processes`,
    `without the attachment, ${ms(processes)}. RTNL is held through each attachment's grace periods, so the`,
    `attachments alone take ${ms(kernel)}, ${x2(kernel / ptp)} ptp's whole storm (${ms(ptp)}), before any pair,`,
    "address or route, which need RTNL too.",
  ].join(" ");
}

export function controlPlaneSection(host: BenchResult | undefined, img: Img): string[] {
  return [
    "### Control plane (this kernel, same run)",
    "",
    host ? controlPlaneTable(host) : "_no run on this kernel yet._",
    img("control-plane.svg", "control plane relative to ptp"),
  ];
}

export function controlPlaneChart(r: BenchResult): string | undefined {
  const cp = r.controlPlane;
  if (!cp?.cycles.ptp) return undefined;
  const ptp = cp.cycles.ptp;
  const ps = stormMean(r, "ptp");
  const groups: Group[] = (Object.keys(CP_LABELS) as CpId[])
    .filter((id) => cp.cycles[id])
    .map((id) => {
      const c = cp.cycles[id] as NonNullable<(typeof cp.cycles)[CpId]>;
      const st = stormMean(r, id);
      return {
        label: CP_LABELS[id],
        bars: [
          {
            series: "ADD+DEL p50",
            value: c.cycle.median / ptp.cycle.median,
            label: `${x2(c.cycle.median / ptp.cycle.median)} (${ms(c.cycle.median)})`,
          },
          {
            series: "ADD p50",
            value: c.add.median / ptp.add.median,
            label: `${x2(c.add.median / ptp.add.median)} (${ms(c.add.median)})`,
          },
          { series: "storm wall", value: st.wall / ps.wall, label: `${x2(st.wall / ps.wall)} (${ms(st.wall)})` },
        ],
      };
    });
  return barChart({
    title: "Control plane: relative to ptp + host-local (same run)",
    subtitle: `${r.settings.cycles} ADD+DEL cycles each, interleaved; storm: ${r.settings.storm} parallel ADDs, ${r.settings.concurrency} at a time; lower is better`,
    series: [
      { name: "ADD+DEL p50", color: PALETTE[0] as string },
      { name: "ADD p50", color: PALETTE[2] as string },
      { name: "storm wall", color: PALETTE[1] as string },
    ],
    groups,
    axisLabel: "× ptp + host-local",
    refLines: [{ value: 1, label: "ptp + host-local" }],
    format: (v) => v.toFixed(2),
  });
}
