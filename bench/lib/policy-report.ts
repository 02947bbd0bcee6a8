/**
 * The NetworkPolicy section of bench/README.md (bench/lib/policy.ts's run): crossings per
 * TCP_RR packet in each mode, netperf TCP_RR and TCP_CRR with policy as per-round ratios
 * to the same pods without it (and, for the tiers mode, to the selected mode too), and
 * the section's targets: crossings unchanged by policy, and by ClusterNetworkPolicy's
 * tiers beside it. Results files from before the tiers mode render without it.
 */
import type { AgentTarget } from "./agent-report";
import { pp, x2 } from "./format";
import type { Placement } from "./paths";
import {
  FLOW_VARIANTS,
  type FlowVariant,
  POLICY_MODES,
  POLICY_PLACEMENTS,
  POLICY_TESTS,
  type PolicyCrossing,
  type PolicyFlowsRun,
  type PolicyMode,
  type PolicyRun,
  type PolicyTest,
} from "./policy-result";
import { median, pairedRatio, type Summary } from "./stats";

const MODE_LABELS: Record<PolicyMode, string> = {
  off: 'off: a network without `"networkPolicy"`',
  none: "none: policy on, no policy in the pods' namespace",
  selected: `selected: policy on, a few of the policies select the pods`,
  tiers: "tiers: as selected, with 50 ClusterNetworkPolicies, a few applying to the pods",
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

/** The modes the run measured: every one but tiers in results files from before it. */
export const measuredModes = (p: PolicyRun): PolicyMode[] =>
  POLICY_MODES.filter((m) => m !== "tiers" || p.samples.tiers !== undefined || p.crossings.some((c) => c.mode === m));

const samplesOf = (p: PolicyRun, m: PolicyMode) => (m === "tiers" ? p.samples.tiers : p.samples[m]);

/**
 * Each of `modes` crosses as often as `base`, on every placement (undefined: not
 * measured). By default every mode with policy on the run measured, against off.
 */
export function crossingsUnchanged(
  p: PolicyRun,
  modes: readonly PolicyMode[] = measuredModes(p).filter((m) => m !== "off"),
  base: PolicyMode = "off",
): boolean | undefined {
  const pairs = POLICY_PLACEMENTS.flatMap((pl) =>
    modes.map((m) => [crossingOf(p, m, pl), crossingOf(p, base, pl)] as const),
  );
  if (pairs.length === 0 || pairs.every(([a, b]) => a === undefined || b === undefined)) return undefined;
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
    ...measuredModes(p).map((m) => `| ${MODE_LABELS[m]} | ${cell(m, "across")} | ${cell(m, "same")} |`),
  ].join("\n");
}

/**
 * `num` ÷ `den` (off unless told) for one test and placement: the median of per-round
 * ratios and their min–max (none where either was not measured).
 */
export function policyRatio(
  p: PolicyRun,
  num: PolicyMode,
  pl: Placement,
  t: PolicyTest,
  den: PolicyMode = "off",
): Summary {
  return pairedRatio(samplesOf(p, num)?.[pl][t] ?? [], samplesOf(p, den)?.[pl][t] ?? []);
}

const ratioText = (s: Summary) => (s.n === 0 ? "n/a" : `${x2(s.median)} (${s.min.toFixed(2)}–${s.max.toFixed(2)})`);

/** The ratios each table row gives, as [numerator, denominator]. */
const RATIOS: [PolicyMode, PolicyMode][] = [
  ["none", "off"],
  ["selected", "off"],
  ["tiers", "off"],
  ["tiers", "selected"],
];

export function policyRatioTable(p: PolicyRun): string {
  const modes = measuredModes(p);
  const ratios = RATIOS.filter(([a, b]) => modes.includes(a) && modes.includes(b));
  const rate = (m: PolicyMode, pl: Placement, t: PolicyTest) =>
    Math.round(median(samplesOf(p, m)?.[pl][t] ?? [])).toLocaleString("en-US");
  const rows = POLICY_TESTS.flatMap((t) =>
    POLICY_PLACEMENTS.map(
      (pl) =>
        `${[
          `| ${t} | ${PLACEMENT_LABELS[pl]}`,
          ...modes.map((m) => rate(m, pl, t)),
          ...ratios.map(([a, b]) => ratioText(policyRatio(p, a, pl, t, b))),
        ].join(" | ")} |`,
    ),
  );
  return [
    `${["| test | placement", ...modes.map((m) => `${m} /s`), ...ratios.map(([a, b]) => `${a} ÷ ${b}`)].join(" | ")} |`,
    `|---|---|${[...modes, ...ratios].map(() => "---:|").join("")}`,
    ...rows,
  ].join("\n");
}

/** Crossings per TCP_RR response of `modes`, per placement: "across nodes 2.00 / 2.00; one node …". */
const crossText = (p: PolicyRun, modes: readonly PolicyMode[]) =>
  POLICY_PLACEMENTS.map((pl) => {
    const counts = modes.map((m) => pp(crossingOf(p, m, pl)?.rrResponse.total));
    return `${PLACEMENT_LABELS[pl]} ${counts.join(" / ")}`;
  }).join("; ");

/** `num` ÷ `den` medians per test and placement: "TCP_RR across 0.90×, one node 0.95×; TCP_CRR …". */
const timedText = (p: PolicyRun, num: PolicyMode, den: PolicyMode) =>
  POLICY_TESTS.map(
    (t) =>
      `${t} across ${x2(policyRatio(p, num, "across", t, den).median)}, one node ${x2(policyRatio(p, num, "same", t, den).median)}`,
  ).join("; ");

/**
 * The section's targets: crossings per packet unchanged with policy, and unchanged again
 * by ClusterNetworkPolicy's tiers beside it (when measured); the timing ratios stated
 * beside them.
 */
export function policyTargets(p: PolicyRun | undefined): AgentTarget[] {
  if (!p) return [];
  const np = ["off", "none", "selected"] as const;
  const targets: AgentTarget[] = [
    {
      target: "NetworkPolicy: crossings per packet unchanged with policy (100 policies, a few selecting the pods)",
      measured: `TCP_RR off / none / selected: ${crossText(p, np)} (responses; requests alike). Timed, selected ÷ off (median of per-round ratios): ${timedText(p, "selected", "off")}`,
      met: crossingsUnchanged(p, ["none", "selected"]),
    },
  ];
  if (measuredModes(p).includes("tiers")) {
    targets.push({
      target:
        "ClusterNetworkPolicy: crossings per packet unchanged with 50 ClusterNetworkPolicies beside 100 NetworkPolicies (a few applying to the pods)",
      measured: `TCP_RR selected / tiers: ${crossText(p, ["selected", "tiers"])} (responses; requests alike). Timed (median of per-round ratios), tiers ÷ off: ${timedText(p, "tiers", "off")}; tiers ÷ selected: ${timedText(p, "tiers", "selected")}`,
      met: crossingsUnchanged(p, ["tiers"], "selected"),
    });
  }
  if (p.flows) {
    const f = p.flows;
    targets.push({
      target:
        "Flow records: crossings per packet unchanged with recording on, none lost, no measurable cost with nobody reading",
      measured: `TCP_RR off / on: ${flowCrossText(f)} (responses). Timed (median of per-round ratios): ${flowTimedText(f, "on")}; with a reader as the agent's: ${flowTimedText(f, "read")}. ${f.records.toLocaleString("en-US")} records, ${f.lost} lost, ${f.recordsPerCrrConnection.toFixed(3)} per TCP_CRR connection${f.flood ? `. Under a flood of new flows, TCP_RR across nodes on ÷ off ${x2(floodRatio(f.flood, "on").median)}, read ÷ off ${x2(floodRatio(f.flood, "read").median)}; lost with nobody reading ${f.flood.lost.on.toLocaleString("en-US")}, counted` : ""}`,
      met: flowCrossingsUnchanged(f) && f.lost === 0,
    });
  }
  return targets;
}

const flowCrossing = (f: PolicyFlowsRun, variant: "off" | "on", pl: Placement) =>
  f.crossings.find((c) => c.variant === variant && c.placement === pl);

function flowCrossingsUnchanged(f: PolicyFlowsRun): boolean {
  return POLICY_PLACEMENTS.every((pl) => {
    const [a, b] = [flowCrossing(f, "on", pl), flowCrossing(f, "off", pl)];
    return (
      a !== undefined &&
      b !== undefined &&
      Math.abs(a.rrRequest.total - b.rrRequest.total) <= SAME &&
      Math.abs(a.rrResponse.total - b.rrResponse.total) <= SAME
    );
  });
}

const flowCrossText = (f: PolicyFlowsRun) =>
  POLICY_PLACEMENTS.map(
    (pl) =>
      `${PLACEMENT_LABELS[pl]} ${pp(flowCrossing(f, "off", pl)?.rrResponse.total)} / ${pp(flowCrossing(f, "on", pl)?.rrResponse.total)}`,
  ).join("; ");

/** " Packets the flow tables counted per TCP_RR transaction: across nodes 4.01; one node 4.01." (nothing for older results) */
function countedText(f: PolicyFlowsRun): string {
  const c = f.countedPerRrTransaction;
  if (!c) return "";
  const parts = POLICY_PLACEMENTS.map((pl) => `${PLACEMENT_LABELS[pl]} ${c[pl]?.toFixed(2) ?? "-"}`);
  return ` Packets the flow tables counted per TCP_RR transaction: ${parts.join("; ")} (4: request and response, each once in the client's table and once in the server's).`;
}

const flowRatio = (f: PolicyFlowsRun, v: FlowVariant, pl: Placement, t: PolicyTest) =>
  pairedRatio(f.samples[v][pl][t], f.samples.off[pl][t]);

const flowTimedText = (f: PolicyFlowsRun, v: FlowVariant) =>
  POLICY_TESTS.map(
    (t) =>
      `${t} ${v} ÷ off across ${x2(flowRatio(f, v, "across", t).median)}, one node ${x2(flowRatio(f, v, "same", t).median)}`,
  ).join("; ");

/** Flow records' part of the section: their crossings and netperf ratios against recording off. */
function flowsLines(f: PolicyFlowsRun): string[] {
  const rows = POLICY_TESTS.flatMap((t) =>
    POLICY_PLACEMENTS.map(
      (pl) =>
        `| ${t} | ${PLACEMENT_LABELS[pl]} | ${FLOW_VARIANTS.map((v) => Math.round(median(f.samples[v][pl][t])).toLocaleString("en-US")).join(" | ")} | ${ratioText(flowRatio(f, "on", pl, t))} | ${ratioText(flowRatio(f, "read", pl, t))} |`,
    ),
  );
  return [
    `Flow records (docs/flows.md) on the selected pods: recording _off_, _on_ with nobody taking the records while measured (taken after each test), and _read_, on with a reader taking them every 100 ms as the agent does, in a process of its own. Crossings per TCP_RR response off / on: ${flowCrossText(f)}${flowCrossingsUnchanged(f) ? " (the same)" : " (**not the same**)"}. ${f.records.toLocaleString("en-US")} records taken, ${f.lost} lost, ${f.recordsPerCrrConnection.toFixed(3)} per TCP_CRR connection (the client's egress and the server's ingress).${countedText(f)}`,
    "",
    "| test | placement | off /s | on /s | read /s | on ÷ off | read ÷ off |",
    "|---|---|---:|---:|---:|---:|---:|",
    ...rows,
    ...floodLines(f),
  ];
}

const floodRatio = (flood: NonNullable<PolicyFlowsRun["flood"]>, v: FlowVariant) =>
  pairedRatio(flood.rr[v], flood.rr.off);

/** An established flow's pace under a flood of new ones, each variant (nothing for older results). */
function floodLines(f: PolicyFlowsRun): string[] {
  const flood = f.flood;
  if (!flood) return [];
  const cell = (v: FlowVariant) => Math.round(median(flood.rr[v])).toLocaleString("en-US");
  return [
    "",
    `Under a flood: TCP_RR across nodes, timed while the same client opens new TCP_CRR connections to its server on its own node as fast as it can (median ${Math.round(median(flood.floodConnections)).toLocaleString("en-US")} connections/s, two records each). Records lost to the full queue meanwhile, off / on / read: ${FLOW_VARIANTS.map((v) => flood.lost[v].toLocaleString("en-US")).join(" / ")} (counted in \`nkc_flow_lost\`; with nobody reading, the queue of 16,384 fills).`,
    "",
    "| test under flood | off /s | on /s | read /s | on ÷ off | read ÷ off |",
    "|---|---:|---:|---:|---:|---:|",
    `| TCP_RR across nodes | ${cell("off")} | ${cell("on")} | ${cell("read")} | ${ratioText(floodRatio(flood, "on"))} | ${ratioText(floodRatio(flood, "read"))} |`,
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
    ...(p.tiers ? ["", tiersLine(p.tiers)] : []),
  ];
}

const TIER_NAMES = {
  admin: "the Admin tier",
  networkPolicy: "NetworkPolicy",
  baseline: "the Baseline tier",
  none: "no tier",
};

/** The tiers mode's cluster: its policies, what its maps held, its probes, and which tier decided its flows. */
function tiersLine(t: NonNullable<PolicyRun["tiers"]>): string {
  const c = t.policies.cluster;
  const counts = c
    ? `${c.total} ClusterNetworkPolicies (${c.admin} Admin, ${c.baseline} Baseline)`
    : "no ClusterNetworkPolicy";
  const selecting = Object.entries(c?.selecting ?? {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([pod, by]) => `${pod} by ${by.join(", ")}`);
  const maps = t.maps.map(
    (m) =>
      `node ${m.node}: ${m.pods} pods on ${m.slots} slots, ${m.tiers ?? "?"} read by tiers, ${m.peers.toLocaleString("en-US")} peer and ${m.ports} port prefixes`,
  );
  const probes = t.probes.map(
    (pr) =>
      `${pr.flow} by ${pr.rule}: ${pr.refused && pr.denied > 0 ? `refused (${pr.denied} denied)` : "**not refused**"}`,
  );
  const decided = t.decided
    .filter((d) => d.verdict === "allowed")
    .map((d) => `node ${d.node} ${d.direction} ${d.flows.toLocaleString("en-US")} by ${TIER_NAMES[d.tier]}`);
  const denied = t.decided.filter((d) => d.verdict === "denied").reduce((n, d) => n + d.flows, 0);
  return `_tiers_: ${t.policies.total} policies and ${counts} in ${t.policies.namespaces.length} namespaces; ClusterNetworkPolicies selecting the pods: ${selecting.join("; ") || "none"}. The maps held ${maps.join("; ")}. Refused by the tiers: ${probes.join("; ")}. The measured flows were allowed (new flows, by the tier that decided): ${decided.join(", ") || "none"}; ${denied === 0 ? "none denied" : `**${denied} denied**`}.`;
}

function introText(tiers: boolean): string {
  const selected =
    "in a namespace whose policies select them among 100 (_selected_: 3 isolate the servers' ingress and 3 the client's egress, allowing netperf's ports; the other 94 isolate pods that exist only in the maps)";
  const tiered =
    "on a third cluster, the same pods and 100 policies with 50 ClusterNetworkPolicies beside them (_tiers_: an Admin Accept lets the client into the servers, an Admin Pass hands the client's egress to its NetworkPolicies, a Baseline Accept of the namespace matches the flows too, though the NetworkPolicies decide before it, and an Admin Deny refuses the client the servers' ssh port; the other 45 mix Admin and Baseline, priorities and actions over pods that exist only in the maps)";
  return `The same veth pods (fast path on) ${tiers ? "four" : "three"} ways: in a network without \`"networkPolicy"\`, a two-node cluster of its own (_off_); in a network enforcing policy, in a namespace where no policy is (_none_: the lookups that find none); ${tiers ? `${selected}; and ${tiered}` : `and ${selected}`}. The policies are compiled and written into the nodes' maps as the agent does.`;
}

export function policySection(p: PolicyRun | undefined, transactions: number): string {
  if (!p) return "_no NetworkPolicy run on this kernel yet._";
  const unchanged = crossingsUnchanged(p);
  return [
    introText(measuredModes(p).includes("tiers")),
    "",
    ...setupLines(p),
    "",
    `Backlog-queue crossings per TCP_RR packet (${transactions} transactions; exact): ${unchanged === undefined ? "not measured" : unchanged ? "the same in every mode" : "**not the same in every mode**"}.`,
    "",
    policyCrossingsTable(p),
    "",
    `netperf medians over ${p.rounds} interleaved rounds (TCP_RR ${p.seconds} s, TCP_CRR ${p.crrConnections.toLocaleString("en-US")} connections), every mode in each round, their order turning; ratios are medians of per-round ratios (to _off_, and _tiers_ to _selected_ too) with their min–max:`,
    "",
    policyRatioTable(p),
    ...(p.flows ? ["", ...flowsLines(p.flows)] : []),
    ...(p.errors.length > 0 ? ["", `Errors: ${p.errors.length} (${p.errors.slice(0, 3).join("; ")}).`] : []),
  ].join("\n");
}
