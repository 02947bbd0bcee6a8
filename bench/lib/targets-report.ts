/**
 * The targets at the top of bench/README.md's results, each judged from the newest run
 * that measured it: crossings per packet, netperf against bridge, the control plane
 * against ptp, peak RSS. The agent's targets are its own section's (agent-report.ts).
 */
import type { AgentTarget } from "./agent-report";
import { CP_LABELS } from "./control-plane";
import { mb, ms, pp, x2 } from "./format";
import { PLACEMENT_LABELS } from "./paths";
import type { BenchResult } from "./result";
import { crossing, samplesOf, stormMean } from "./run-figures";
import { pairedRatio } from "./stats";

const RSS_TARGET_KB = 80 * 1024;
export const RR_TARGET = 1.15;
/** A pod's ADD+DEL and a storm's wall time against ptp + host-local's, side by side. */
export const CYCLE_TARGET = 1.5;
export const STORM_TARGET = 2;

/** A target, what the run measured, and whether that meets it (undefined: not measured). */
export type Target = AgentTarget;

const near = (a: number | undefined, b: number | undefined) =>
  a !== undefined && b !== undefined && Math.abs(a - b) <= 0.02;

/** netkit's crossings in the guest: host processes' across nodes, one on one node. */
function netkitCrossingTargets(vm?: BenchResult): Target[] {
  const nk = crossing(vm, "netkit", "across");
  const h = crossing(vm, "host", "across");
  const s = crossing(vm, "netkit", "same");
  return [
    {
      target: "netkit across nodes: crossings per packet = host ↔ host, both ways",
      measured: nk
        ? `netkit ${pp(nk.ping.total)} vs host ${pp(h?.ping.total)} (ping); TCP_RR request ${pp(nk.rrRequest.total)} vs ${pp(h?.rrRequest.total)}, response ${pp(nk.rrResponse.total)} vs ${pp(h?.rrResponse.total)}`
        : "no UML run",
      met: nk
        ? near(nk.ping.total, h?.ping.total) &&
          near(nk.rrRequest.total, h?.rrRequest.total) &&
          near(nk.rrResponse.total, h?.rrResponse.total)
        : undefined,
    },
    {
      target: "netkit one node pod → pod: one crossing per packet",
      measured: s
        ? `${pp(s.ping.total)} (ping), TCP_RR ${pp(s.rrRequest.total)} / ${pp(s.rrResponse.total)}; plain netkit ${pp(crossing(vm, "netkit-plain", "same")?.ping.total)}`
        : "no UML run",
      met: s ? near(s.ping.total, 1) && near(s.rrRequest.total, 1) && near(s.rrResponse.total, 1) : undefined,
    },
  ];
}

/** The veth fast path's crossings on each kernel: none into the pod beyond the host's. */
function vethCrossingTargets(host?: BenchResult, vm?: BenchResult): Target[] {
  const out: Target[] = [];
  for (const [label, r] of [
    ["this kernel", host],
    ["UML guest", vm],
  ] as const) {
    const v = crossing(r, "veth", "across");
    const h = crossing(r, "host", "across");
    if (!v || !h) continue;
    out.push({
      target: `veth datapath (${label}): no crossing on wire → pod beyond host's`,
      measured: `into pod ${pp(v.ping.hops.intoPod)} per packet; wire ${pp(v.ping.hops.wire)} vs host ${pp(h.ping.hops.wire)} (pod → wire adds ${pp(v.ping.hops.outOfPod)}, the veth xmit the design keeps)`,
      met: v.ping.hops.intoPod <= 0.02 && v.ping.hops.wire <= h.ping.hops.wire + 0.02,
    });
  }
  return out;
}

function netperfTargets(host?: BenchResult): Target[] {
  const out: Target[] = [];
  if (!host?.netperf) return out;
  for (const t of ["TCP_RR", "TCP_CRR"] as const) {
    for (const pl of host.netperf.placements) {
      const s = pairedRatio(samplesOf(host, "veth", pl, t), samplesOf(host, "bridge", pl, t));
      // Host processes pay no pod crossing at all: the most any pod datapath can reach.
      const ceiling = pairedRatio(samplesOf(host, "host", pl, t), samplesOf(host, "bridge", pl, t));
      out.push({
        target: `netperf ${t} ${PLACEMENT_LABELS[pl]}: veth datapath ≥ ${RR_TARGET}× bridge`,
        measured: s.n
          ? `${x2(s.median)} (per-round ${s.min.toFixed(2)}–${s.max.toFixed(2)}); host ↔ host itself: ${ceiling.n ? x2(ceiling.median) : "n/a"}`
          : "n/a",
        met: s.n ? s.median >= RR_TARGET : undefined,
      });
    }
  }
  return out;
}

const OURS = ["ours-embedded", "ours-node", "ours-host-local"] as const;

function controlPlaneTargets(host?: BenchResult): Target[] {
  const out: Target[] = [];
  const cp = host?.controlPlane;
  if (!host || !cp?.cycles.ptp) return out;
  const ptp = cp.cycles.ptp;
  for (const id of OURS) {
    const c = cp.cycles[id];
    if (!c) continue;
    out.push({
      target: `ADD+DEL p50 ≤ ${CYCLE_TARGET}× ptp + host-local (${CP_LABELS[id]})`,
      measured: `${ms(c.cycle.median)} vs ${ms(ptp.cycle.median)}: ${x2(c.cycle.median / ptp.cycle.median)}`,
      met: c.cycle.median <= CYCLE_TARGET * ptp.cycle.median,
    });
  }
  const ps = stormMean(host, "ptp");
  for (const id of OURS) {
    const st = stormMean(host, id);
    if (!st.walls.length) continue;
    out.push({
      target: `storm wall ≤ ${STORM_TARGET}× ptp's, zero failures (${CP_LABELS[id]})`,
      measured: `${ms(st.wall)} vs ${ms(ps.wall)}: ${x2(st.wall / ps.wall)}, ${st.failures} failures`,
      met: st.wall <= STORM_TARGET * ps.wall && st.failures === 0,
    });
  }
  return [...out, ...rssTargets(host)];
}

function rssTargets(host: BenchResult): Target[] {
  const cp = host.controlPlane;
  const peaks = OURS.flatMap((id) => {
    const r = cp?.rss[id];
    return r ? [r.addKb.max, r.delKb.max] : [];
  });
  if (!peaks.length) return [];
  const peak = Math.max(...peaks);
  return [
    {
      target: "peak RSS of one invocation ≤ 80 MiB",
      measured: `${mb(peak)} (largest of the ADD and DEL runs)`,
      met: peak <= RSS_TARGET_KB,
    },
  ];
}

export function targets(host?: BenchResult, vm?: BenchResult): Target[] {
  return [
    ...netkitCrossingTargets(vm),
    ...vethCrossingTargets(host, vm),
    ...netperfTargets(host),
    ...controlPlaneTargets(host),
  ];
}

export function targetsSection(t: Target[]): string[] {
  return [
    "### Targets",
    "",
    [
      "| target | measured | met |",
      "|---|---|:---:|",
      ...t.map((x) => `| ${x.target} | ${x.measured} | ${x.met === undefined ? "–" : x.met ? "yes" : "**no**"} |`),
    ].join("\n"),
    "",
  ];
}
