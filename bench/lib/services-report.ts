/**
 * The Service traffic section of bench/README.md (bench/lib/services.ts's run): crossings
 * per TCP_RR packet of each way to a ClusterIP, and netperf rates of translation against
 * kube-proxy's DNAT and against pod to pod, as per-round ratios.
 */
import type { Placement } from "./paths";
import type { BenchResult } from "./result";
import { SERVICE_APPS, SERVICE_MODES, SERVICE_TESTS, type ServiceMode, type ServicesRun } from "./services";
import { median, pairedRatio } from "./stats";

const MODE_LABELS: Record<ServiceMode, string> = {
  translated: "ClusterIP, translated at connect (`serviceTranslation`)",
  "kube-proxy": "ClusterIP, kube-proxy's DNAT in the node (nftables)",
  pod: "the backend pod's own address",
};
const PLACEMENTS: Placement[] = ["across", "same"];
const n2 = (v: number) => (Number.isFinite(v) ? v.toFixed(2) : "n/a");

export function servicesCrossingsTable(s: ServicesRun): string {
  const cell = (m: ServiceMode, pl: Placement) => {
    const c = s.crossings.find((x) => x.mode === m && x.placement === pl);
    return c ? `${n2(c.rrRequest.total)} / ${n2(c.rrResponse.total)}` : "n/a";
  };
  return [
    "| to | across nodes (request / response) | one node (request / response) |",
    "|---|---:|---:|",
    ...SERVICE_MODES.map((m) => `| ${MODE_LABELS[m]} | ${cell(m, "across")} | ${cell(m, "same")} |`),
  ].join("\n");
}

export function servicesRatioTable(s: ServicesRun): string {
  const ratio = (num: ServiceMode, den: ServiceMode, pl: Placement, t: (typeof SERVICE_TESTS)[number]) => {
    const r = pairedRatio(s.samples[num][pl][t], s.samples[den][pl][t]);
    return r.n === 0 ? "n/a" : `${n2(r.median)}× (${n2(r.min)}–${n2(r.max)})`;
  };
  const rate = (m: ServiceMode, pl: Placement, t: (typeof SERVICE_TESTS)[number]) =>
    Math.round(median(s.samples[m][pl][t])).toLocaleString("en-US");
  const rows: string[] = [];
  for (const t of SERVICE_TESTS) {
    for (const pl of PLACEMENTS) {
      rows.push(
        `| ${t} | ${pl === "across" ? "across nodes" : "one node"} | ${rate("translated", pl, t)} | ${rate("kube-proxy", pl, t)} | ${rate("pod", pl, t)} | ${ratio("translated", "kube-proxy", pl, t)} | ${ratio("translated", "pod", pl, t)} |`,
      );
    }
  }
  return [
    "| test | placement | translated /s | kube-proxy /s | pod /s | translated ÷ kube-proxy | translated ÷ pod |",
    "|---|---|---:|---:|---:|---:|---:|",
    ...rows,
  ].join("\n");
}

const APP_LABELS = { nginx: "nginx, wrk (small page)", redis: "Redis, redis-benchmark GET" } as const;

export function servicesAppsTable(s: ServicesRun): string {
  const apps = s.apps;
  if (!apps) return "";
  const ratio = (num: ServiceMode, den: ServiceMode, app: (typeof SERVICE_APPS)[number]) => {
    const r = pairedRatio(apps[num][app], apps[den][app]);
    return r.n === 0 ? "n/a" : `${n2(r.median)}× (${n2(r.min)}–${n2(r.max)})`;
  };
  const rate = (m: ServiceMode, app: (typeof SERVICE_APPS)[number]) =>
    Math.round(median(apps[m][app])).toLocaleString("en-US");
  return [
    "| application (across nodes) | translated /s | kube-proxy /s | pod /s | translated ÷ kube-proxy | translated ÷ pod |",
    "|---|---:|---:|---:|---:|---:|",
    ...SERVICE_APPS.map(
      (a) =>
        `| ${APP_LABELS[a]} | ${rate("translated", a)} | ${rate("kube-proxy", a)} | ${rate("pod", a)} | ${ratio("translated", "kube-proxy", a)} | ${ratio("translated", "pod", a)} |`,
    ),
  ].join("\n");
}

export function servicesSection(r: BenchResult): string {
  const s = r.services;
  if (!s) return "_no Service traffic run on this kernel yet._";
  return [
    "A client pod on node A reaches a TCP server pod through a ClusterIP: translated at connect for a network with `serviceTranslation`, through DNAT rules in the node as kube-proxy's nftables mode writes them for a network without it, and straight to the pod's address. netperf's control and data connections both go through the Service.",
    "",
    `Backlog-queue crossings per TCP_RR packet (${r.settings.transactions} transactions; exact):`,
    "",
    servicesCrossingsTable(s),
    "",
    `netperf medians over ${s.rounds} interleaved rounds (TCP_RR ${s.seconds} s, TCP_CRR a fixed number of connections); ratios are medians of per-round ratios with their min–max:`,
    "",
    servicesRatioTable(s),
    ...(s.apps
      ? [
          "",
          `Applications across nodes through a ClusterIP each, the same ${s.rounds} rounds (${s.seconds} s each), medians and per-round ratios:`,
          "",
          servicesAppsTable(s),
        ]
      : []),
    ...(s.errors.length > 0 ? ["", `Errors: ${s.errors.length} (${s.errors.slice(0, 3).join("; ")}).`] : []),
  ].join("\n");
}
