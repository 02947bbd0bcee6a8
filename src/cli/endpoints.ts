/**
 * `netkit-cni endpoints`: the pods this node's plugin wired, one row each (as
 * commands/endpoints.ts reads them). The default table keeps to what is read at a
 * glance: the pod (its namespace/name where ADD recorded them, else its container),
 * interface, datapath, addresses, the fast-path counters (redirected, to the stack,
 * dropped) and its NetworkPolicy. `-o wide` shows every column: the container and host
 * device too, whether its programs are attached, why refused frames were refused, how
 * full its direct-flow table is (entries held, and what the LRU evicted), how many of its
 * sockets the socket bypass splices now (SPLICED) and how many it refused (OVER BOUND:
 * the pod held as many as one pod may; FOREIGN NS: a socket on the pod's address made in
 * another network namespace), its rate limits (how they are enforced, the rates, what
 * they dropped) and its own Service translation state (the Services its affinity holds,
 * of the 32 a pod may; sockets left to the stack without socket state; what it gave up of
 * its own to make room). Read-only; run in the node's network namespace.
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

/** A row as the CLI shows it: the commands' facts and, where ADD recorded them, the pod's "namespace/name". */
export type EndpointView = EndpointRow & { pod?: string };

/** `rows` with the pod names ADD recorded (podNames: by "<containerId>/<ifname>"). */
export function withPodNames(
  rows: EndpointRow[],
  names: Map<string, { namespace: string | undefined; name: string | undefined }>,
): EndpointView[] {
  return rows.map((r) => {
    const n = names.get(`${r.containerId}/${r.ifname}`);
    return n?.namespace && n.name ? { ...r, pod: `${n.namespace}/${n.name}` } : r;
  });
}

const redirected = (c: EndpointRow["counters"]) =>
  c ? c.redirectedLocal + c.redirectedFib + c.redirectedNeigh + c.redirectedPeer : 0;

/** Each column: its header, its cell, and whether the default table shows it (else only -o wide). */
const COLUMNS: { header: string; narrow: boolean; cell: (r: EndpointView) => string }[] = [
  { header: "POD", narrow: true, cell: (r) => r.pod ?? r.containerId.slice(0, 12) },
  { header: "CONTAINER", narrow: false, cell: (r) => r.containerId.slice(0, 12) },
  { header: "IFNAME", narrow: true, cell: (r) => r.ifname },
  { header: "HOST DEVICE", narrow: false, cell: (r) => r.hostDevice },
  { header: "DATAPATH", narrow: true, cell: (r) => r.datapath },
  { header: "ADDRESSES", narrow: true, cell: (r) => r.addresses.join(",") || "-" },
  { header: "BPF", narrow: false, cell: (r) => (r.programsAttached ? "yes" : "no") },
  { header: "REDIRECTED", narrow: true, cell: (r) => String(redirected(r.counters)) },
  {
    header: "STACK",
    narrow: true,
    cell: (r) => String(r.counters ? r.counters.passedStack + r.counters.passedStackUnproven : 0),
  },
  {
    header: "DROPPED",
    narrow: true,
    cell: (r) => String(r.counters ? r.counters.droppedSpoofed + r.counters.droppedOther : 0),
  },
  { header: "WHY", narrow: false, cell: (r) => formatDrops(r.drops) },
  {
    header: "FLOWS",
    narrow: false,
    cell: (r) => (r.flowTable ? `${r.flowTable.entries}/${r.flowTable.capacity}` : "-"),
  },
  { header: "EVICTED", narrow: false, cell: (r) => (r.flowTable ? String(r.flowTable.evicted) : "-") },
  { header: "SPLICED", narrow: false, cell: (r) => String(r.bypassedSockets) },
  { header: "OVER BOUND", narrow: false, cell: (r) => (r.sockRecord ? String(r.sockRecord.refusedBound) : "-") },
  { header: "FOREIGN NS", narrow: false, cell: (r) => (r.sockRecord ? String(r.sockRecord.refusedNetns) : "-") },
  { header: "LIMITS", narrow: false, cell: (r) => formatLimits(r.limits) },
  {
    header: "LIMIT DROPS",
    narrow: false,
    cell: (r) => (r.limits ? String((r.limits.ingress?.dropped ?? 0) + (r.limits.egress?.dropped ?? 0)) : "-"),
  },
  {
    header: "SVC AFFINITY",
    narrow: false,
    cell: (r) => (r.services ? `${r.services.affinityHeld}/${r.services.affinityCapacity}` : "-"),
  },
  { header: "SVC NO STATE", narrow: false, cell: (r) => (r.services ? String(r.services.noSocketState) : "-") },
  {
    header: "SVC GIVEN UP",
    narrow: false,
    cell: (r) => (r.services ? `sockets ${r.services.socketReplaced} affinity ${r.services.affinityReplaced}` : "-"),
  },
  { header: "POLICY", narrow: true, cell: (r) => formatPolicy(r.policy) },
];

/**
 * The table: by default the columns read at a glance (POD, IFNAME, DATAPATH, ADDRESSES,
 * REDIRECTED, STACK, DROPPED, POLICY), the same for every row whatever it holds; `wide`
 * every column.
 */
export function formatEndpoints(rows: EndpointView[], wide = false): string {
  const columns = COLUMNS.filter((c) => wide || c.narrow);
  const header = columns.map((c) => c.header);
  const table = rows.map((r) => columns.map((c) => c.cell(r)));
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
