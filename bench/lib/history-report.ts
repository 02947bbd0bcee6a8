/**
 * The last section of bench/README.md's results: the targets' figures of every run kept
 * in bench/results/, one row a run, to show how much they move between runs.
 */
import type { NetperfTest } from "../../test/support/netperf";
import { mb, minute, num, pp, x2 } from "./format";
import type { Placement } from "./paths";
import type { Run } from "./results-dir";
import { crossing, samplesOf, stormMean } from "./run-figures";
import { pairedRatio, summarize } from "./stats";

function historyRow({ file, r }: Run): string {
  const ratio = (t: NetperfTest, pl: Placement) =>
    r.netperf?.order.includes("bridge")
      ? x2(pairedRatio(samplesOf(r, "veth", pl, t), samplesOf(r, "bridge", pl, t)).median)
      : "–";
  const cp = r.controlPlane;
  const emb = cp?.cycles["ours-embedded"];
  const ptp = cp?.cycles.ptp;
  const st = cp ? stormMean(r, "ours-embedded").wall / stormMean(r, "ptp").wall : Number.NaN;
  const rss = cp?.rss["ours-embedded"];
  const nkA = crossing(r, "netkit", "across")?.ping.total;
  const nkS = crossing(r, "netkit", "same")?.ping.total;
  return `| [${minute(r.startedAt)}](results/${file}) | ${r.machine.kernel} | ${r.machine.plugin.sha256.slice(0, 8)} | ${r.netperf?.rounds ?? "–"} | ${r.netperf ? num(summarize(samplesOf(r, "host", "across", "TCP_RR")).median) : "–"} | ${r.netperf ? `${ratio("TCP_RR", "across")} / ${ratio("TCP_RR", "same")}` : "–"} | ${r.netperf ? `${ratio("TCP_CRR", "across")} / ${ratio("TCP_CRR", "same")}` : "–"} | ${emb && ptp ? x2(emb.cycle.median / ptp.cycle.median) : "–"} | ${cp ? x2(st) : "–"} | ${rss ? mb(Math.max(rss.addKb.max, rss.delKb.max)) : "–"} | ${nkA === undefined ? "–" : `${pp(nkA)} / ${pp(nkS)}`} |`;
}

export function historySection(runs: Run[]): string[] {
  return [
    "### All runs kept in results/",
    "",
    "The same figures run by run (the plugin binary changes as the code does). On this shared virtual machine the absolute rates change between runs (see host ↔ host), and the netperf ratios move with them by more than their per-run spread suggests.",
    "",
    [
      "| run (UTC) | kernel | plugin binary | rounds | host ↔ host TCP_RR across (the machine's state) | TCP_RR veth ÷ bridge: across / one node | TCP_CRR veth ÷ bridge: across / one node | ADD+DEL ÷ ptp | storm ÷ ptp | peak RSS | netkit crossings: across / one node |",
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
      ...runs.map(historyRow),
    ].join("\n"),
    "",
  ];
}
