/**
 * The rate-limit section's part of bench/README.md (measured by bench/lib/bandwidth.ts):
 * per variant, limit and burst, how each direction was enforced, what the limited pod
 * achieved each way as a share of its limit, and the p99 of its TCP_RR beside a bulk flow
 * each way. Variants stand side by side in the same rows, measured in the same rounds;
 * this kernel's run also carries ours ÷ the reference. The guest's run gets tables of its
 * own, its figures being an interpreter's.
 */
import type { BandwidthRun, Direction } from "./bandwidth";
import { bandwidthRunOf } from "./bandwidth-older";
import { BW_VARIANT_LABELS, type BwVariant, shapeKey, shapesOf } from "./bandwidth-pods";
import { num, ratioCell } from "./format";
import type { BenchResult } from "./result";
import { median, pairedRatio, summarize } from "./stats";

/** A results file's run and how the report names it (file, commit, date). */
export interface NamedRun {
  name: string;
  r: BenchResult;
}

const FLOW: Record<Direction, string> = { egress: "a1 → b1 (egress)", ingress: "b1 → a1 (ingress)" };

/** Our modes as `netkit-cni endpoints` names them, each way. */
const ENFORCEMENT: Record<Direction, Record<string, string>> = {
  egress: { edt: "paced (EDT, fq on the uplink)", police: "policed" },
  ingress: { edt: "paced (EDT, fq on the host device)", qdisc: "shaped (tbf on the host device)", police: "policed" },
};

/**
 * The reference bandwidth plugin queues what the pod receives in a qdisc (tbf, or htb in
 * later releases) on its host veth, and what it sends in one on an ifb device the host
 * veth's ingress is redirected to.
 */
const REFERENCE: Record<Direction, string> = {
  egress: "shaped (qdisc on an ifb)",
  ingress: "shaped (qdisc on the host veth)",
};

/** How the variant enforced one direction: one mode, or each with the pods it held for. */
export function enforcement(b: BandwidthRun, v: BwVariant, dir: Direction): string {
  if (v === "reference") return REFERENCE[dir];
  const byMode = new Map<string, string[]>();
  for (const s of shapesOf(b.limits, b.burstsMs)) {
    const mode = b.modes[v]?.[shapeKey(s)]?.[dir];
    const label = mode ? (ENFORCEMENT[dir][mode] ?? mode) : "n/a";
    byMode.set(label, [...(byMode.get(label) ?? []), `${s.mbit} Mbit/s ${s.burstMs} ms`]);
  }
  if (byMode.size <= 1) return [...byMode.keys()][0] ?? "n/a";
  return [...byMode].map(([label, where]) => `${label} (${where.join(", ")})`).join("; ");
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

const ms = (burstMs: number) => `${burstMs} ms`;
const mbit = (m: number) => `${m} Mbit/s`;

export function enforcementTable(b: BandwidthRun): string {
  return [
    "| variant | the pod's egress (a1 → b1) | the pod's ingress (b1 → a1) |",
    "|---|---|---|",
    ...b.variants.map(
      (v) => `| ${BW_VARIANT_LABELS[v]} | ${enforcement(b, v, "egress")} | ${enforcement(b, v, "ingress")} |`,
    ),
  ].join("\n");
}

/** Achieved rate ÷ limit, per limit and burst, each direction's variants side by side. */
export function rateShareTable(b: BandwidthRun): string {
  const columns = (["egress", "ingress"] as const).flatMap((dir) => b.variants.map((v) => ({ dir, v })));
  const rows = [
    `| limit | burst | ${columns.map(({ dir, v }) => `${FLOW[dir]} ÷ limit: ${BW_VARIANT_LABELS[v]}`).join(" | ")} |`,
    `|---:|---:|${columns.map(() => "---:|").join("")}`,
  ];
  for (const s of shapesOf(b.limits, b.burstsMs)) {
    const cells = columns.map(({ dir, v }) => {
      const samples = b.rate[v]?.[shapeKey(s)];
      return samples ? ofLimit(samples[dir], s.mbit) : "n/a";
    });
    rows.push(`| ${mbit(s.mbit)} | ${ms(s.burstMs)} | ${cells.join(" | ")} |`);
  }
  return rows.join("\n");
}

/** Each variant's rates as measured (median [min–max]) and the senders' retransmissions. */
export function rateTable(b: BandwidthRun): string {
  const rows = [
    "| variant | limit | burst | egress (a1 → b1) Mbit/s | ingress (b1 → a1) Mbit/s | retransmits per run: egress / ingress |",
    "|---|---:|---:|---:|---:|---:|",
  ];
  for (const s of shapesOf(b.limits, b.burstsMs)) {
    for (const v of b.variants) {
      const r = b.rate[v]?.[shapeKey(s)];
      if (!r) continue;
      rows.push(
        `| ${BW_VARIANT_LABELS[v]} | ${mbit(s.mbit)} | ${ms(s.burstMs)} | ${spread(r.egress, mbitNum)} | ${spread(r.ingress, mbitNum)} | ${num(median(r.egressRetransmits))} / ${num(median(r.ingressRetransmits))} |`,
      );
    }
  }
  return rows.join("\n");
}

/**
 * TCP_RR's p99 alone and beside a bulk flow each way, per limit and burst, the variants
 * side by side; with `ratios` and a reference, ours ÷ the reference of the same rounds;
 * then what each bulk flow achieved, as a share of the limit.
 */
export function latencyTable(b: BandwidthRun, ratios: boolean): string {
  const ours = b.variants.filter((v) => v !== "reference");
  const withRatios = ratios && b.variants.includes("reference") && b.latency.reference !== undefined;
  const ratioOf = withRatios ? ours : [];
  const rows = [
    `| limit | burst | bulk flow | ${[
      ...b.variants.map((v) => `TCP_RR p99 µs: ${BW_VARIANT_LABELS[v]}`),
      ...ratioOf.map((v) => `p99 ÷ reference: ${BW_VARIANT_LABELS[v]}`),
      ...b.variants.map((v) => `bulk ÷ limit: ${BW_VARIANT_LABELS[v]}`),
    ].join(" | ")} |`,
    `|---:|---:|---|${[...b.variants, ...ratioOf, ...b.variants].map(() => "---:|").join("")}`,
  ];
  for (const s of shapesOf(b.latencyLimits, b.burstsMs)) {
    const set = (v: BwVariant) => b.latency[v]?.[shapeKey(s)];
    for (const load of [undefined, "egress", "ingress"] as const) {
      const p99 = (v: BwVariant) => {
        const l = set(v);
        return (load ? l?.loaded[load] : l?.unloaded)?.p99 ?? [];
      };
      // Older runs had no bulk flow into the pod (bandwidth-older.ts): no row rather than one of n/a.
      if (b.variants.every((v) => p99(v).length === 0)) continue;
      const cells = [
        ...b.variants.map((v) => num(median(p99(v)))),
        ...ratioOf.map((v) => ratioCell(pairedRatio(p99(v), p99("reference")))),
        ...b.variants.map((v) => (load ? ofLimit(set(v)?.loaded[load].bulk ?? [], s.mbit) : "–")),
      ];
      rows.push(`| ${mbit(s.mbit)} | ${ms(s.burstMs)} | ${load ? FLOW[load] : "none"} | ${cells.join(" | ")} |`);
    }
  }
  return rows.join("\n");
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
const bursts = (b: BandwidthRun) =>
  `${b.burstsMs.length === 1 ? "a burst" : "bursts"} of ${b.burstsMs.join(" and ")} ms at its rate`;

function errorsLine(b: BandwidthRun): string[] {
  return b.errors.length ? ["", `Errors (${b.errors.length}): ${b.errors.slice(0, 3).join("; ")}`] : [];
}

const RATE_NOTE =
  "iperf3 counts payload and the limits whole packets, a full-sized segment's payload being about 0.96 of it; " +
  "the full bucket a run starts with can add up to the burst over the run's time";

function hostPart({ name, r }: NamedRun, b: BandwidthRun): string[] {
  const reference = b.variants.includes("reference");
  return [
    `From ${name}: Linux ${r.machine.kernel}, ${b.variants.map((v) => BW_VARIANT_LABELS[v]).join(" and ")}, ` +
      `${plural(b.rounds, "interleaved round")} × ${b.seconds} s per test, each limit both ways with ${bursts(b)}` +
      (reference ? `; reference plugins: Debian containernetworking-plugins ${b.referencePackage || "?"}.` : "."),
    "",
    "**Enforced by** (ours: as `netkit-cni endpoints --json` reported it for the pods):",
    "",
    enforcementTable(b),
    "",
    `**Achieved rate ÷ limit** (iperf3, the receiver's count, median of the rounds over the limit; ${RATE_NOTE}):`,
    "",
    rateShareTable(b),
    "",
    "**Latency under load** (netperf TCP_RR from the limited pod to b1, " +
      `${b.seconds} s: alone, and 1 s into an iperf3 bulk flow through the same pod's limit, one way or the other; ` +
      "p99, median of the rounds" +
      (reference ? "; ours ÷ the reference: the median of the per-round ratios (min–max), below 1 is better; " : "; ") +
      "bulk ÷ limit: what the bulk flow got beside it):",
    "",
    latencyTable(b, true),
    "",
    "Rates as measured (median of the rounds [min–max]) and the senders' TCP retransmissions:",
    "",
    rateTable(b),
    ...errorsLine(b),
  ];
}

function guestPart({ name, r }: NamedRun, b: BandwidthRun): string[] {
  return [
    `In the UML guest, from ${name}: Linux ${r.machine.kernel}, ${b.variants.map((v) => BW_VARIANT_LABELS[v]).join(" and ")}, ` +
      `${plural(b.rounds, "round")} × ${b.seconds} s, ${bursts(b)}. **Not comparable in time with this kernel's ` +
      "figures**: the guest is an interpreter-only User-Mode Linux on one CPU (no BPF JIT, slow system calls); what " +
      "it shows is how each datapath's limits behave there.",
    "",
    enforcementTable(b),
    "",
    rateShareTable(b),
    "",
    latencyTable(b, false),
    "",
    rateTable(b),
    ...errorsLine(b),
  ];
}

/** The section: this kernel's newest run with rate limits, then the guest's. */
export function bandwidthSection(host?: NamedRun, vm?: NamedRun): string {
  const run = (n?: NamedRun) => (n?.r.bandwidth ? bandwidthRunOf(n.r.bandwidth) : undefined);
  const hb = run(host);
  const vb = run(vm);
  return [
    ...(host && hb ? hostPart(host, hb) : ["_no run on this kernel measured the rate limits yet._"]),
    "",
    ...(vm && vb ? guestPart(vm, vb) : ["_no guest run measured the rate limits yet (make bench-vm)._"]),
  ].join("\n");
}
