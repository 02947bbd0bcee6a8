/**
 * NetworkPolicy as `status` shows it: how many pods enforce it, which ways their policies
 * isolate them, pods waiting for the agent's judgment, the new flows allowed and denied,
 * how full the bounded tables the agent writes are, and, from what the agent left in its
 * state directory, which policies select each isolated pod and what could not be
 * enforced as written: a pod's direction past a datapath bound or not written in full
 * (policies.json; either denies that direction whole) and the policies it cannot read,
 * each isolating what it selects and allowing nothing (policy-problems.json), and the
 * ClusterNetworkPolicies it reads (the version watched; each one's tier, priority, local
 * pods and what it could not read). Read-only.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import {
  openPolicyMaps,
  POL_F_INCOMPLETE,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  POL_F_PENDING,
  POLICY_MAP_NAMES,
  readPolicyPod,
  readPolicyStats,
} from "../bpf/index";

/** A problem as the agent reports it ("namespace/name" of the policies, its kind, why). */
export interface AgentPolicyProblem {
  policy: string;
  kind: string;
  reason: string;
  /** Set for a bound or a policy not written in full: the direction denied whole. */
  direction?: string;
}

/** One bounded map: the keys it holds now, of max_entries (a full one refuses the agent's writes). */
export interface PolicyMapFill {
  name: string;
  entries: number;
  capacity: number;
}

export interface NetworkPolicyStatus {
  /** Pod interfaces of networks that enforce it. */
  pods: number;
  isolated: { ingress: number; egress: number };
  pending: number;
  /** Pods whose policy the agent could not write in full: denied whole in what they isolate. */
  incomplete: number;
  allowed: { ingress: number; egress: number };
  denied: { ingress: number; egress: number };
  /** Isolated pods by namespace/name, with the policies that select them (the agent's account). */
  selectedBy: Record<string, string[]>;
  /** nkc_pol_pods, nkc_pol_peers, nkc_pol_ports, nkc_pol_vips. */
  maps: PolicyMapFill[];
  /** Pods by namespace/name with a direction denied whole: past a datapath bound, or not written in full (the agent's account). */
  deniedWhole: Record<string, AgentPolicyProblem[]>;
  /** Policies the agent cannot read, a problem each: each isolates what it selects and allows nothing (none without an agent). */
  unreadable: AgentPolicyProblem[];
  /** Pods by namespace/name with the ClusterNetworkPolicies whose subject selects them (the agent's account). */
  clusterSelectedBy: Record<string, string[]>;
  /** Pods by namespace/name with the audit-mode policies that select them: judged for their flow records, not enforced. */
  auditedBy?: Record<string, string[]>;
  /** ClusterNetworkPolicy as the agent reads it; absent where no agent (or an older one) said. */
  clusterNetworkPolicy?: AgentClusterAccount;
}

/** What the agent says of ClusterNetworkPolicy: the version watched (null: CRD not installed), and each policy. */
export interface AgentClusterAccount {
  version: string | null;
  policies: { name: string; tier: string; priority: number; localPods: number; problems: AgentPolicyProblem[] }[];
}

/** The maps whose size bounds what the agent can write: its pods, peers, ports, slots' tiers and ClusterIPs. */
const BOUNDED = ["pods", "peers", "ports", "tiers", "vips"] as const;

export function networkPolicyStatus(root: string, stateDir: string): NetworkPolicyStatus | undefined {
  const maps = openPolicyMaps(root);
  if (!maps) return undefined;
  const agent = readAgentAccount(stateDir);
  const s: NetworkPolicyStatus = {
    pods: 0,
    isolated: { ingress: 0, egress: 0 },
    pending: 0,
    incomplete: 0,
    allowed: { ingress: 0, egress: 0 },
    denied: { ingress: 0, egress: 0 },
    selectedBy: {},
    maps: [],
    deniedWhole: {},
    unreadable: agent.unreadable,
    clusterSelectedBy: {},
    auditedBy: {},
  };
  if (agent.cluster) s.clusterNetworkPolicy = agent.cluster;
  try {
    for (const k of maps.endpoints.keys()) {
      s.pods += 1;
      const key = maps.endpoints.lookup(k)?.readBigUInt64LE(0);
      const flags = (key === undefined ? undefined : readPolicyPod(maps, key))?.flags ?? 0;
      if (flags & POL_F_ISOLATED_IN) s.isolated.ingress += 1;
      if (flags & POL_F_ISOLATED_OUT) s.isolated.egress += 1;
      if (flags & POL_F_PENDING) s.pending += 1;
      if (flags & POL_F_INCOMPLETE) s.incomplete += 1;
      const pod = key === undefined ? undefined : agent.pods.get(key.toString(16));
      if (pod && Array.isArray(pod.auditedBy) && s.auditedBy) s.auditedBy[pod.pod] = pod.auditedBy;
      if (pod && flags & (POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT)) {
        s.selectedBy[pod.pod] = pod.selectedBy;
        if (Array.isArray(pod.clusterSelectedBy)) s.clusterSelectedBy[pod.pod] = pod.clusterSelectedBy;
        const bounds = (Array.isArray(pod.problems) ? pod.problems : []).filter((p) => p?.direction !== undefined);
        if (bounds.length > 0) s.deniedWhole[pod.pod] = bounds;
      }
      const stats = readPolicyStats(maps, k.readUInt32LE(0));
      for (const dir of ["ingress", "egress"] as const) {
        s.allowed[dir] += Number(stats.allowed[dir]);
        s.denied[dir] += Number(stats.denied[dir]);
      }
    }
    for (const role of BOUNDED) {
      const map = maps[role];
      s.maps.push({ name: POLICY_MAP_NAMES[role], entries: map.countKeys(), capacity: map.spec.maxEntries });
    }
  } finally {
    maps.close();
  }
  return s;
}

export interface AgentPolicyPod {
  pod: string;
  selectedBy: string[];
  /** Absent where an older agent wrote the file, or no ClusterNetworkPolicy selects it. */
  clusterSelectedBy?: string[];
  /** Absent where an older agent wrote the file, or no audit-mode policy selects it. */
  auditedBy?: string[];
  /** Absent where an older agent wrote the file. */
  problems?: AgentPolicyProblem[];
}

export interface AgentPolicyAccount {
  /** Local pods by key in hex. */
  pods: Map<string, AgentPolicyPod>;
  unreadable: AgentPolicyProblem[];
  cluster?: AgentClusterAccount;
}

/**
 * What the agent left in `stateDir`: policies.json (each local pod by key; `problems`
 * absent where an older agent wrote it) and policy-problems.json. Either may be missing
 * (no agent here, or not yet) or half-understood: what cannot be read is left out.
 */
export function readAgentAccount(stateDir: string): AgentPolicyAccount {
  const read = (file: string): unknown => {
    try {
      return JSON.parse(fs.readFileSync(path.join(stateDir, file), "utf8"));
    } catch {
      return undefined;
    }
  };
  const isRecord = (v: unknown): v is Record<string, unknown> =>
    typeof v === "object" && v !== null && !Array.isArray(v);
  const pods = read("policies.json");
  const problems = read("policy-problems.json");
  const unreadable = isRecord(problems) && Array.isArray(problems.unreadable) ? problems.unreadable : [];
  const cluster =
    isRecord(problems) && isRecord(problems.clusterNetworkPolicy) ? problems.clusterNetworkPolicy : undefined;
  const clusterAccount =
    cluster && Array.isArray(cluster.policies) && (typeof cluster.version === "string" || cluster.version === null)
      ? (cluster as unknown as AgentClusterAccount)
      : undefined;
  return {
    ...(clusterAccount ? { cluster: clusterAccount } : {}),
    pods: new Map(isRecord(pods) ? (Object.entries(pods) as [string, AgentPolicyPod][]) : []),
    unreadable: unreadable.filter(
      (p): p is AgentPolicyProblem => isRecord(p) && typeof p.policy === "string" && typeof p.reason === "string",
    ),
  };
}

export function formatNetworkPolicy(s: NetworkPolicyStatus | undefined): string[] {
  if (!s) return [`network policy  not enforced (no pod of a network with "networkPolicy": true yet)`];
  const lines = [
    `network policy  ${s.pods} pods enforce it: ${s.isolated.ingress} isolated for ingress, ${s.isolated.egress} for egress, ${s.pending} pending${s.incomplete > 0 ? `, ${s.incomplete} denied whole (not written in full)` : ""}; new flows allowed ${s.allowed.ingress} in / ${s.allowed.egress} out, denied ${s.denied.ingress} in / ${s.denied.egress} out`,
  ];
  if (s.maps.length > 0) {
    const full = s.maps.filter((m) => m.entries >= m.capacity).map((m) => m.name);
    lines.push(
      `  maps          ${s.maps.map((m) => `${m.name} ${m.entries}/${m.capacity}`).join(", ")}${
        full.length > 0 ? `; full: ${full.join(", ")} (the agent's writes to it fail)` : ""
      }`,
    );
  }
  const pods = [...new Set([...Object.keys(s.selectedBy), ...Object.keys(s.deniedWhole)])].sort();
  for (const pod of pods) {
    const by = s.selectedBy[pod];
    if (by) lines.push(`  ${pod}  selected by ${by.join(", ")}`);
    for (const p of s.deniedWhole[pod] ?? []) lines.push(`  ${pod}  ${p.reason} (${p.policy})`);
  }
  for (const [pod, by] of Object.entries(s.auditedBy ?? {}).sort(([a], [b]) => a.localeCompare(b)))
    lines.push(`  ${pod}  audited by ${by.join(", ")} (not enforced: its flows say what they would deny)`);
  for (const p of s.unreadable)
    lines.push(`  unreadable    ${p.policy}: ${p.reason} (isolates what it selects, allows nothing)`);
  return [...lines, ...formatClusterPolicy(s)];
}

function formatClusterPolicy(s: NetworkPolicyStatus): string[] {
  const c = s.clusterNetworkPolicy;
  if (!c) return [];
  if (c.version === null) return ["cluster network policy  not served (the ClusterNetworkPolicy CRD is not installed)"];
  const lines = [`cluster network policy  ${c.policies.length} policies (policy.networking.k8s.io/${c.version})`];
  for (const p of c.policies) {
    lines.push(`  ${p.name}  ${p.tier} priority ${p.priority}, selects ${p.localPods} local pods`);
    for (const problem of p.problems) lines.push(`  ${p.name}  not read in full: ${problem.reason}`);
  }
  for (const [pod, by] of Object.entries(s.clusterSelectedBy).sort(([a], [b]) => a.localeCompare(b)))
    lines.push(`  ${pod}  subject of ${by.join(", ")}`);
  return lines;
}
