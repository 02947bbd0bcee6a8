/**
 * The socket bypass section of bench/README.md (bench/lib/sockbypass.ts's run): each
 * variant against bypass off, size by size, the medians as measured, where the bypass
 * wins and loses, the counters' evidence of what was spliced, and the chart.
 */
import { type Img, minute, num, ratioCell, x2 } from "./format";
import type { BenchResult } from "./result";
import { SOCK_VARIANT_LABELS, type SockBypassRun, type SockSizeSamples, type SockVariant } from "./sockbypass";
import { pairedRatio, type Summary, summarize } from "./stats";
import { barChart, type Group, PALETTE } from "./svg";

type SockMetric = "rr" | "stream" | "p50" | "p99" | "rrCpuUs" | "streamCpuUsPerMiB";

const SOCK_METRICS: { key: SockMetric; label: string; unit: string; higherIsBetter: boolean }[] = [
  { key: "rr", label: "TCP_RR", unit: "transactions/s", higherIsBetter: true },
  { key: "stream", label: "TCP_STREAM", unit: "Mbit/s", higherIsBetter: true },
  { key: "p50", label: "RTT p50", unit: "µs", higherIsBetter: false },
  { key: "p99", label: "RTT p99", unit: "µs", higherIsBetter: false },
  { key: "rrCpuUs", label: "CPU per transaction", unit: "µs", higherIsBetter: false },
  { key: "streamCpuUsPerMiB", label: "CPU per MiB streamed", unit: "µs", higherIsBetter: false },
];

const sizeLabel = (b: number) => (b >= 1024 ? `${b / 1024} KiB` : `${b} B`);

function sockSamples(r: BenchResult, v: SockVariant, size: number, m: SockMetric): number[] {
  return (r.sockBypass?.samples[v]?.[String(size)] as SockSizeSamples | undefined)?.[m] ?? [];
}

/** A variant against bypass off, round by round. */
function sockRatio(r: BenchResult, v: SockVariant, size: number, m: SockMetric): Summary {
  return pairedRatio(sockSamples(r, v, size, m), sockSamples(r, "off", size, m));
}

type Verdict = "wins" | "loses" | "mixed";

/** Every round better than off: wins; every round worse: loses; else mixed. */
function verdict(s: Summary, higherIsBetter: boolean): Verdict | undefined {
  if (!s.n) return undefined;
  const better = (x: number) => (higherIsBetter ? x > 1 : x < 1);
  if (better(s.min) && better(s.max)) return "wins";
  if (!better(s.min) && !better(s.max) && s.min !== 1 && s.max !== 1) return "loses";
  return "mixed";
}

/** Per size: which measures the bypass wins, loses, or leaves within the rounds' spread. */
function sockVerdicts(r: BenchResult): { size: number; wins: string[]; loses: string[]; mixed: string[] }[] {
  const sb = r.sockBypass;
  if (!sb) return [];
  return sb.sizes.map((size) => {
    const out = { size, wins: [] as string[], loses: [] as string[], mixed: [] as string[] };
    for (const m of SOCK_METRICS) {
      const s = sockRatio(r, "on", size, m.key);
      const v = verdict(s, m.higherIsBetter);
      if (v) out[v].push(`${m.label} ${x2(s.median)}`);
    }
    return out;
  });
}

/** Per size, on ÷ off and loopback ÷ off for every measure. */
function ratioTable(r: BenchResult, sb: SockBypassRun): string[] {
  const head = ["size"];
  const align = ["---"];
  for (const m of SOCK_METRICS) {
    head.push(`${m.label}: on ÷ off`, "loopback ÷ off");
    align.push("---:", "---:");
  }
  const out = [`| ${head.join(" | ")} |`, `|${align.join("|")}|`];
  for (const size of sb.sizes) {
    const cells = [sizeLabel(size)];
    for (const m of SOCK_METRICS) {
      cells.push(ratioCell(sockRatio(r, "on", size, m.key)), ratioCell(sockRatio(r, "loopback", size, m.key)));
    }
    out.push(`| ${cells.join(" | ")} |`);
  }
  return out;
}

function mediansTable(r: BenchResult, sb: SockBypassRun): string[] {
  const out = [
    `| size | variant | ${SOCK_METRICS.map((m) => `${m.label} (${m.unit})`).join(" | ")} |`,
    `|---|---|${SOCK_METRICS.map(() => "---:").join("|")}|`,
  ];
  for (const size of sb.sizes) {
    for (const v of sb.order) {
      const cells = SOCK_METRICS.map((m) => {
        const s = summarize(sockSamples(r, v, size, m.key));
        return s.n ? num(s.median, m.key === "p50" || m.key === "p99" || m.key === "rrCpuUs" ? 1 : 0) : "n/a";
      });
      out.push(`| ${sizeLabel(size)} | ${SOCK_VARIANT_LABELS[v]} | ${cells.join(" | ")} |`);
    }
  }
  return out;
}

function verdictLines(r: BenchResult, rounds: string): string[] {
  const verdicts = sockVerdicts(r);
  const everywhere = verdicts.every((v) => v.loses.length === 0 && v.mixed.length === 0);
  const out = [
    `Bypass on against off, size by size, over ${rounds} (every round better: wins; every round worse: loses):`,
    "",
  ];
  for (const v of verdicts) {
    const parts = [
      v.wins.length ? `wins ${v.wins.join(", ")}` : "",
      v.loses.length ? `**loses** ${v.loses.join(", ")}` : "",
      v.mixed.length ? `rounds disagree on ${v.mixed.join(", ")}` : "",
    ].filter(Boolean);
    out.push(`- **${sizeLabel(v.size)}**: ${parts.join("; ")}.`);
  }
  out.push(
    "",
    everywhere
      ? "It wins every measure at every size in this run; `sockBypass` stays off by default until it does so run after run."
      : "It does not win everywhere in this run, so `sockBypass` stays off by default.",
  );
  return out;
}

/** What the bypass's own counters say was spliced, on this kernel and in the guest. */
function counterLines(sb: SockBypassRun, vm?: BenchResult): string[] {
  const spliced = sb.checks.filter((c) => c.variant === "on");
  const bytes = (k: "client" | "server") => spliced.reduce((a, c) => a + c[k].redirectedBytes, 0);
  const passed = spliced.reduce((a, c) => a + c.client.passedMsgs + c.server.passedMsgs, 0);
  const out = [
    "",
    `Spliced, by the bypass's own counters (\`nkc_sock_stats\`): every *on* run redirected at least 95% of the bytes ` +
      `its client sent (${num(bytes("client") / 2 ** 20)} MiB from the client pod, ${num(bytes("server") / 2 ** 20)} ` +
      `MiB from the server pod over ${spliced.length} runs; ${num(passed)} messages of bypassed sockets passed to the stack); every *off* and *loopback* ` +
      "run left the counters untouched. The bench fails otherwise.",
  ];
  if (sb.errors.length) out.push("", `Errors (${sb.errors.length}): ${sb.errors.slice(0, 3).join("; ")}`);
  const g = vm?.sockBypass;
  if (g) {
    const on = g.checks.filter((c) => c.variant === "on");
    const passed = on.reduce((a, c) => a + c.client.passedMsgs + c.server.passedMsgs, 0);
    out.push(
      "",
      `In the UML guest (Linux ${vm.machine.kernel}, ${g.datapath} pods; correctness only, its timings say nothing): ` +
        `${on.length} *on* runs spliced (${num(on.reduce((a, c) => a + c.client.redirectedBytes, 0) / 2 ** 20)} MiB ` +
        `from the client pod, ${passed} messages passed to the stack), ` +
        `${g.checks.filter((c) => c.variant !== "on").length} *off* and *loopback* runs untouched` +
        (g.errors.length ? `; errors: ${g.errors.slice(0, 3).join("; ")}.` : "."),
    );
  }
  return out;
}

function sockBypassBody(r: BenchResult, vm?: BenchResult): string {
  const sb = r.sockBypass;
  if (!sb) return "_no socket bypass run on this kernel yet._";
  const rounds = `${sb.rounds} round${sb.rounds === 1 ? "" : "s"}`;
  return [
    `Run ${minute(r.startedAt)} UTC: ${sb.datapath} pods, ${rounds} × ${sb.seconds} s per test, ` +
      `sockperf ${r.machine.sockperf ?? ""}. The method (what *on*, *off* and *loopback* are, the sizes, ` +
      "where CPU is read) is in *What is measured, and how*, after these results.",
    "",
    `Each cell: the median of the per-round ratios to bypass off [min–max]. Above 1 is better for TCP_RR and ` +
      "TCP_STREAM, below 1 for round trips and CPU.",
    "",
    ...ratioTable(r, sb),
    "",
    "Medians as measured (same rounds):",
    "",
    ...mediansTable(r, sb),
    "",
    ...verdictLines(r, rounds),
    ...counterLines(sb, vm),
  ].join("\n");
}

/** `host`: the newest run on this kernel with the section; `vm`: the guest's. */
export function sockBypassSection(host: BenchResult | undefined, vm: BenchResult | undefined, img: Img): string[] {
  return [
    `### Socket bypass: on, off and host loopback (Linux ${host?.machine.kernel ?? "?"})`,
    "",
    host ? sockBypassBody(host, vm) : "_no socket bypass run on this kernel yet._",
    img("sockbypass.svg", "socket bypass against bypass off"),
  ];
}

export function sockBypassChart(r: BenchResult): string | undefined {
  const sb = r.sockBypass;
  if (!sb) return undefined;
  const series = (["on", "loopback"] as const).map((v, i) => ({
    name: SOCK_VARIANT_LABELS[v],
    color: PALETTE[i] as string,
  }));
  const groups: Group[] = [];
  for (const m of SOCK_METRICS) {
    for (const size of sb.sizes) {
      groups.push({
        label: `${m.label}, ${sizeLabel(size)}`,
        bars: (["on", "loopback"] as const).map((v, k) => {
          // Better than off is always to the right: time and CPU ratios are inverted.
          const s = m.higherIsBetter
            ? pairedRatio(sockSamples(r, v, size, m.key), sockSamples(r, "off", size, m.key))
            : pairedRatio(sockSamples(r, "off", size, m.key), sockSamples(r, v, size, m.key));
          return { series: series[k]?.name ?? "", value: s.median, lo: s.min, hi: s.max, label: x2(s.median) };
        }),
      });
    }
  }
  // p99 ratios of a noisy machine reach tens: the axis follows the medians, and longer
  // bars and whiskers stop at its end (their labels still say how far they go).
  const medians = groups.flatMap((g) => g.bars.map((b) => b.value)).filter(Number.isFinite);
  const max = Math.min(Math.ceil(Math.max(2, ...medians.filter((m) => m <= 6)) * 1.1), 8);
  return barChart({
    max,
    title: `Socket bypass on Linux ${r.machine.kernel}: against bypass off (same pods)`,
    subtitle: `median of per-round ratios, whiskers min–max; ${sb.rounds} interleaved round(s) × ${sb.seconds} s; right of 1 is better (rates: X ÷ off; times and CPU: off ÷ X)`,
    series,
    groups,
    axisLabel: "advantage over bypass off (same round)",
    refLines: [{ value: 1, label: SOCK_VARIANT_LABELS.off, color: "#222" }],
    format: (v) => v.toFixed(2),
  });
}
