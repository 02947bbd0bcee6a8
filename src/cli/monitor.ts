/**
 * `netkit-cni monitor`: NetworkPolicy's drops as they happen, one line each (or one JSON
 * object a line with -o json, -o jsonl or --json): when, the pod whose policy dropped it
 * (namespace/name where ADD was told them, else its device), which way, the 5-tuple, and
 * why: the direction's default deny (no rule allows it; the policies that isolate the pod
 * are named, from what the agent left in its state directory), a ClusterNetworkPolicy's
 * Deny rule (by its policy, name, tier and action, from the same file, while the pod's
 * rules are the ones that decided; else its tier and bit), a pod not yet judged, or a
 * packet without ports.
 *
 * The programs push each drop onto nkc_pol_denials (a queue keeping the newest 4096); the
 * monitor takes them off every 100 ms. Two monitors share the queue: each sees a part.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { decodePolicyEvent, openPolicyMaps, type PolicyEvent } from "../bpf/index";
import { podNames } from "../commands/agent-state";
import { listEndpoints } from "../commands/endpoints";
import { endpointMapEntries } from "../datapath/node-state";
import { monotonicNs } from "../sys/clock";
import { isJson, type Output } from "./output";

export interface MonitorOptions {
  bpffsRoot: string;
  stateDir: string;
  /** table and wide: a line per drop; json and jsonl: a JSON object per drop, a line each. */
  output: Output;
  /** Only this pod's drops ("namespace/name", or its host device). */
  pod: string | undefined;
  reason: string | undefined;
  direction: "ingress" | "egress" | undefined;
  /** Stop after this many milliseconds (tests, scripts); undefined: until interrupted. */
  forMs: number | undefined;
}

const PROTOCOLS: Record<number, string> = { 1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPv6", 132: "SCTP" };

interface Names {
  /** Host ifindex → namespace/name (or the device). */
  pods: Map<number, string>;
  /** Address → namespace/name of a local pod. */
  addresses: Map<string, string>;
  /** namespace/name → the policies that select it. */
  selectedBy: Map<string, string[]>;
  /** namespace/name → its slot and, where a ClusterNetworkPolicy applies, what each bit of it is. */
  rules: Map<string, SlotRules>;
}

interface SlotRules {
  slot: number;
  ingress: string[];
  egress: string[];
}

async function readNames(opts: MonitorOptions): Promise<Names> {
  const names = podNames(opts.stateDir);
  const byAddress = endpointMapEntries(opts.bpffsRoot);
  const out: Names = { pods: new Map(), addresses: new Map(), selectedBy: new Map(), rules: new Map() };
  for (const row of await listEndpoints(opts.bpffsRoot)) {
    const n = names.get(`${row.containerId}/${row.ifname}`);
    const label = n?.namespace && n.name ? `${n.namespace}/${n.name}` : row.hostDevice;
    for (const a of row.addresses) {
      out.addresses.set(a, label);
      const ifindex = byAddress.get(a)?.hostIfindex;
      if (ifindex !== undefined) out.pods.set(ifindex, label);
    }
  }
  try {
    const file = JSON.parse(fs.readFileSync(path.join(opts.stateDir, "policies.json"), "utf8")) as Record<
      string,
      { pod: string; selectedBy: string[]; slot: number; rules?: { ingress: string[]; egress: string[] } }
    >;
    for (const p of Object.values(file)) {
      out.selectedBy.set(p.pod, p.selectedBy);
      if (p.rules) out.rules.set(p.pod, { slot: p.slot, ...p.rules });
    }
  } catch {
    // No agent here, or not yet: the reason stands alone.
  }
  return out;
}

/** Why a packet was dropped, for each reason the programs give (bpf/include/nkc_policy_abi.h) but a plain denial. */
const REASON_TEXT: Record<string, string> = {
  pending: "pod not judged yet",
  opaque: "no ports to judge (IPv4 options, an IPv6 header chain not followed)",
  incomplete: "its policy could not be written in full: denied whole until it is",
  fragment: "a later fragment whose first fragment was not seen",
  revoked: "a remembered flow its policy, changed since, no longer allows",
};

const TIER_TEXT: Record<string, string> = { admin: "Admin", baseline: "Baseline", networkPolicy: "NetworkPolicy" };

/**
 * The ClusterNetworkPolicy rule that decided, where one did: by name while the pod is on
 * the slot that decided ("deny-b/no-tenant-a (Admin Deny)"), else by tier and bit
 * ("Admin rule 3": the pod's rules changed since).
 */
function decidingRule(e: PolicyEvent, rules: SlotRules | undefined): string | undefined {
  if (e.rule === undefined) return undefined;
  const named = rules?.slot === e.slot ? rules[e.dir][e.rule] : undefined;
  return named ?? `${TIER_TEXT[e.tier] ?? e.tier} rule ${e.rule}`;
}

export function describeEvent(e: PolicyEvent, names: Names, wallNs: bigint): Record<string, unknown> {
  const pod = names.pods.get(e.ifindex) ?? `ifindex ${e.ifindex}`;
  const rule = decidingRule(e, names.rules.get(pod));
  const why =
    e.reason === "denied"
      ? `default deny (${e.dir}${names.selectedBy.has(pod) ? `; isolated by ${names.selectedBy.get(pod)?.join(", ")}` : ""})`
      : e.reason === "tier-denied"
        ? `denied by ClusterNetworkPolicy rule ${rule ?? "?"} (${e.dir})`
        : `${REASON_TEXT[e.reason] ?? e.reason}${rule ? ` (${rule})` : ""}`;
  return {
    time: new Date(Number(wallNs / 1_000_000n)).toISOString(),
    pod,
    direction: e.dir,
    protocol: PROTOCOLS[e.proto] ?? String(e.proto),
    src: e.src,
    sport: e.sport,
    srcPod: names.addresses.get(e.src),
    dst: e.dst,
    dport: e.dport,
    dstPod: names.addresses.get(e.dst),
    reason: e.reason,
    why,
    ...(e.tier === "none" ? {} : { tier: e.tier }),
    ...(e.rule === undefined ? {} : { rule: e.rule }),
  };
}

const endpointText = (ip: string, port: number, pod: unknown) =>
  `${ip.includes(":") ? `[${ip}]` : ip}:${port}${pod ? ` (${pod})` : ""}`;

export function formatEventLine(d: Record<string, unknown>): string {
  return `${d.time} DROP ${d.direction} ${d.pod} ${d.protocol} ${endpointText(String(d.src), Number(d.sport), d.srcPod)} -> ${endpointText(String(d.dst), Number(d.dport), d.dstPod)}: ${d.why}`;
}

export async function runMonitor(opts: MonitorOptions, write: (line: string) => void): Promise<number> {
  const maps = openPolicyMaps(opts.bpffsRoot);
  if (!maps) {
    write(`no NetworkPolicy maps under ${opts.bpffsRoot}: no pod of a network with "networkPolicy": true yet`);
    return 1;
  }
  let names = await readNames(opts);
  // --for-seconds counts from when drops are read, and the queue is read at least once:
  // on a slow machine reading the names alone could outlast a short window.
  const end = opts.forMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + opts.forMs;
  try {
    for (let first = true; first || Date.now() < end; first = false) {
      const events: PolicyEvent[] = [];
      for (let raw = maps.events.pop(); raw; raw = maps.events.pop()) events.push(decodePolicyEvent(raw));
      if (events.some((e) => !names.pods.has(e.ifindex))) names = await readNames(opts);
      // Event times are CLOCK_MONOTONIC (bpf_ktime_get_ns); shown as wall-clock time.
      const offset = BigInt(Date.now()) * 1_000_000n - monotonicNs();
      for (const e of events) {
        const d = describeEvent(e, names, e.timeNs + offset);
        if (opts.pod && d.pod !== opts.pod) continue;
        if (opts.reason && d.reason !== opts.reason) continue;
        if (opts.direction && d.direction !== opts.direction) continue;
        write(isJson(opts.output) ? JSON.stringify(d) : formatEventLine(d));
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    maps.close();
  }
  return 0;
}
