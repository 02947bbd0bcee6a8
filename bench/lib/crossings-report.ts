/**
 * The crossings section of bench/README.md (bench/lib/crossings.ts's counts): backlog-queue
 * crossings per packet of every path, split by where the packet was queued, on this kernel
 * and in the UML guest, and their chart.
 */
import { type Img, pp } from "./format";
import { PATH_LABELS } from "./paths";
import type { BenchResult } from "./result";
import { crossing } from "./run-figures";
import { barChart, type Group, PALETTE } from "./svg";

/** Every path with crossing counts in each run, with its across-nodes and one-node counts. */
function* crossingPaths(runs: [label: string, r: BenchResult | undefined][]) {
  for (const [label, r] of runs) {
    if (!r?.crossings) continue;
    for (const id of r.paths ?? []) {
      const a = crossing(r, id, "across");
      const s = crossing(r, id, "same");
      if (a || s) yield { label, id, a, s };
    }
  }
}

function crossingsTable(host?: BenchResult, vm?: BenchResult): string {
  const rows: string[] = [
    "| kernel | path | across nodes: per packet | out of pod (pod→wire) | wire | into pod (wire→pod) | TCP_RR across: request / response | one node: per packet | TCP_RR one node: request / response |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const { label, id, a, s } of crossingPaths([
    ["this kernel", host],
    ["UML guest", vm],
  ])) {
    rows.push(
      `| ${label} | ${PATH_LABELS[id]} | **${pp(a?.ping.total)}** | ${pp(a?.ping.hops.outOfPod)} | ${pp(a?.ping.hops.wire)} | ${pp(a?.ping.hops.intoPod)} | ${pp(a?.rrRequest.total)} / ${pp(a?.rrResponse.total)} | **${pp(s?.ping.total)}** | ${pp(s?.rrRequest.total)} / ${pp(s?.rrResponse.total)} |`,
    );
  }
  return rows.join("\n");
}

function lostNote(host?: BenchResult, vm?: BenchResult): string {
  const lost = [...(host?.crossings ?? []), ...(vm?.crossings ?? [])].reduce((a, c) => a + c.lostEvents, 0);
  return lost > 0
    ? `\n**Warning:** ${lost} trace events were lost (tracefs buffer overrun); rows with lost events undercount.\n`
    : "";
}

export function crossingsSection(host: BenchResult | undefined, vm: BenchResult | undefined, img: Img): string[] {
  return [
    "### Backlog-queue crossings per packet (net:netif_rx; exact, not noise)",
    "",
    `Per packet: events ÷ packets, for ${host?.settings.pings ?? vm?.settings.pings} pings (1400 B, both directions) and ${host?.settings.transactions ?? vm?.settings.transactions} TCP_RR transactions (1000 B requests, 1200 B responses). ` +
      "Split by where the packet was queued: *out of pod* = a node-side pod device (the pod's own transmit crossing), *wire* = the node's uplink, *into pod* = the pod's eth0 (the host → pod crossing that `bpf_redirect_peer` removes).",
    "",
    crossingsTable(host, vm),
    lostNote(host, vm),
    img("crossings.svg", "crossings per packet"),
  ];
}

export function crossingsChart(host?: BenchResult, vm?: BenchResult): string | undefined {
  const groups: Group[] = [
    ...crossingPaths([
      ["this kernel", host],
      ["UML guest, netkit kernel", vm],
    ]),
  ].map(({ label, id, a, s }) => ({
    label: PATH_LABELS[id],
    sublabel: label,
    bars: [
      { series: "across nodes", value: a?.ping.total ?? Number.NaN },
      { series: "one node", value: s?.ping.total ?? Number.NaN },
    ],
  }));
  if (!groups.length) return undefined;
  const hostAcross = crossing(host ?? vm, "host", "across")?.ping.total;
  return barChart({
    title: "Backlog-queue crossings per packet (net:netif_rx)",
    subtitle: "ping, 1400 B, both directions; exact counts, lower is better; dashed: host ↔ host across nodes",
    series: [
      { name: "across nodes", color: PALETTE[0] as string },
      { name: "one node", color: PALETTE[1] as string },
    ],
    groups,
    axisLabel: "netif_rx events per packet",
    refLines: hostAcross ? [{ value: hostAcross, label: "host" }] : [],
  });
}
