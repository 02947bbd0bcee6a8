/**
 * `netkit-cni endpoints`: the pods this node's plugin wired, one row each (as
 * commands/endpoints.ts reads them): container,
 * interface, host device and its kind, addresses, the fast-path counters that say which
 * path their packets took and why refused ones were refused, and how full its direct-flow table is (entries held, and what
 * the LRU evicted), how many of its sockets the socket bypass splices now (SPLICED) and
 * how many it refused (OVER BOUND: the pod held as many as one pod may; FOREIGN NS: a
 * socket on the pod's address made in another network namespace), its own Service
 * translation state (the Services its affinity holds, of the 32 a pod may; sockets left
 * to the stack without socket state; what it gave up of its own to make room), and its
 * rate limits: how they are enforced (police), the rates, and what they dropped.
 * Read-only; run in the node's network namespace.
 */
import type { PodLimits } from "../bpf/index";
import type { EndpointRow, PolicyState } from "../commands/endpoints";
import { formatDrops } from "./status-format";

/** "in,out denied 3": which ways the policy isolates the pod, and the new flows it denied. */
function formatPolicy(p: PolicyState | undefined): string {
  if (!p) return "-";
  const isolated = [p.ingress ? "in" : "", p.egress ? "out" : ""].filter(Boolean).join(",");
  const ways = p.pending ? "pending" : p.incomplete ? `${isolated}:closed` : isolated || "open";
  return `${ways} denied ${p.denied.ingress + p.denied.egress}`;
}

export function formatEndpoints(rows: EndpointRow[]): string {
  const header = [
    "CONTAINER",
    "IFNAME",
    "HOST DEVICE",
    "DATAPATH",
    "ADDRESSES",
    "BPF",
    "REDIRECTED",
    "STACK",
    "DROPPED",
    "WHY",
    "FLOWS",
    "EVICTED",
    "SPLICED",
    "OVER BOUND",
    "FOREIGN NS",
    "LIMITS",
    "LIMIT DROPS",
    "SVC AFFINITY",
    "SVC NO STATE",
    "SVC GIVEN UP",
    "POLICY",
  ];
  const table = rows.map((r) => {
    const c = r.counters;
    const redirected = c ? c.redirectedLocal + c.redirectedFib + c.redirectedNeigh + c.redirectedPeer : 0;
    return [
      r.containerId.slice(0, 12),
      r.ifname,
      r.hostDevice,
      r.datapath,
      r.addresses.join(",") || "-",
      r.programsAttached ? "yes" : "no",
      String(redirected),
      String(c ? c.passedStack + c.passedStackUnproven : 0),
      String(c ? c.droppedSpoofed + c.droppedOther : 0),
      formatDrops(r.drops),
      r.flowTable ? `${r.flowTable.entries}/${r.flowTable.capacity}` : "-",
      r.flowTable ? String(r.flowTable.evicted) : "-",
      String(r.bypassedSockets),
      r.sockRecord ? String(r.sockRecord.refusedBound) : "-",
      r.sockRecord ? String(r.sockRecord.refusedNetns) : "-",
      formatLimits(r.limits),
      r.limits ? String((r.limits.ingress?.dropped ?? 0) + (r.limits.egress?.dropped ?? 0)) : "-",
      r.services ? `${r.services.affinityHeld}/${r.services.affinityCapacity}` : "-",
      r.services ? String(r.services.noSocketState) : "-",
      r.services ? `sockets ${r.services.socketReplaced} affinity ${r.services.affinityReplaced}` : "-",
      formatPolicy(r.policy),
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]?.length ?? 0)));
  return [header, ...table]
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

/** "in 10M edt out -": each direction's rate in bits per second and how it is enforced. */
function formatLimits(limits: PodLimits | undefined): string {
  if (!limits) return "-";
  const dir = (l: { rate: number } | undefined, mode: string | undefined) =>
    l ? `${bits(l.rate)} ${mode ?? "?"}` : "-";
  return `in ${dir(limits.ingress, limits.ingressMode)} out ${dir(limits.egress, limits.mode)}`;
}

function bits(n: number): string {
  for (const [unit, size] of [
    ["G", 1e9],
    ["M", 1e6],
    ["k", 1e3],
  ] as const) {
    if (n >= size) return `${Number((n / size).toFixed(2))}${unit}`;
  }
  return String(n);
}
