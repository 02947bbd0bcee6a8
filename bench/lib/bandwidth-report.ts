/**
 * The rate-limit section's part of bench/README.md (measured by bench/lib/bandwidth.ts):
 * per variant and limit, what the limited pod achieved each way against its limit, and
 * its TCP_RR latencies beside a bulk flow and without one. This kernel's run carries the
 * ratio of ours to the reference plugins, measured in the same rounds; the guest's run
 * gets tables of its own, its figures being an interpreter's.
 */
import type { BandwidthRun, LatencySamples } from "./bandwidth";
import { BW_VARIANT_LABELS, type BwVariant } from "./bandwidth-pods";
import { num, ratioCell } from "./format";
import type { BenchResult } from "./result";
import { median, pairedRatio, summarize } from "./stats";

/** A results file's run and how the report names it (file, commit, date). */
export interface NamedRun {
  name: string;
  r: BenchResult;
}

const ENFORCEMENT: Record<string, string> = { edt: "paced (EDT)", police: "policed" };

/** How the variant limits what the pod sends. */
function egressEnforcement(b: BandwidthRun, v: BwVariant, mbit: number): string {
  // The reference bandwidth plugin queues the pod's traffic in a qdisc (tbf, or htb in
  // later releases) on an ifb device the host veth's ingress is redirected to.
  if (v === "reference") return "shaped (qdisc on an ifb)";
  const mode = b.modes[v]?.[String(mbit)];
  return mode ? (ENFORCEMENT[mode] ?? mode) : "n/a";
}

/** Mbit/s below 100 keep one decimal: a 10 Mbit/s limit's 9.4 against 9.6 matters. */
const mbitNum = (v: number) => num(v, Math.abs(v) < 100 ? 1 : 0);

function spread(values: number[], format: (v: number) => string): string {
  const s = summarize(values);
  return s.n ? `${format(s.median)} [${format(s.min)}–${format(s.max)}]` : "n/a";
}

/** The median over the limit: how much of it the pod got. */
const ofLimit = (values: number[], mbit: number) => {
  const m = median(values);
  return Number.isFinite(m) ? (m / mbit).toFixed(2) : "n/a";
};

export function rateTable(b: BandwidthRun): string {
  const rows = [
    "| variant | limit | egress enforced by | egress (a1 → b1) Mbit/s | ÷ limit | ingress (b1 → a1) Mbit/s | ÷ limit | retransmits per run: egress / ingress |",
    "|---|---:|---|---:|---:|---:|---:|---:|",
  ];
  for (const mbit of b.limits) {
    for (const v of b.variants) {
      const s = b.rate[v]?.[String(mbit)];
      if (!s) continue;
      rows.push(
        `| ${BW_VARIANT_LABELS[v]} | ${mbit} Mbit/s | ${egressEnforcement(b, v, mbit)} | ${spread(s.egress, mbitNum)} | ${ofLimit(s.egress, mbit)} | ${spread(s.ingress, mbitNum)} | ${ofLimit(s.ingress, mbit)} | ${num(median(s.egressRetransmits))} / ${num(median(s.ingressRetransmits))} |`,
      );
    }
  }
  return rows.join("\n");
}

type LatencyKey = keyof LatencySamples;
const LATENCY_COLUMNS: [load: "loaded" | "unloaded", key: LatencyKey][] = [
  ["loaded", "p50"],
  ["loaded", "p90"],
  ["loaded", "p99"],
  ["unloaded", "p50"],
  ["unloaded", "p90"],
  ["unloaded", "p99"],
  ["loaded", "tps"],
  ["unloaded", "tps"],
];

/**
 * TCP_RR's percentiles and rates, loaded and unloaded, as measured; with `ratios`, one
 * row per limit for each of our variants against the reference of the same rounds.
 */
export function latencyTable(b: BandwidthRun, ratios: boolean): string {
  const rows = [
    "| variant | limit | egress enforced by | loaded p50 µs | loaded p90 µs | loaded p99 µs | unloaded p50 µs | unloaded p90 µs | unloaded p99 µs | TCP_RR/s loaded | TCP_RR/s unloaded | bulk flow Mbit/s |",
    "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  const hasReference = b.variants.includes("reference") && b.latency.reference !== undefined;
  for (const mbit of b.latencyLimits) {
    for (const v of b.variants) {
      const s = b.latency[v]?.[String(mbit)];
      if (!s) continue;
      const cells = LATENCY_COLUMNS.map(([load, key]) => num(median(s[load][key])));
      rows.push(
        `| ${BW_VARIANT_LABELS[v]} | ${mbit} Mbit/s | ${egressEnforcement(b, v, mbit)} | ${cells.join(" | ")} | ${mbitNum(median(s.loaded.bulk))} |`,
      );
    }
    const ref = b.latency.reference?.[String(mbit)];
    if (!ratios || !hasReference || !ref) continue;
    for (const v of b.variants.filter((x) => x !== "reference")) {
      const s = b.latency[v]?.[String(mbit)];
      if (!s) continue;
      const cells = LATENCY_COLUMNS.map(([load, key]) => ratioCell(pairedRatio(s[load][key], ref[load][key])));
      rows.push(
        `| ${BW_VARIANT_LABELS[v]} ÷ ${BW_VARIANT_LABELS.reference} | ${mbit} Mbit/s | – | ${cells.join(" | ")} | ${ratioCell(pairedRatio(s.loaded.bulk, ref.loaded.bulk))} |`,
      );
    }
  }
  return rows.join("\n");
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

function errorsLine(b: BandwidthRun): string[] {
  return b.errors.length ? ["", `Errors (${b.errors.length}): ${b.errors.slice(0, 3).join("; ")}`] : [];
}

function hostPart({ name, r }: NamedRun, b: BandwidthRun): string[] {
  const reference = b.variants.includes("reference");
  return [
    `From ${name}: Linux ${r.machine.kernel}, ${b.variants.map((v) => BW_VARIANT_LABELS[v]).join(" and ")}, ` +
      `${plural(b.rounds, "interleaved round")} × ${b.seconds} s per test, each limit both ways with a burst of ` +
      `${Math.round(b.burstSeconds * 1000)} ms at its rate` +
      (reference ? `; reference plugins: Debian containernetworking-plugins ${b.referencePackage || "?"}.` : "."),
    "",
    "**Achieved rate** (iperf3, the receiver's count; median of the rounds [min–max]; ÷ limit: the median over the " +
      "limit. iperf3 counts payload and the limits whole packets, a full-sized segment's payload being about 0.96 of " +
      "it; the full bucket a run starts with can add up to the burst over the run's time):",
    "",
    rateTable(b),
    "",
    `**Latency under load** (netperf TCP_RR from the limited pod to b1, ${b.seconds} s: alone, and 1 s into an ` +
      "iperf3 bulk flow from the same pod; medians of the rounds" +
      (reference
        ? `. Ratio rows: ours ÷ the reference, the median of the per-round ratios (min–max); below 1 is better for ` +
          "latencies, above 1 for transactions/s):"
        : "):"),
    "",
    latencyTable(b, true),
    ...errorsLine(b),
  ];
}

function guestPart({ name, r }: NamedRun, b: BandwidthRun): string[] {
  return [
    `In the UML guest, from ${name}: Linux ${r.machine.kernel}, ${b.variants.map((v) => BW_VARIANT_LABELS[v]).join(" and ")}, ` +
      `${plural(b.rounds, "round")} × ${b.seconds} s. **Not comparable in time with this kernel's figures**: the guest ` +
      "is an interpreter-only User-Mode Linux on one CPU (no BPF JIT, slow system calls); what it shows is how each " +
      "datapath's limits behave there.",
    "",
    rateTable(b),
    "",
    latencyTable(b, false),
    ...errorsLine(b),
  ];
}

/** The section: this kernel's newest run with rate limits, then the guest's. */
export function bandwidthSection(host?: NamedRun, vm?: NamedRun): string {
  const hb = host?.r.bandwidth;
  const vb = vm?.r.bandwidth;
  return [
    ...(host && hb ? hostPart(host, hb) : ["_no run on this kernel measured the rate limits yet._"]),
    "",
    ...(vm && vb ? guestPart(vm, vb) : ["_no guest run measured the rate limits yet (make bench-vm)._"]),
  ].join("\n");
}
