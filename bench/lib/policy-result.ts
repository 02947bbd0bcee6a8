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
 * 100 policies selecting the pods and allowing the traffic; tiers: a third cluster, the
 * same 100 policies and pods with 50 ClusterNetworkPolicies beside them, a few of whose
 * Admin and Baseline rules apply to the pods (results files before it lack it).
 */
export const POLICY_MODES = ["off", "none", "selected", "tiers"] as const;
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
  /** Slots' directions read by tiers (nkc_pol_tiers entries; absent in results files before it). */
  tiers?: number;
}

/** A connection a ClusterNetworkPolicy's Deny should refuse: refused, and counted so. */
export interface TierProbe {
  /** "server-a → server-b" */
  flow: string;
  /** The rule meant to deny it ("bench-servers-apart/to-servers (Admin Deny)"). */
  rule: string;
  refused: boolean;
  /** New flows the sender's node counted denied by that rule's tier, egress, during the probe. */
  denied: number;
}

/** New flows a node's programs judged over the measurement, by direction, deciding tier and verdict (nkc_pol_verdicts). */
export interface TierDecision {
  node: PolicyNode;
  direction: "egress" | "ingress";
  tier: "none" | "admin" | "networkPolicy" | "baseline";
  verdict: "allowed" | "denied";
  flows: number;
}

/** The tiers mode's own cluster: its maps, its probes and which tier decided its pods' flows. */
export interface PolicyTiersRun {
  policies: PolicyRun["policies"];
  maps: PolicyMapFill[];
  probes: TierProbe[];
  /** Non-zero counts only. */
  decided: TierDecision[];
}

/** New flows the programs judged for one pod (nkc_pol_stats), over the whole run. */
export interface PolicyVerdicts {
  mode: PolicyMode;
  pod: string;
  allowed: { egress: number; ingress: number };
  denied: { egress: number; ingress: number };
}

/** Flow records (policy-flows.ts): off, on with nobody reading while measured, on with a reader as the agent's. */
export const FLOW_VARIANTS = ["off", "on", "read"] as const;
export type FlowVariant = (typeof FLOW_VARIANTS)[number];

export interface PolicyFlowsRun {
  /** variant → placement → test → per-round rates, the selected pods. */
  samples: Record<FlowVariant, PolicyModeSamples>;
  crossings: ({ variant: "off" | "on"; placement: Placement } & Omit<PolicyCrossing, "mode" | "placement">)[];
  /** Records taken over the section, and lost to a full queue. */
  records: number;
  lost: number;
  /** Records per TCP_CRR connection with recording on: 2 (the client's egress, the server's ingress). */
  recordsPerCrrConnection: number;
  /**
   * Packets the flow tables counted per TCP_RR transaction while recording (the counted
   * run's and its warm-up's), by placement: 4 (request and response, each counted once by
   * the client's table and once by the server's); netperf's handshakes and control
   * connections add a little. Absent in results from before the tables counted.
   */
  countedPerRrTransaction?: Partial<Record<Placement, number>>;
  /**
   * An established flow under a flood of new ones: TCP_RR across nodes per round, while the
   * same client opens TCP_CRR connections to its server on its own node as fast as it can,
   * each variant; and the records lost meanwhile (a full queue). Absent in older results.
   */
  flood?: { rr: Record<FlowVariant, number[]>; lost: Record<FlowVariant, number>; floodConnections: number[] };
}

export interface PolicyRun {
  rounds: number;
  seconds: number;
  crrConnections: number;
  /** The policies in the maps, their namespaces, and which of them select each netperf pod (as compiled). */
  policies: {
    total: number;
    namespaces: string[];
    selecting: Record<string, string[]>;
    /** ClusterNetworkPolicies beside them (the tiers mode): how many of each tier, which select each netperf pod. */
    cluster?: { total: number; admin: number; baseline: number; selecting: Record<string, string[]> };
  };
  maps: PolicyMapFill[];
  /** A connection from the selected client to a pod no rule lets it reach: refused, and counted so. */
  probe: { refused: boolean; deniedEgress: number };
  crossings: PolicyCrossing[];
  /** mode → placement → test → per-round rates (transactions or connections per second); tiers absent before it was measured. */
  samples: Record<Exclude<PolicyMode, "tiers">, PolicyModeSamples> & { tiers?: PolicyModeSamples };
  verdicts: PolicyVerdicts[];
  /** The tiers mode (absent in results files before it). */
  tiers?: PolicyTiersRun;
  /** Flow records on the selected pods (absent in results files before them). */
  flows?: PolicyFlowsRun;
  errors: string[];
}

export type PolicyModeSamples = Record<Placement, Record<PolicyTest, number[]>>;
