/**
 * The NetworkPolicy section of bench/README.md (bench/lib/policy.ts's run): crossings per
 * TCP_RR packet in each mode, netperf TCP_RR and TCP_CRR with policy as per-round ratios
 * to the same pods without it, and the section's target: crossings unchanged by policy.
 */
import type { AgentTarget } from "./agent-report";
import { pp, x2 } from "./format";
import type { Placement } from "./paths";
import {
  POLICY_MODES,
  POLICY_PLACEMENTS,
  POLICY_TESTS,
  type PolicyCrossing,
  type PolicyMode,
  type PolicyRun,
  type PolicyTest,
} from "./policy-result";
import { median, pairedRatio, type Summary } from "./stats";

const MODE_LABELS: Record<PolicyMode, string> = {
  off: 'off: a network without `"networkPolicy"`',
  none: "none: policy on, no policy in the pods' namespace",
  selected: `selected: policy on, a few of the policies select the pods`,
};
const PLACEMENT_LABELS: Record<Placement, string> = { across: "across nodes", same: "one node" };

/** Crossings per packet within this of off's count the same (they are counts ÷ 1000 packets). */
const SAME = 0.02;

const crossingOf = (p: PolicyRun, mode: PolicyMode, placement: Placement) =>
  p.crossings.find((c) => c.mode === mode && c.placement === placement);

const same = (a: PolicyCrossing | undefined, b: PolicyCrossing | undefined) =>
  a !== undefined &&
  b !== undefined &&
  Math.abs(a.rrRequest.total - b.rrRequest.total) <= SAME &&
  Math.abs(a.rrResponse.total - b.rrResponse.total) <= SAME;

/** Every mode with policy on crosses as often as off, on every placement (undefined: not measured). */
export function crossingsUnchanged(p: PolicyRun): boolean | undefined {
  const pairs = POLICY_PLACEMENTS.flatMap((pl) =>
    (["none", "selected"] as const).map((m) => [crossingOf(p, m, pl), crossingOf(p, "off", pl)] as const),
  );
  if (pairs.every(([a, b]) => a === undefined || b === undefined)) return undefined;
  return pairs.every(([a, b]) => same(a, b));
}

export function policyCrossingsTable(p: PolicyRun): string {
  const cell = (m: PolicyMode, pl: Placement) => {
    const c = crossingOf(p, m, pl);
    return c ? `${pp(c.rrRequest.total)} / ${pp(c.rrResponse.total)}` : "n/a";
  };
  return [
    "| mode | across nodes (request / response) | one node (request / response) |",
    "|---|---:|---:|",
    ...POLICY_MODES.map((m) => `| ${MODE_LABELS[m]} | ${cell(m, "across")} | ${cell(m, "same")} |`),
  ].join("\n");
}

/** `num` ÷ off for one test and placement: the median of per-round ratios and their min–max. */
export function policyRatio(p: PolicyRun, num: PolicyMode, pl: Placement, t: PolicyTest): Summary {
  return pairedRatio(p.samples[num][pl][t], p.samples.off[pl][t]);
}

const ratioText = (s: Summary) => (s.n === 0 ? "n/a" : `${x2(s.median)} (${s.min.toFixed(2)}–${s.max.toFixed(2)})`);

export function policyRatioTable(p: PolicyRun): string {
  const rate = (m: PolicyMode, pl: Placement, t: PolicyTest) =>
    Math.round(median(p.samples[m][pl][t])).toLocaleString("en-US");
  const rows = POLICY_TESTS.flatMap((t) =>
    POLICY_PLACEMENTS.map(
      (pl) =>
        `| ${t} | ${PLACEMENT_LABELS[pl]} | ${rate("off", pl, t)} | ${rate("none", pl, t)} | ${rate("selected", pl, t)} | ${ratioText(policyRatio(p, "none", pl, t))} | ${ratioText(policyRatio(p, "selected", pl, t))} |`,
    ),
  );
  return [
    "| test | placement | off /s | none /s | selected /s | none ÷ off | selected ÷ off |",
    "|---|---|---:|---:|---:|---:|---:|",
    ...rows,
  ].join("\n");
}

/** The section's target: crossings per packet unchanged with policy; the timing ratios stated beside it. */
export function policyTargets(p: PolicyRun | undefined): AgentTarget[] {
  if (!p) return [];
  const cross = POLICY_PLACEMENTS.map((pl) => {
    const counts = POLICY_MODES.map((m) => pp(crossingOf(p, m, pl)?.rrResponse.total));
    return `${PLACEMENT_LABELS[pl]} ${counts.join(" / ")}`;
  });
  const timed = POLICY_TESTS.map(
    (t) =>
      `${t} across ${x2(policyRatio(p, "selected", "across", t).median)}, one node ${x2(policyRatio(p, "selected", "same", t).median)}`,
  );
  return [
    {
      target: "NetworkPolicy: crossings per packet unchanged with policy (100 policies, a few selecting the pods)",
      measured: `TCP_RR off / none / selected: ${cross.join("; ")} (responses; requests alike). Timed, selected ÷ off (median of per-round ratios): ${timed.join("; ")}`,
      met: crossingsUnchanged(p),
    },
  ];
}

function setupLines(p: PolicyRun): string[] {
  const selecting = Object.entries(p.policies.selecting)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([pod, by]) => `${pod} by ${by.length}`);
  const maps = p.maps.map(
    (m) =>
      `node ${m.node}: ${m.pods} pods on ${m.slots} slots, ${m.peers.toLocaleString("en-US")} peer and ${m.ports} port prefixes`,
  );
  const probe = p.probe.refused ? `refused (${p.probe.deniedEgress} denied by the client's egress)` : "**not refused**";
  return [
    `${p.policies.total} policies in ${p.policies.namespaces.length} namespaces; selected: ${selecting.join(", ")}. The maps held ${maps.join("; ")}. A connection from the selected client that no rule allows: ${probe}.`,
  ];
}

export function policySection(p: PolicyRun | undefined, transactions: number): string {
  if (!p) return "_no NetworkPolicy run on this kernel yet._";
  const unchanged = crossingsUnchanged(p);
  return [
    "The same veth pods (fast path on) three ways: in a network without `\"networkPolicy\"`, a two-node cluster of its own (_off_); in a network enforcing policy, in a namespace where no policy is (_none_: the lookups that find none); and in a namespace whose policies select them among 100 (_selected_: 3 isolate the servers' ingress and 3 the client's egress, allowing netperf's ports; the other 94 isolate pods that exist only in the maps). The policies are compiled and written into the nodes' maps as the agent does.",
    "",
    ...setupLines(p),
    "",
    `Backlog-queue crossings per TCP_RR packet (${transactions} transactions; exact): ${unchanged === undefined ? "not measured" : unchanged ? "the same in every mode" : "**not the same in every mode**"}.`,
    "",
    policyCrossingsTable(p),
    "",
    `netperf medians over ${p.rounds} interleaved rounds (TCP_RR ${p.seconds} s, TCP_CRR ${p.crrConnections.toLocaleString("en-US")} connections), every mode in each round, their order turning; ratios are medians of per-round ratios to _off_ with their min–max:`,
    "",
    policyRatioTable(p),
    ...(p.errors.length > 0 ? ["", `Errors: ${p.errors.length} (${p.errors.slice(0, 3).join("; ")}).`] : []),
  ].join("\n");
}
