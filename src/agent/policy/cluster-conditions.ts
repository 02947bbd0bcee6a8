/**
 * Each ClusterNetworkPolicy's `status.conditions` entry of this plugin: whether the agent
 * reads it in full, and when not, what it could not read and what that means (an Accept
 * rule that matches nothing, a Deny or Pass rule that denies everything), as the
 * network-policy-api asks implementations to say.
 *
 * One agent writes for the cluster (the one whose node name sorts first among the
 * Nodes it knows: every agent reads the same policies the same way, so one voice is
 * enough, and a thousand nodes do not patch each policy a thousand times). It writes by
 * server-side apply, owning only its own condition type, so other implementations'
 * conditions stay; and only when what it would write changed since it last wrote it
 * (a write that fails is tried again at the next report).
 */
import type { PolicyProblem } from "./model/parse";

/** Ours among the conditions of a policy (API conventions: a domain-prefixed CamelCase type). */
export const CONDITION_TYPE = "netkit-cni.io/Enforced";

export interface ClusterPolicyReport {
  name: string;
  /** metadata.generation of the spec read. */
  generation?: number;
  problems: readonly PolicyProblem[];
}

export interface Condition {
  type: string;
  status: "True" | "False";
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime: string;
}

/** The condition for a policy as read (without its time, which the writer sets). */
export function conditionOf(report: ClusterPolicyReport): Omit<Condition, "lastTransitionTime"> {
  const condition: Omit<Condition, "lastTransitionTime"> =
    report.problems.length === 0
      ? { type: CONDITION_TYPE, status: "True", reason: "Enforced", message: "read in full and enforced" }
      : {
          type: CONDITION_TYPE,
          status: "False",
          reason: "PartlyUnreadable",
          message: report.problems
            .map((p) => p.reason)
            .join("; ")
            .slice(0, 32_000),
        };
  if (report.generation !== undefined) condition.observedGeneration = report.generation;
  return condition;
}

export class ClusterPolicyConditions {
  /** What was last written, by policy name: the condition without its time, its status and time. */
  private readonly written = new Map<string, { text: string; status: string; since: string }>();
  private readonly inFlight = new Set<string>();

  constructor(
    /** Applies `status.conditions: [condition]` to the policy named. */
    private readonly apply: (name: string, condition: Condition) => Promise<void>,
    /** Whether this agent is the one that writes. */
    private readonly writes: () => boolean,
    private readonly failed: (name: string, error: Error) => void = () => {},
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** The policies as read now: their conditions written where they changed. */
  report(reports: Iterable<ClusterPolicyReport>): void {
    const seen = new Set<string>();
    for (const r of reports) {
      seen.add(r.name);
      if (!this.writes() || this.inFlight.has(r.name)) continue;
      const condition = conditionOf(r);
      const text = JSON.stringify(condition);
      const last = this.written.get(r.name);
      if (last?.text === text) continue;
      // The time of the last change of status, not of message (API conventions).
      const since =
        last?.status === condition.status
          ? last.since
          : this.now()
              .toISOString()
              .replace(/\.\d+Z$/, "Z");
      this.inFlight.add(r.name);
      this.apply(r.name, { ...condition, lastTransitionTime: since })
        .then(
          () => this.written.set(r.name, { text, status: condition.status, since }),
          (e: unknown) => this.failed(r.name, e instanceof Error ? e : new Error(String(e))),
        )
        .finally(() => this.inFlight.delete(r.name));
    }
    for (const name of [...this.written.keys()]) if (!seen.has(name)) this.written.delete(name);
  }
}

/** Whether `self` is the node that writes: the first by name among those known (itself included). */
export function firstByName(self: string, nodes: Iterable<string>): boolean {
  for (const n of nodes) if (n < self) return false;
  return true;
}
