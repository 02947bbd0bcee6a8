/**
 * The policy controller (on unless --network-policy=false): each local pod's compiled
 * NetworkPolicy and ClusterNetworkPolicy tiers in the datapath's tables
 * (bpf/lib/policy.h), kept per pod.
 *
 * - Pods, Namespaces and NetworkPolicies, and where their CRD is served
 *   ClusterNetworkPolicies and the Nodes their `nodes` peers select (ClusterPolicySources),
 *   feed the index (model/policy-index.ts), which names the local pods a change touches;
 *   each is synced alone: compiled, its rules laid out in tier order (podRules), placed
 *   on a slot (slots.ts: shared by pods whose rules mean the same, peers rewritten in
 *   place) and its entry written (slot and isolation flags) only once the slot is whole.
 * - Which namespaces have a policy, or a ClusterNetworkPolicy subject that may select
 *   their pods (the plugin's ADD marks a pod of such a namespace it wires before the
 *   agent judged it: it gets nothing but its node's traffic until then), and every
 *   Service's ClusterIPs (a pod's egress to one is judged on the backend, after the
 *   stack's DNAT), kept by their own keys.
 * - The full sync ("*", after the lists and at every resync) rebuilds the index and
 *   rewrites what differs; a pod's entry is removed only when the pod is gone from the
 *   API, and never one the plugin marked pending for a pod the agent has not seen yet.
 * - A restart changes no verdict the policies did not change, and inherits nothing: the
 *   node's tables may hold a previous run's slots, which stay in force until each pod is
 *   placed on a fresh slot of this run (slots.ts); then the first full sync sweeps
 *   what no pod reads any more (slots, namespace marks, ClusterIPs), counted and logged.
 * - Fail closed, never stopping the rest: a policy that cannot be read isolates what it
 *   selects and allows nothing (compile.ts; reported, and logged when its reasons
 *   change); a pod's direction past a datapath bound denies everything; a pod whose
 *   policy cannot be written in full (a full map, a write error) is denied in what it
 *   isolates, reported with the pod, logged, and retried with backoff. Each is counted
 *   for metrics.
 */

import type { DatapathRule } from "../../bpf/index";
import { getOrMake } from "../collections";
import type { Informer } from "../kube/informer";
import type { WorkQueue } from "../kube/workqueue";
import { agentLog } from "../log";
import type { ServiceObject } from "../services/plan";
import type { CompiledPolicy, CompiledRule, CompileResult, DirectionPolicy, TierRule } from "./model/compile";
import { type JudgedFlow, type Judgment, judgeDirection } from "./model/judge";
import type { KeptClusterPolicy, KeptPolicy, PolicyNamespace, PolicyNode, PolicyPod } from "./model/objects";
import { BOUND_KINDS, type Direction, INCOMPLETE, type PolicyProblem, type ProblemKind } from "./model/parse";
import { type ClusterPolicySummary, PolicyIndex } from "./model/policy-index";
import {
  type Isolation,
  type PodRules,
  PolicySlots,
  type SlotOptions,
  SlotWriteError,
  type SlotWriter,
  type TierMasks,
} from "./slots";

export const POLICY = "policy";
export const POLICY_NAMESPACES = "policy-namespaces";
export const POLICY_VIPS = "policy-vips";
const ALL = "*";

/** What the controller writes (main.ts gives the pinned maps; tests a fake). */
export interface PolicyWriter extends SlotWriter {
  deletePod(pod: string): void;
  /**
   * Audit-mode policies select the pod: its entry (when it has one, or gets one) asks the
   * programs to judge each of its new flows though it may not be isolated, so each is
   * recorded; forgotten with the pod.
   */
  setWatched(pod: string, watched: boolean): void;
  /** The pods the maps hold an entry for (namespace/name is unknown for a pending one: its key is given). */
  podEntries(): { pod?: string; key: bigint; pending: boolean }[];
  deletePodKey(key: bigint): void;
  setNamespace(namespace: string, hasPolicies: boolean): void;
  setVips(add: string[], remove: string[]): void;
  /** The slot ids the tables hold keys of (read once, at start). */
  tableSlots(): Iterable<number>;
  /** Deletes every table key of a slot not in `keep`: how many keys of how many slots. */
  sweepSlots(keep: ReadonlySet<number>): { slots: number; keys: number };
  /** Leaves the namespace marks of `wanted` alone and removes the others: how many. */
  reconcileNamespaces(wanted: Iterable<string>): number;
  /** Makes the ClusterIPs exactly `wanted`: how many were added and removed. */
  reconcileVips(wanted: Iterable<string>): { added: number; removed: number };
}

export interface PolicyPodStatus {
  /** The policies that select it, "namespace/name". */
  selectedBy: string[];
  /** The ClusterNetworkPolicies whose subject selects it, by name (absent: none). */
  clusterSelectedBy?: string[];
  /** The audit-mode policies that select it (absent: none): judged in its flow records, not enforced. */
  auditedBy?: string[];
  /**
   * Where a ClusterNetworkPolicy applies: which rule each bit of its slot is, by
   * direction (the programs' denials name a bit; `monitor` names the rule).
   */
  rules?: { ingress: string[]; egress: string[] };
  isolated: Isolation;
  slot: number;
  /**
   * What keeps its policy from being what its policies say: a direction past a datapath
   * bound, or not written in full (`direction` set: that direction denies everything),
   * and the unreadable policies of its namespace that select it (each isolates and
   * allows nothing).
   */
  problems: PolicyProblem[];
}

/** ClusterNetworkPolicy as the agent reads it. */
export interface ClusterPolicyStatus {
  /** The version of policy.networking.k8s.io watched; null while its CRD is not installed. */
  version: string | null;
  policies: ClusterPolicySummary[];
}

export interface PolicyStatus {
  synced: boolean;
  clusterNetworkPolicy?: ClusterPolicyStatus;
  /** Local pods by namespace/name. */
  pods: Record<string, PolicyPodStatus>;
  slots: number;
  /** Policies skipped as a whole, and why. */
  problems: PolicyProblem[];
}

/** Local pods with a direction past a datapath bound, by direction and kind of bound. */
export interface OverBoundCount {
  direction: Direction;
  kind: ProblemKind;
  pods: number;
}

/** A compiled policy as the slots take it. */
export function podRules(policy: CompiledPolicy): PodRules {
  const ingress = directionRules(policy.ingress);
  const egress = directionRules(policy.egress);
  const rules: PodRules = {
    ingress: ingress?.rules,
    egress: egress?.rules,
    origins: { ingress: ingress?.origins ?? [], egress: egress?.origins ?? [] },
  };
  if (ingress?.tiers || egress?.tiers) rules.tiers = { ingress: ingress?.tiers, egress: egress?.tiers };
  return rules;
}

/**
 * One direction's rules in bit order, as the programs read them (bpf/lib/policy.h): the
 * Admin tier's first, in precedence order (the lowest matching bit decides), then
 * NetworkPolicy's, then the Baseline tier's in precedence order; and the masks that say
 * which is which. NetworkPolicy alone has no masks: any matching rule allows.
 */
function directionRules(
  d: DirectionPolicy | undefined,
): { rules: DatapathRule[]; origins: string[]; tiers?: TierMasks } | undefined {
  if (!d) return undefined;
  const strip = (r: CompiledRule): DatapathRule => ({ peers: r.peers, ports: r.ports });
  const admin = d.admin ?? [];
  const baseline = d.baseline ?? [];
  if (admin.length === 0 && baseline.length === 0 && !d.unisolated) {
    return { rules: d.rules.map(strip), origins: d.rules.map((r) => r.origin) };
  }
  const ordered: CompiledRule[] = [...admin, ...d.rules, ...baseline];
  const tiers: TierMasks = { admin: 0n, baseline: 0n, deny: 0n, pass: 0n, networkPolicy: !d.unisolated };
  const mark = (rules: TierRule[], first: number, tier: "admin" | "baseline") =>
    rules.forEach((r, i) => {
      const bit = 1n << BigInt(first + i);
      tiers[tier] |= bit;
      if (r.action === "Deny") tiers.deny |= bit;
      if (r.action === "Pass") tiers.pass |= bit;
    });
  mark(admin, 0, "admin");
  mark(baseline, admin.length + d.rules.length, "baseline");
  // What monitor and status call each bit: a ClusterNetworkPolicy's rule by its policy,
  // name, tier and action ("deny-b/no-tenant-a (Admin Deny)").
  const named = (tier: string) => (r: TierRule) => `${r.policy}/${r.rule} (${tier} ${r.action})`;
  const origins = [...admin.map(named("Admin")), ...d.rules.map((r) => r.origin), ...baseline.map(named("Baseline"))];
  return { rules: ordered.map(strip), origins, tiers };
}

/**
 * Where ClusterNetworkPolicies come from: their informer (empty while the CRD is not
 * installed: kube/optional-informer.ts), the Nodes their `nodes` peers select, the
 * version watched, and who hears what each policy was read as (its status conditions).
 */
export interface ClusterPolicySources {
  policies: Informer<KeptClusterPolicy>;
  nodes: Informer<PolicyNode>;
  version(): string | undefined;
  report?(policies: { name: string; generation?: number; problems: PolicyProblem[] }[]): void;
}

export class PolicyController {
  private readonly index: PolicyIndex;
  private readonly slots: PolicySlots;
  private readonly policiesIn = new Map<string, number>();
  private readonly vipsOf = new Map<string, string[]>();
  private readonly states = new Map<string, PolicyPodStatus>();
  /** Local pods that audit-mode policies select: their policy as if every one were enforced. */
  private readonly audits = new Map<string, CompiledPolicy>();
  /** The namespaces the maps mark as having a policy. */
  private readonly namespacesWritten = new Map<string, boolean>();
  /** The reasons each skipped policy was last logged with, by key. */
  private readonly skippedLogged = new Map<string, string>();
  private isSynced = false;

  /** Whether the ClusterIPs were made exactly the API's once (at the first full list). */
  private vipsReconciled = false;

  constructor(
    private readonly queue: WorkQueue,
    private readonly pods: Informer<PolicyPod>,
    private readonly namespaces: Informer<PolicyNamespace>,
    private readonly policies: Informer<KeptPolicy>,
    private readonly services: Informer<ServiceObject>,
    nodeName: string,
    private readonly writer: PolicyWriter,
    slotOptions: Pick<SlotOptions, "stamps"> = {},
    private readonly cluster?: ClusterPolicySources,
    /** watchAll: every local pod judged for its flow records (--flow-pods=all). */
    private readonly options: { watchAll?: boolean } = {},
  ) {
    this.index = new PolicyIndex(nodeName);
    this.slots = new PolicySlots(writer, { ...slotOptions, reserved: writer.tableSlots() });
    queue.register(POLICY, (key) => (key === ALL ? this.syncAll() : this.syncPod(key)));
    queue.register(POLICY_NAMESPACES, (ns) => this.syncNamespace(ns));
    queue.register(POLICY_VIPS, (key) => this.syncVips(key));
    const listed = () => {
      if (this.listed) queue.add(POLICY, ALL);
    };
    for (const i of [pods, namespaces, policies]) i.onSynced(listed);
    cluster?.policies.onSynced(listed);
    cluster?.nodes.onSynced(listed);
    services.onSynced(() => queue.add(POLICY_VIPS, ALL));
    const touched = (keys: Set<string>) => {
      if (!this.isSynced) return;
      for (const k of keys) queue.add(POLICY, k);
    };
    pods.onChange((key, before, after) => touched(this.index.podChanged(key, before, after)));
    namespaces.onChange((key, before, after) => {
      touched(this.index.namespaceChanged(key, before, after));
      if (this.isSynced) queue.add(POLICY_NAMESPACES, key); // its labels may bring it under a subject
    });
    cluster?.policies.onChange((key, before, after) => {
      touched(this.index.clusterPolicyChanged(key, before, after));
      if (!this.isSynced) return;
      this.logClusterProblems();
      for (const ns of this.knownNamespaces()) queue.add(POLICY_NAMESPACES, ns);
      this.reportCluster();
    });
    cluster?.nodes.onChange((key, before, after) => touched(this.index.nodeChanged(key, before, after)));
    policies.onChange((key, before, after) => {
      touched(this.index.policyChanged(key, before, after));
      if (this.isSynced) this.logSkipped(key);
      for (const ns of new Set([before?.namespace, after?.namespace])) {
        if (ns !== undefined) this.countPolicy(ns, before?.namespace === ns ? -1 : 0, after?.namespace === ns ? 1 : 0);
      }
    });
    services.onChange((key) => queue.add(POLICY_VIPS, key));
  }

  private get listed(): boolean {
    const clusterListed = !this.cluster || (this.cluster.policies.synced && this.cluster.nodes.synced);
    return this.pods.synced && this.namespaces.synced && this.policies.synced && clusterListed;
  }

  /** Every namespace the maps may need a mark for: those the API has, and those marked. */
  private knownNamespaces(): Set<string> {
    const names = new Set(this.namespacesWritten.keys());
    for (const ns of this.namespaces.values()) names.add(ns.name);
    for (const ns of this.policiesIn.keys()) names.add(ns);
    return names;
  }

  /**
   * Whether a namespace is marked as having policies (ADD makes a pod of it wait for the
   * agent's verdict): a NetworkPolicy of its own, or a ClusterNetworkPolicy whose subject
   * may select pods there.
   */
  private hasPolicies(namespace: string): boolean {
    if ((this.policiesIn.get(namespace) ?? 0) > 0) return true;
    if (!this.cluster) return false;
    return this.index.clusterSubjectsCover(this.namespaces.get(namespace)?.labels ?? {});
  }

  resync(): void {
    if (this.listed) this.queue.add(POLICY, ALL);
    if (this.services.synced) this.queue.add(POLICY_VIPS, ALL);
  }

  /** What rule `bit` of `slot`'s direction is, while local pod `pod` is on that slot (flow records). */
  ruleOf(pod: string, slot: number, dir: Direction, bit: number): string | undefined {
    const state = this.states.get(pod);
    return state?.slot === slot ? state.rules?.[dir][bit] : undefined;
  }

  /**
   * What `pod`'s audit-mode policies, were they enforced beside the others, would make of
   * a new flow its enforced rules let through in direction `dir`; undefined when none
   * selects it.
   */
  audit(pod: string, dir: Direction, flow: JudgedFlow): Judgment | undefined {
    const policy = this.audits.get(pod);
    return policy ? judgeDirection(policy[dir], flow) : undefined;
  }

  /** The audit-mode policies that select local pod `pod`. */
  auditedBy(pod: string): string[] {
    return this.states.get(pod)?.auditedBy ?? [];
  }

  /** The NetworkPolicies that select local pod `pod`. */
  selectedBy(pod: string): string[] {
    return this.states.get(pod)?.selectedBy ?? [];
  }

  get status(): PolicyStatus {
    const status: PolicyStatus = {
      synced: this.isSynced,
      pods: Object.fromEntries([...this.states].sort(([a], [b]) => a.localeCompare(b))),
      slots: this.slots.size,
      problems: this.index.policyProblems(),
    };
    if (this.cluster) {
      status.clusterNetworkPolicy = {
        version: this.cluster.version() ?? null,
        policies: this.index.clusterPolicySummaries(),
      };
    }
    return status;
  }

  /** ClusterNetworkPolicies by tier, and those not read in full (a policy counts once per kind of problem it has). */
  clusterCounts(): { byTier: Record<string, number>; unreadable: Partial<Record<ProblemKind, number>> } {
    const byTier: Record<string, number> = { Admin: 0, Baseline: 0 };
    const unreadable: Partial<Record<ProblemKind, number>> = {};
    for (const p of this.index.clusterPolicySummaries()) {
      byTier[p.tier] = (byTier[p.tier] ?? 0) + 1;
      for (const kind of new Set(p.problems.map((x) => x.kind))) unreadable[kind] = (unreadable[kind] ?? 0) + 1;
    }
    return { byTier, unreadable };
  }

  /** Tells the sources what each ClusterNetworkPolicy was read as (its status conditions). */
  private reportCluster(): void {
    const { cluster } = this;
    if (!cluster?.report) return;
    cluster.report(
      this.index.clusterPolicySummaries().map((p) => ({
        name: p.name,
        generation: cluster.policies.get(p.name)?.generation,
        problems: p.problems,
      })),
    );
  }

  /** Logs each ClusterNetworkPolicy's problems when they differ from those last logged. */
  private logClusterProblems(): void {
    const now = new Map(this.index.clusterPolicySummaries().map((p) => [`cnp:${p.name}`, p.problems]));
    for (const key of new Set([...now.keys(), ...this.skippedLogged.keys()].filter((k) => k.startsWith("cnp:")))) {
      const problems = now.get(key) ?? [];
      const text = problems.map((p) => p.reason).join("\n");
      if (text === (this.skippedLogged.get(key) ?? "")) continue;
      if (problems.length === 0) {
        this.skippedLogged.delete(key);
        if (now.has(key)) agentLog.info(`cluster network policy ${key.slice(4)} is read in full again`);
        continue;
      }
      this.skippedLogged.set(key, text);
      for (const p of problems) agentLog.warn(`cluster network policy ${key.slice(4)} not read in full: ${p.reason}`);
    }
  }

  /** Unreadable policies (each isolating what it selects) by kind of problem (a policy counts once per kind it has). */
  unreadableCounts(): Partial<Record<ProblemKind, number>> {
    return this.index.problemCounts();
  }

  /** Local pods with a direction past a bound (a pod counts once per direction and kind). */
  overBoundCounts(): OverBoundCount[] {
    return this.directionCounts((kind) => (BOUND_KINDS as readonly string[]).includes(kind));
  }

  /** Local pods whose policy could not be written in full, by direction denied. */
  incompleteCounts(): OverBoundCount[] {
    return this.directionCounts((kind) => kind === INCOMPLETE);
  }

  private directionCounts(counted: (kind: ProblemKind) => boolean): OverBoundCount[] {
    const counts = new Map<string, OverBoundCount>();
    for (const state of this.states.values()) {
      for (const p of state.problems) {
        if (p.direction === undefined || !counted(p.kind)) continue;
        const key = `${p.direction} ${p.kind}`;
        const c = getOrMake(counts, key, () => ({ direction: p.direction as Direction, kind: p.kind, pods: 0 }));
        c.pods += 1;
      }
    }
    return [...counts.values()];
  }

  private countPolicy(namespace: string, minus: number, plus: number): void {
    const before = this.policiesIn.get(namespace) ?? 0;
    const after = before + minus + plus;
    if (after > 0) this.policiesIn.set(namespace, after);
    else this.policiesIn.delete(namespace);
    if (before > 0 !== after > 0 && this.isSynced) this.queue.add(POLICY_NAMESPACES, namespace);
  }

  private syncAll(): void {
    if (!this.listed) return;
    const targets = this.index.reset(
      this.pods.values(),
      this.namespaces.values(),
      this.policies.values(),
      this.cluster?.policies.values(),
      this.cluster?.nodes.values(),
    );
    this.policiesIn.clear();
    for (const p of this.policies.values())
      this.policiesIn.set(p.namespace, (this.policiesIn.get(p.namespace) ?? 0) + 1);
    const namespaces = this.knownNamespaces();
    for (const ns of namespaces) this.syncNamespace(ns);
    if (!this.isSynced) {
      const removed = this.writer.reconcileNamespaces([...namespaces].filter((ns) => this.hasPolicies(ns)));
      if (removed > 0) agentLog.info(`network policy: removed ${removed} stale namespace marks`);
    }
    // One pod that cannot be written must not keep the others from their policies: it is
    // denied (apply) and retried on its own.
    const failed: string[] = [];
    for (const key of targets) {
      try {
        this.syncPod(key);
      } catch {
        failed.push(key);
      }
    }
    // Entries of pods the API no longer has; a pending mark for a pod not yet seen stays.
    for (const e of this.writer.podEntries()) {
      if (e.pod !== undefined && !targets.has(e.pod)) this.removePod(e.pod);
      else if (e.pod === undefined && !e.pending) this.writer.deletePodKey(e.key);
    }
    for (const key of [...this.states.keys()]) if (!targets.has(key)) this.removePod(key);
    // Every pod now reads a slot of this run (or none): whatever else the tables hold is
    // a previous run's, or a slot given up, and goes.
    if (this.slots.needsSweep) {
      const swept = this.writer.sweepSlots(this.slots.liveIds());
      this.slots.swept();
      if (swept.keys > 0) agentLog.info(`network policy: removed ${swept.keys} stale entries of ${swept.slots} slots`);
    }
    for (const key of failed) this.queue.add(POLICY, key);
    if (!this.isSynced) agentLog.info(`network policy: synced ${targets.size} local pods, ${this.slots.size} slots`);
    const policyKeys = [...this.policies.values()].map((p) => `${p.namespace}/${p.name}`);
    for (const key of new Set([...policyKeys, ...this.skippedLogged.keys()])) {
      if (!key.startsWith("cnp:")) this.logSkipped(key);
    }
    this.logClusterProblems();
    this.isSynced = true;
    this.reportCluster();
  }

  /** Logs an unreadable policy's problems when they differ from those last logged (so not at every resync). */
  private logSkipped(key: string): void {
    const problems = this.index.problemsOf(key);
    const text = problems.map((p) => p.reason).join("\n");
    if (text === (this.skippedLogged.get(key) ?? "")) return;
    if (problems.length === 0) {
      this.skippedLogged.delete(key);
      if (this.policies.get(key)) agentLog.info(`network policy ${key} is read again`);
      return;
    }
    this.skippedLogged.set(key, text);
    for (const p of problems)
      agentLog.warn(`network policy ${p.policy} unreadable, isolates what it selects: ${p.reason}`);
  }

  private syncNamespace(namespace: string): void {
    const has = this.hasPolicies(namespace);
    if (this.namespacesWritten.get(namespace) === has) return;
    this.writer.setNamespace(namespace, has);
    if (has) this.namespacesWritten.set(namespace, true);
    else this.namespacesWritten.delete(namespace);
  }

  private syncPod(key: string): void {
    if (!this.isSynced && !this.listed) return;
    const result = this.index.compile(key);
    if (!result) {
      this.removePod(key);
      return;
    }
    this.apply(key, result);
  }

  /**
   * Audit-mode policies select the pod: what all its policies would make of its traffic
   * is kept for its flow records (audit), and its entry asks the programs to judge every
   * flow of it, so each is recorded though nothing the pod enforces may isolate it.
   */
  private applyAudit(key: string, result: CompileResult): boolean {
    const audited = result.auditedBy ? this.index.compile(key, "audited") : undefined;
    if (audited) this.audits.set(key, audited.policy);
    else this.audits.delete(key);
    const watched = audited !== undefined || this.options.watchAll === true;
    this.writer.setWatched(key, watched);
    return watched;
  }

  private apply(key: string, result: CompileResult): void {
    const isolated = { ingress: result.policy.ingress !== undefined, egress: result.policy.egress !== undefined };
    const namespace = key.slice(0, key.indexOf("/"));
    const state: PolicyPodStatus = { selectedBy: result.selectedBy, isolated, slot: 0, problems: result.problems };
    if (result.clusterSelectedBy) state.clusterSelectedBy = result.clusterSelectedBy;
    if (result.auditedBy) state.auditedBy = result.auditedBy;
    const watched = this.applyAudit(key, result);
    if (!isolated.ingress && !isolated.egress) {
      // Not isolated: an entry only where the namespace has a policy (so ADD knows the
      // agent judged it) or an audit-mode one selects it; elsewhere none, as for a pod
      // of a network without policy.
      if (this.hasPolicies(namespace) || watched) this.writer.setPod(key, { slot: 0, isolated, stamp: 0n });
      else this.writer.deletePod(key);
      this.slots.release(key);
      this.setState(key, state);
      return;
    }
    const rules = podRules(result.policy);
    state.rules = rules.origins;
    try {
      state.slot = this.slots.place(key, rules);
    } catch (e) {
      this.denyWhole(key, state, e);
      if (e instanceof SlotWriteError) {
        // The pods of a slot given up half-way are denied already; each is retried on its own.
        for (const other of e.pods) if (other !== key) this.incompleteElsewhere(other, e);
      }
      throw e;
    }
    this.setState(key, state);
  }

  /**
   * The pod's policy could not be written in full: it is denied in every direction it
   * isolates (its entry says so, slot 0 holds nothing), and that is reported with it. The
   * caller rethrows, so the queue retries it with backoff.
   */
  private denyWhole(key: string, state: PolicyPodStatus, error: unknown): void {
    try {
      this.writer.setPod(key, this.slots.closedEntry(state.isolated));
    } catch (e) {
      agentLog.warn(`network policy: pod ${key}: cannot write even its denial: ${(e as Error).message}`);
    }
    this.slots.release(key);
    this.setState(key, { ...state, slot: 0, problems: [...state.problems, ...incompleteProblems(state, error)] });
  }

  /** A pod of a slot given up while another pod was placed: denied already (slots.ts), reported and retried. */
  private incompleteElsewhere(key: string, error: unknown): void {
    const state = this.states.get(key);
    if (state) {
      const problems = state.problems.filter((p) => p.kind !== INCOMPLETE);
      this.setState(key, { ...state, slot: 0, problems: [...problems, ...incompleteProblems(state, error)] });
    }
    this.queue.add(POLICY, key);
  }

  /** Keeps a pod's state; logs its bounds problems when they changed (its skipped policies are logged once, by policy). */
  private setState(key: string, state: PolicyPodStatus): void {
    const bounds = (s: PolicyPodStatus | undefined) => s?.problems.filter((p) => p.direction !== undefined) ?? [];
    const before = bounds(this.states.get(key));
    const after = bounds(state);
    this.states.set(key, state);
    if (JSON.stringify(before) === JSON.stringify(after)) return;
    if (after.length === 0) agentLog.info(`network policy: pod ${key} is within the datapath's bounds again`);
    for (const p of after) agentLog.warn(`network policy: pod ${key}: ${p.reason} (${p.policy})`);
  }

  private removePod(key: string): void {
    this.audits.delete(key);
    this.writer.deletePod(key);
    this.slots.release(key);
    this.states.delete(key);
  }

  private syncVips(key: string): void {
    if (key === ALL && !this.vipsReconciled) {
      // The first list: the map becomes exactly the API's (a Service deleted while no
      // agent ran leaves no ClusterIP whose flows go unjudged).
      this.vipsOf.clear();
      for (const svc of this.services.values()) {
        const ips = clusterIps(svc);
        if (ips.length > 0) this.vipsOf.set(serviceKey(svc), ips);
      }
      const { removed } = this.writer.reconcileVips(new Set([...this.vipsOf.values()].flat()));
      if (removed > 0) agentLog.info(`network policy: removed ${removed} stale Service ClusterIPs`);
      this.vipsReconciled = true;
      return;
    }
    if (key === ALL) {
      const wanted = new Map<string, string[]>();
      for (const svc of this.services.values()) wanted.set(serviceKey(svc), clusterIps(svc));
      const before = new Set([...this.vipsOf.values()].flat());
      const after = new Set([...wanted.values()].flat());
      this.writer.setVips(
        [...after].filter((ip) => !before.has(ip)),
        [...before].filter((ip) => !after.has(ip)),
      );
      this.vipsOf.clear();
      for (const [k, v] of wanted) this.vipsOf.set(k, v);
      return;
    }
    const svc = this.services.get(key);
    const before = this.vipsOf.get(key) ?? [];
    const after = svc ? clusterIps(svc) : [];
    this.writer.setVips(
      after.filter((ip) => !before.includes(ip)),
      before.filter((ip) => !after.includes(ip)),
    );
    if (after.length > 0) this.vipsOf.set(key, after);
    else this.vipsOf.delete(key);
  }
}

/** What a policy not written in full is reported as: one problem per direction it denies. */
function incompleteProblems(state: Pick<PolicyPodStatus, "isolated" | "selectedBy">, error: unknown): PolicyProblem[] {
  const why = (error as Error)?.message ?? String(error);
  return (["ingress", "egress"] as const)
    .filter((d) => state.isolated[d])
    .map((direction) => ({
      policy: state.selectedBy.join(", "),
      kind: INCOMPLETE,
      reason: `${direction}: not written in full (${why}); all ${direction} denied until it is`,
      direction,
    }));
}

const serviceKey = (svc: ServiceObject) => `${svc.metadata?.namespace ?? ""}/${svc.metadata?.name ?? ""}`;

function clusterIps(svc: ServiceObject): string[] {
  const spec = svc.spec;
  if (!spec || spec.type === "ExternalName") return [];
  return (spec.clusterIPs ?? (spec.clusterIP ? [spec.clusterIP] : [])).filter((ip) => ip && ip !== "None");
}
