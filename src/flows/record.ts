/**
 * A flow record: one new flow a pod's policy judged (allowed or denied), as the agent
 * tells it to `netkit-cni flows`, its export file and its metrics. Pure data: made by
 * src/agent/flows/reader.ts from the programs' events (bpf/include/nkc_policy_abi.h,
 * struct nkc_pol_event) and the agent's view of pods; read by people and their tools, so
 * its field names are the interface (docs/flows.md).
 */

/** One end of a flow, named as well as the agent knew it when the record was made. */
export interface FlowEnd {
  ip: string;
  /** 0 for what carries no ports (ICMP: the echo identifier is not shown). */
  port: number;
  /**
   * pod: a pod of the cluster (namespace and pod set); node: a node's own address (node
   * set); service: a Service ClusterIP not yet translated (namespace and service set);
   * world: anything else.
   */
  kind: "pod" | "node" | "service" | "world";
  namespace?: string;
  pod?: string;
  node?: string;
  service?: string;
}

/**
 * forwarded: let through (and remembered, so the rest of the flow passes without
 * another record); dropped: denied, a record per packet denied (a denied flow never
 * becomes remembered); audit: a policy in audit mode would have denied it, let through.
 */
export type FlowVerdict = "forwarded" | "dropped" | "audit";

export interface FlowRecord {
  /** When the program judged it, RFC 3339 with milliseconds, wall clock. */
  time: string;
  /** The node whose program judged it. */
  node: string;
  /** Which way for the pod whose policy judged it (`subject`). */
  direction: "ingress" | "egress";
  /** "namespace/name" of the pod whose policy judged it (its host device when unknown). */
  subject: string;
  /** TCP, UDP, SCTP, ICMP, ICMPv6, or the protocol's number. */
  protocol: string;
  source: FlowEnd;
  destination: FlowEnd;
  verdict: FlowVerdict;
  /**
   * Why, in the programs' words: allowed, denied (the direction's default deny),
   * tier-denied, pending, opaque, incomplete, fragment, revoked.
   */
  reason: string;
  /** The tier that decided: admin, networkPolicy, baseline; absent when none did (no policy isolates the direction). */
  tier?: "admin" | "networkPolicy" | "baseline";
  /**
   * What decided, for people: the rule ("ns/policy ingress rule 1", a
   * ClusterNetworkPolicy's "name/rule (Admin Deny)"), "default deny", or "no policy"
   * (the pod is not isolated this way).
   */
  policy: string;
  /** The policies the deciding rule came from: "namespace/name" for NetworkPolicy, the name for ClusterNetworkPolicy. */
  policies: string[];
  /**
   * new: the flow's first packet; revoked: a remembered flow its changed rules no longer
   * allow, cut at this packet; ended: a flow let through is over (its pod's table no
   * longer vouches for it: it aged out, closed, or its pod went), with its counts.
   */
  state: "new" | "revoked" | "ended";
  /**
   * An ended flow's packets and bytes (IP packets, headers included): sent from source to
   * destination, the way it started, and received back. Counted while flows were
   * recorded, once each where the packet crossed the subject pod's device.
   */
  packets?: { sent: number; received: number };
  bytes?: { sent: number; received: number };
  /** The subject pod's device pair, when the agent knows it. */
  datapath?: "netkit" | "veth";
}
