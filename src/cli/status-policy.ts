/**
 * NetworkPolicy as `status` shows it: how many pods enforce it, which ways their policies
 * isolate them, pods waiting for the agent's judgment, the new flows allowed and denied,
 * and, from what the agent left in its state directory (policies.json), which policies
 * select each isolated pod. Read-only.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import {
  openPolicyMaps,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  POL_F_PENDING,
  readPolicyPod,
  readPolicyStats,
} from "../bpf/index";

export interface NetworkPolicyStatus {
  /** Pod interfaces of networks that enforce it. */
  pods: number;
  isolated: { ingress: number; egress: number };
  pending: number;
  allowed: { ingress: number; egress: number };
  denied: { ingress: number; egress: number };
  /** Isolated pods by namespace/name, with the policies that select them (the agent's account). */
  selectedBy: Record<string, string[]>;
}

export function networkPolicyStatus(root: string, stateDir: string): NetworkPolicyStatus | undefined {
  const maps = openPolicyMaps(root);
  if (!maps) return undefined;
  const s: NetworkPolicyStatus = {
    pods: 0,
    isolated: { ingress: 0, egress: 0 },
    pending: 0,
    allowed: { ingress: 0, egress: 0 },
    denied: { ingress: 0, egress: 0 },
    selectedBy: {},
  };
  const agent = agentAccount(stateDir);
  try {
    for (const k of maps.endpoints.keys()) {
      s.pods += 1;
      const key = maps.endpoints.lookup(k)?.readBigUInt64LE(0);
      const flags = (key === undefined ? undefined : readPolicyPod(maps, key))?.flags ?? 0;
      if (flags & POL_F_ISOLATED_IN) s.isolated.ingress += 1;
      if (flags & POL_F_ISOLATED_OUT) s.isolated.egress += 1;
      if (flags & POL_F_PENDING) s.pending += 1;
      const pod = key === undefined ? undefined : agent.get(key.toString(16));
      if (pod && flags & (POL_F_ISOLATED_IN | POL_F_ISOLATED_OUT)) s.selectedBy[pod.pod] = pod.selectedBy;
      const stats = readPolicyStats(maps, k.readUInt32LE(0));
      for (const dir of ["ingress", "egress"] as const) {
        s.allowed[dir] += Number(stats.allowed[dir]);
        s.denied[dir] += Number(stats.denied[dir]);
      }
    }
  } finally {
    maps.close();
  }
  return s;
}

function agentAccount(stateDir: string): Map<string, { pod: string; selectedBy: string[] }> {
  try {
    const file = JSON.parse(fs.readFileSync(path.join(stateDir, "policies.json"), "utf8")) as Record<
      string,
      { pod: string; selectedBy: string[] }
    >;
    return new Map(Object.entries(file));
  } catch {
    return new Map(); // no agent here, or not yet
  }
}

export function formatNetworkPolicy(s: NetworkPolicyStatus | undefined): string[] {
  if (!s) return [`network policy  not enforced (no pod of a network with "networkPolicy": true yet)`];
  const lines = [
    `network policy  ${s.pods} pods enforce it: ${s.isolated.ingress} isolated for ingress, ${s.isolated.egress} for egress, ${s.pending} pending; new flows allowed ${s.allowed.ingress} in / ${s.allowed.egress} out, denied ${s.denied.ingress} in / ${s.denied.egress} out`,
  ];
  for (const [pod, by] of Object.entries(s.selectedBy).sort()) lines.push(`  ${pod}  selected by ${by.join(", ")}`);
  return lines;
}
