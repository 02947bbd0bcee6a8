/**
 * What the NetworkPolicy section (bench/lib/policy.ts) keeps in a results file: its
 * modes, tests and the run's shape. Pure, so the report and its tests read it without
 * the measuring code.
 */
import type { PerPacket } from "./crossings";
import type { Placement } from "./paths";
import type { PolicyNode } from "./policy-set";

/**
 * off: a network without "networkPolicy" (no policy program at all); none: a network
 * enforcing policy, the pods where no policy is; selected: the same network, a few of
 * 100 policies selecting the pods and allowing the traffic.
 */
export const POLICY_MODES = ["off", "none", "selected"] as const;
export type PolicyMode = (typeof POLICY_MODES)[number];
export const POLICY_TESTS = ["TCP_RR", "TCP_CRR"] as const;
export type PolicyTest = (typeof POLICY_TESTS)[number];
export const POLICY_PLACEMENTS: readonly Placement[] = ["across", "same"];

export interface PolicyCrossing {
  mode: PolicyMode;
  placement: Placement;
  rrRequest: PerPacket;
  rrResponse: PerPacket;
}

/** What one node's maps held while the selected pods were measured. */
export interface PolicyMapFill {
  node: PolicyNode;
  /** Pods the node's agent would judge (nkc_pol_pods entries) and the slots they share. */
  pods: number;
  slots: number;
  /** Prefixes in the two tries, all slots and directions. */
  peers: number;
  ports: number;
}

/** New flows the programs judged for one pod (nkc_pol_stats), over the whole run. */
export interface PolicyVerdicts {
  mode: PolicyMode;
  pod: string;
  allowed: { egress: number; ingress: number };
  denied: { egress: number; ingress: number };
}

export interface PolicyRun {
  rounds: number;
  seconds: number;
  crrConnections: number;
  /** The policies in the maps, their namespaces, and which of them select each netperf pod (as compiled). */
  policies: { total: number; namespaces: string[]; selecting: Record<string, string[]> };
  maps: PolicyMapFill[];
  /** A connection from the selected client to a pod no rule lets it reach: refused, and counted so. */
  probe: { refused: boolean; deniedEgress: number };
  crossings: PolicyCrossing[];
  /** mode → placement → test → per-round rates (transactions or connections per second). */
  samples: Record<PolicyMode, Record<Placement, Record<PolicyTest, number[]>>>;
  verdicts: PolicyVerdicts[];
  errors: string[];
}
