/**
 * The agent section of bench/README.md (bench/lib/agent-scale.ts's run): first sync, one
 * change's latency and memory per cluster size, and the agent's targets.
 */
import type { AgentScaleRun, NodeScale, ServiceScale } from "./agent-scale";
import { median } from "./stats";

/** One change in effect, at 5,000 Services or 4,000 Nodes. */
export const CHANGE_TARGET_MS = 100;
/** From 500 to 15,000 Services, one change grows less than this. */
export const GROWTH_TARGET = 2;
/** At 5,000 Services × 10 endpoints. */
export const SETTLED_RSS_TARGET_MB = 150;
export const PEAK_ABOVE_SETTLED_TARGET_MB = 50;

const ms = (v: number) => (Number.isFinite(v) ? `${Math.round(v)} ms` : "n/a");
const spread = (v: number[]) =>
  v.length === 0 ? "n/a" : `${ms(median(v))} (${Math.round(Math.min(...v))}–${Math.round(Math.max(...v))})`;
const count = (n: number) => n.toLocaleString("en-US");

export interface AgentTarget {
  target: string;
  measured: string;
  met: boolean | undefined;
}

export function agentTargets(a: AgentScaleRun | undefined): AgentTarget[] {
  if (!a) return [];
  const out: AgentTarget[] = [];
  const svc = (n: number) => a.services.find((s) => s.services === n);
  const s5k = svc(5000);
  if (s5k) {
    const all = [...s5k.addMs, ...s5k.withdrawMs];
    out.push({
      target: `one Service or EndpointSlice change in effect ≤ ${CHANGE_TARGET_MS} ms at 5,000 Services (median)`,
      measured: `added ${spread(s5k.addMs)}, withdrawn ${spread(s5k.withdrawMs)}`,
      met: all.length > 0 && median(all) <= CHANGE_TARGET_MS,
    });
    out.push({
      target: `settled RSS ≤ ${SETTLED_RSS_TARGET_MB} MB, peak ≤ settled + ${PEAK_ABOVE_SETTLED_TARGET_MB} MB at 5,000 Services × 10`,
      measured: `settled ${s5k.rss.settledMb} MB, peak ${s5k.rss.peakMb} MB`,
      met:
        s5k.rss.settledMb <= SETTLED_RSS_TARGET_MB &&
        s5k.rss.peakMb <= s5k.rss.settledMb + PEAK_ABOVE_SETTLED_TARGET_MB,
    });
  }
  const small = svc(500);
  const large = svc(15000);
  if (small && large) {
    const g = median([...large.addMs, ...large.withdrawMs]) / median([...small.addMs, ...small.withdrawMs]);
    out.push({
      target: `one change grows < ${GROWTH_TARGET}× from 500 to 15,000 Services (medians)`,
      measured: `${g.toFixed(2)}×`,
      met: g < GROWTH_TARGET,
    });
  }
  const n4k = a.nodes.find((n) => n.nodes === 4000);
  if (n4k) {
    const all = [...n4k.addMs, ...n4k.moveMs, ...n4k.deleteMs];
    out.push({
      target: `one Node change in effect ≤ ${CHANGE_TARGET_MS} ms at 4,000 Nodes (median)`,
      measured: `added ${spread(n4k.addMs)}, moved ${spread(n4k.moveMs)}, deleted ${spread(n4k.deleteMs)}`,
      met: all.length > 0 && median(all) <= CHANGE_TARGET_MS,
    });
  }
  return out;
}

function servicesTable(rows: ServiceScale[]): string {
  return [
    "| Services × endpoints | first sync | Service added (median, min–max) | backend withdrawn | RSS after sync | settled | peak |",
    "|---|---:|---:|---:|---:|---:|---:|",
    ...rows.map(
      (s) =>
        `| ${count(s.services)} × ${s.endpoints} | ${ms(s.firstSyncMs)} | ${spread(s.addMs)} | ${spread(s.withdrawMs)} | ${s.rss.afterSyncMb} MB | ${s.rss.settledMb} MB | ${s.rss.peakMb} MB |`,
    ),
  ].join("\n");
}

function nodesTable(rows: NodeScale[]): string {
  return [
    "| Nodes | first sync | Node added (median, min–max) | moved | deleted | RSS after sync | settled | peak |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
    ...rows.map(
      (n) =>
        `| ${count(n.nodes)} | ${ms(n.firstSyncMs)} | ${spread(n.addMs)} | ${spread(n.moveMs)} | ${spread(n.deleteMs)} | ${n.rss.afterSyncMb} MB | ${n.rss.settledMb} MB | ${n.rss.peakMb} MB |`,
    ),
  ].join("\n");
}

export function agentSection(a: AgentScaleRun | undefined): string {
  if (!a) return "_no agent run on this kernel yet._";
  const changes = a.services[0]?.addMs.length ?? a.nodes[0]?.addMs.length ?? 0;
  return [
    "One `netkit-cni agent` (the Bun executable) against the stand-in API holding the objects, in a node namespace of its own. *First sync*: from its start until the tables hold every Service (or until it is synced: conflist and every route). Then one change at a time, " +
      `${changes} of each, timed from the API write: a new Service until a pod's connect to its ClusterIP reaches its backend pod, and that backend withdrawn for another until a connect reaches the other (no new connection reaches the withdrawn one after that); a Node added, its InternalIP moved and the Node deleted, until rtnetlink announces the route's change. ` +
      `RSS right after the first sync, ${a.settleSeconds} s later (settled), and the most it held (VmHWM).`,
    "",
    a.services.length > 0 ? servicesTable(a.services) : "_no Service sizes measured._",
    "",
    a.nodes.length > 0 ? nodesTable(a.nodes) : "_no Node sizes measured._",
    ...(a.errors.length > 0 ? ["", `Errors: ${a.errors.length} (${a.errors.slice(0, 3).join("; ")}).`] : []),
  ].join("\n");
}
