/**
 * The netperf sections of bench/README.md (bench/lib/dataplane.ts's rounds): every path's
 * rates on this kernel with its ratios to host processes and to bridge, the NAT check's
 * variants against each other, the guest's rates as measured, and the charts.
 */
import { type NetperfTest, UNITS } from "../../test/support/netperf";
import { type Img, num, ratioCell, x2 } from "./format";
import { PATH_LABELS, type PathId, PLACEMENT_LABELS, type Placement } from "./paths";
import type { BenchResult } from "./result";
import { type Run, runName } from "./results-dir";
import { samplesOf } from "./run-figures";
import { pairedRatio, summarize } from "./stats";
import { barChart, type Group, PALETTE } from "./svg";
import { VETH_TARGET } from "./targets-report";

/** One test's table: per path and placement, the median [min–max], × host and × bridge. */
function netperfTable(r: BenchResult, t: NetperfTest, hasBridge: boolean): string[] {
  const np = r.netperf;
  if (!np) return [];
  const head = ["path"];
  const align = ["---"];
  for (const pl of np.placements) {
    head.push(PLACEMENT_LABELS[pl], "× host");
    align.push("---:", "---:");
    if (hasBridge) {
      head.push("× bridge");
      align.push("---:");
    }
  }
  const out = [`| ${head.join(" | ")} |`, `|${align.join("|")}|`];
  for (const id of np.order) {
    const cells = [PATH_LABELS[id]];
    for (const pl of np.placements) {
      const s = summarize(samplesOf(r, id, pl, t));
      cells.push(s.n ? `${num(s.median, 0)} [${num(s.min, 0)}–${num(s.max, 0)}]` : "n/a");
      cells.push(id === "host" ? "1" : ratioCell(pairedRatio(samplesOf(r, id, pl, t), samplesOf(r, "host", pl, t))));
      if (hasBridge) {
        cells.push(
          id === "bridge" ? "1" : ratioCell(pairedRatio(samplesOf(r, id, pl, t), samplesOf(r, "bridge", pl, t))),
        );
      }
    }
    out.push(`| ${cells.join(" | ")} |`);
  }
  return out;
}

function netperfTables(r: BenchResult): string {
  const np = r.netperf;
  if (!np) return "_netperf skipped in this run._";
  const out: string[] = [];
  const hasBridge = np.order.includes("bridge");
  for (const t of np.tests) {
    out.push(`**${t}** (${UNITS[t]}; median of ${np.rounds} rounds, [min–max])`, "");
    out.push(...netperfTable(r, t, hasBridge), "");
  }
  if (np.errors.length) out.push(`netperf errors (${np.errors.length}): ${np.errors.slice(0, 3).join("; ")}`, "");
  return out.join("\n");
}

export function netperfSection(host: BenchResult | undefined, img: Img): string[] {
  return [
    `### netperf on this kernel (Linux ${host?.machine.kernel ?? "?"})`,
    "",
    "Paths interleaved round by round; a ratio is the median of the per-round ratios (both measured within seconds of each other) with their min–max.",
    "",
    host ? netperfTables(host) : "_no run on this kernel yet._",
    img("netperf-TCP_RR.svg", "TCP_RR relative to bridge"),
    img("netperf-TCP_CRR.svg", "TCP_CRR relative to bridge"),
    img("netperf-TCP_STREAM.svg", "TCP_STREAM relative to bridge"),
  ];
}

/** What keeping NAT'd flows on the stack costs per packet: the conntrack variant against the
 * memory one, and against the baseline build (when the run had one), round by round. */
function natCheckTable(r: BenchResult): string {
  const np = r.netperf;
  const pairs: [PathId, PathId, string][] = [
    ["veth", "veth-memory", "conntrack ÷ memory"],
    ["veth", "veth-baseline", "this build ÷ baseline build"],
    ["veth-memory", "veth-baseline", "memory ÷ baseline build"],
  ];
  const present = pairs.filter(([a, b]) => np?.order.includes(a) && np?.order.includes(b));
  if (!np || present.length === 0) return "_this run measured no NAT check variants side by side._";
  const tests = np.tests.filter((t) => t !== "TCP_STREAM");
  const head = ["comparison", ...tests.flatMap((t) => np.placements.map((pl) => `${t} ${PLACEMENT_LABELS[pl]}`))];
  const rows = present.map(([a, b, label]) => {
    const cells = tests.flatMap((t) =>
      np.placements.map((pl) => ratioCell(pairedRatio(samplesOf(r, a, pl, t), samplesOf(r, b, pl, t)))),
    );
    return `| ${label} | ${cells.join(" | ")} |`;
  });
  return [
    `| ${head.join(" | ")} |`,
    `|---|${head
      .slice(1)
      .map(() => "---:")
      .join("|")}|`,
    ...rows,
  ].join("\n");
}

/** `run`: the newest run on this kernel whose netperf had the memory variant's path. */
export function natCheckSection(run: Run | undefined): string[] {
  return [
    "### The NAT check's cost per packet (this kernel, same rounds)",
    "",
    "Transaction rates divided round by round: the conntrack variant (a conntrack lookup per TCP/UDP packet it redirects) against the memory variant (one flow-table lookup) and against the baseline build given with `--baseline`. Above 1: the first is faster.",
    "",
    run
      ? `From ${runName(run)}.\n\n${natCheckTable(run.r)}`
      : "_no run on this kernel measured the NAT check variants yet._",
    "",
  ];
}

function vmNetperfTable(r: BenchResult): string {
  const np = r.netperf;
  if (!np) return "_netperf skipped in the guest run._";
  const head = ["path"];
  const cols: [NetperfTest, Placement][] = [];
  for (const t of np.tests) {
    for (const pl of np.placements) {
      head.push(`${t} ${pl === "across" ? "across" : "one node"}`);
      cols.push([t, pl]);
    }
  }
  const rows = [`| ${head.join(" | ")} |`, `|---|${cols.map(() => "---:").join("|")}|`];
  for (const id of np.order) {
    rows.push(
      `| ${PATH_LABELS[id]} | ${cols
        .map(([t, pl]) => {
          const s = summarize(samplesOf(r, id, pl, t));
          return s.n ? `${num(s.median)} [${num(s.min)}–${num(s.max)}]` : "n/a";
        })
        .join(" | ")} |`,
    );
  }
  return `Medians of ${np.rounds} rounds × ${np.seconds} s [min–max]; units: ${np.tests.map((t) => `${t} ${UNITS[t]}`).join(", ")}.\n\n${rows.join("\n")}`;
}

export function vmNetperfSection(vm: BenchResult | undefined): string[] {
  return [
    "### In the UML guest: netperf as measured",
    "",
    "One CPU, no JIT, slow guest system calls: these figures cannot tell the paths apart and are shown only as measured; the crossing counts above are the guest's evidence.",
    "",
    vm ? vmNetperfTable(vm) : "_no guest run yet (make bench-vm)._",
    "",
  ];
}

export function netperfChart(r: BenchResult, test: NetperfTest): string | undefined {
  const np = r.netperf;
  if (!np?.tests.includes(test)) return undefined;
  const base: PathId = np.order.includes("bridge") ? "bridge" : "host";
  const series = np.placements.map((pl, i) => ({ name: PLACEMENT_LABELS[pl], color: PALETTE[i] as string }));
  const groups: Group[] = np.order.map((id) => ({
    label: PATH_LABELS[id],
    bars: np.placements.map((pl, k) => {
      const s = pairedRatio(samplesOf(r, id, pl, test), samplesOf(r, base, pl, test));
      const h = pairedRatio(samplesOf(r, id, pl, test), samplesOf(r, "host", pl, test));
      const label =
        id === base
          ? `${base} (${num(summarize(samplesOf(r, id, pl, test)).median)})`
          : `${x2(s.median)} ${base}, ${x2(h.median)} host`;
      return {
        series: series[k]?.name ?? "",
        value: id === base ? 1 : s.median,
        lo: id === base ? undefined : s.min,
        hi: id === base ? undefined : s.max,
        label,
      };
    }),
  }));
  const refLines: { value: number; label: string; color: string }[] = [
    { value: 1, label: PATH_LABELS[base], color: "#222" },
  ];
  if (base === "bridge" && test !== "TCP_STREAM") {
    refLines.push({ value: VETH_TARGET, label: `target for the veth fast path: ${VETH_TARGET}×`, color: "#b5484b" });
  }
  return barChart({
    title: `netperf ${test} on Linux ${r.machine.kernel}, relative to ${PATH_LABELS[base]}`,
    subtitle: `median of per-round ratios, whiskers min–max; ${np.rounds} interleaved rounds × ${np.seconds} s; higher is better`,
    series,
    groups,
    axisLabel: `${test} throughput ÷ ${PATH_LABELS[base]}'s (same round)`,
    refLines,
    format: (v) => v.toFixed(2),
  });
}
