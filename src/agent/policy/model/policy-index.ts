/**
 * The cluster's NetworkPolicies, pods and namespaces kept so that one change costs work
 * in proportion to what it touches (Cilium's selector cache): each change says which of
 * this node's pods may now compile differently, and `compile` answers for one of them
 * from the caches, never by scanning the cluster. Pure: fed by the informers' change
 * callbacks, it makes no calls of its own.
 *
 * What it keeps:
 * - per selector peer (by key: equal selectors in many rules share one entry), the pods
 *   it chooses and, for a peer with a namespaceSelector, the namespaces it matches;
 * - per namespace, its pods, its local compile targets, its policies, the peers scoped
 *   to it and the cross-namespace peers whose namespaceSelector matches its labels;
 * - per policy, its parse and the local pods its podSelector selects; per local pod,
 *   the policies selecting it.
 *
 * So a pod's change visits the peers relevant to its namespace and invalidates only the
 * local pods of the policies whose rules choose it, before or after the change; a local
 * pod's own change visits the policies of its namespace; a namespace's label change, the
 * cross-namespace peers and that namespace's pods; a policy's change, its own peers (a
 * new peer is matched against the pods in its scope once) and the local pods of its
 * namespace. `work` counts what was visited, so tests can hold it to that.
 *
 * ClusterNetworkPolicies (keyed "cnp:<name>" where they share a map with NetworkPolicies'
 * "namespace/name", which no object name can collide with) are kept alike: per policy,
 * its parse and the local pods its subject selects; per local pod, the ones selecting
 * it. Their label-chosen peers are cross-namespace peer entries like any other, their
 * `nodes` peers entries of their own (the nodes each selects). So a ClusterNetworkPolicy's
 * change visits this node's targets once (and matches its new peers); a local pod's label
 * change tests it against every ClusterNetworkPolicy's subject; a namespace's label change
 * tests its local pods against the subjects whose namespace selector is not everything;
 * a node's change visits the `nodes` peers and names the pods of the policies whose peer
 * chose it, before or after, or whose addresses changed.
 *
 * All pods are peers; only pods on the local node (not hostNetwork, not finished) are
 * compile targets. The sets returned name local pods whose compiled policy may have
 * changed, including one that stopped being a target (deleted, finished): `compile` then
 * answers undefined and its datapath state can go.
 */

import { getOrMake } from "../../collections";
import {
  clusterNodePeersOf,
  clusterPolicyKey,
  clusterSelectorPeersOf,
  type NodePeer,
  type ParsedClusterPolicy,
  parseClusterPolicy,
} from "./cluster-parse";
import {
  type CompileMode,
  type CompileResult,
  type CompileSource,
  compilePod,
  isCompileTarget,
  isPeerCandidate,
  subjectSelects,
  type Tier,
  unreadableProblems,
  unreadableSelecting,
} from "./compile";
import type { KeptClusterPolicy, KeptPolicy, PolicyNamespace, PolicyNode, PolicyPod } from "./objects";
import {
  type ParsedPolicy,
  type PolicyParse,
  type PolicyProblem,
  type ProblemKind,
  parsePolicy,
  type SelectorPeer,
  selectorPeersOf,
} from "./parse";
import { type Labels, selectorMatches } from "./selectors";

/** What the index looked at, cumulatively. */
export interface IndexWork {
  /** Pods tested against a selector. */
  podsExamined: number;
  /** Selector peers looked at. */
  peersExamined: number;
  /** Namespaces tested against a namespaceSelector. */
  namespacesExamined: number;
  /** Nodes tested against a `nodes` peer's selector. */
  nodesExamined?: number;
}

interface NodePeerEntry {
  peer: NodePeer;
  /** ClusterNetworkPolicy key → how many of its rules use this peer. */
  users: Map<string, number>;
  /** The nodes it selects. */
  nodes: Set<string>;
}

/** A ClusterNetworkPolicy as the agent reports it. */
export interface ClusterPolicySummary {
  name: string;
  tier: Tier;
  priority: number;
  /** This node's pods its subject selects. */
  localPods: number;
  /** What could not be read and what was made of it (none: read as written). */
  problems: PolicyProblem[];
}

interface ClusterState {
  parse: ParsedClusterPolicy;
  /** The keys of the selector peers and the nodes peers it uses, once per use. */
  peerKeys: string[];
  nodePeerKeys: string[];
}

interface PeerEntry {
  peer: SelectorPeer;
  /** Policy key → how many of its rules use this peer. */
  users: Map<string, number>;
  /** The candidate pods it chooses. */
  pods: Set<string>;
  /** With a namespaceSelector: the namespaces it matches. */
  namespaces: Set<string>;
}

interface PolicyState {
  namespace: string;
  parse: PolicyParse;
  /** The keys of the peers it uses, once per use. */
  peerKeys: string[];
}

const NO_LABELS: Labels = {};
const sameJson = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
const podSelectorOf = (parse: PolicyParse) => (parse.ok ? parse.policy.podSelector : parse.podSelector);

export class PolicyIndex {
  readonly work: IndexWork = { podsExamined: 0, peersExamined: 0, namespacesExamined: 0 };
  private readonly pods = new Map<string, PolicyPod>();
  private readonly podsIn = new Map<string, Set<string>>();
  private readonly targetsIn = new Map<string, Set<string>>();
  private readonly namespaceLabels = new Map<string, Labels>();
  private readonly policies = new Map<string, PolicyState>();
  private readonly policiesIn = new Map<string, Set<string>>();
  private readonly peers = new Map<string, PeerEntry>();
  private readonly ownPeersIn = new Map<string, Set<string>>();
  private readonly crossPeers = new Set<string>();
  /** Every namespace with pods or an object → the cross-namespace peers matching its labels. */
  private readonly crossPeersOf = new Map<string, Set<string>>();
  private readonly selects = new Map<string, Set<string>>();
  private readonly selectedBy = new Map<string, Set<string>>();
  private readonly clusterPolicies = new Map<string, ClusterState>();
  private readonly clusterSelects = new Map<string, Set<string>>();
  private readonly clusterSelectedBy = new Map<string, Set<string>>();
  private readonly nodes = new Map<string, PolicyNode>();
  private readonly nodePeers = new Map<string, NodePeerEntry>();

  constructor(readonly localNode: string) {}

  /**
   * The first complete lists: everything before is forgotten. Returns every local target.
   * ClusterNetworkPolicies and Nodes: none when not given (the API has no such resource).
   */
  reset(
    pods: Iterable<PolicyPod>,
    namespaces: Iterable<PolicyNamespace>,
    policies: Iterable<KeptPolicy>,
    clusterPolicies: Iterable<KeptClusterPolicy> = [],
    nodes: Iterable<PolicyNode> = [],
  ): Set<string> {
    for (const map of [this.pods, this.podsIn, this.targetsIn, this.namespaceLabels, this.policies, this.policiesIn]) {
      map.clear();
    }
    for (const map of [this.peers, this.ownPeersIn, this.crossPeersOf, this.selects, this.selectedBy]) map.clear();
    for (const map of [this.clusterPolicies, this.clusterSelects, this.clusterSelectedBy, this.nodes, this.nodePeers]) {
      map.clear();
    }
    this.crossPeers.clear();
    for (const n of namespaces) this.namespaceChanged(n.name, undefined, n);
    for (const n of nodes) this.nodeChanged(n.name, undefined, n);
    for (const p of pods) this.podChanged(`${p.namespace}/${p.name}`, undefined, p);
    for (const p of policies) this.policyChanged(`${p.namespace}/${p.name}`, undefined, p);
    for (const c of clusterPolicies) this.clusterPolicyChanged(c.name, undefined, c);
    return new Set(this.localTargets());
  }

  localTargets(): string[] {
    return [...this.targetsIn.values()].flatMap((keys) => [...keys]);
  }

  // ---- pods ----------------------------------------------------------------------------

  /** A pod appeared, changed or went (`before` is the index's own copy; the argument is ignored). */
  podChanged(key: string, _before: PolicyPod | undefined, after: PolicyPod | undefined): Set<string> {
    const affected = new Set<string>();
    const before = this.pods.get(key);
    const namespace = after?.namespace ?? before?.namespace;
    if (namespace === undefined) return affected;
    if (after) {
      this.pods.set(key, after);
      getOrMake(this.podsIn, namespace, () => new Set()).add(key);
      this.knowNamespace(namespace);
    }
    if (peerFactsDiffer(before, after))
      this.updateMemberships(key, namespace, after, !samePeerFacts(before, after), affected);
    this.updateTarget(key, before, after, affected);
    if (!after) {
      this.pods.delete(key);
      deleteFrom(this.podsIn, namespace, key);
      this.forgetNamespaceIfUnused(namespace);
    }
    return affected;
  }

  /** Which peers choose the pod now; the local pods of their policies if that or its addresses changed. */
  private updateMemberships(
    key: string,
    namespace: string,
    after: PolicyPod | undefined,
    addressesChanged: boolean,
    affected: Set<string>,
  ): void {
    const relevant = [...(this.ownPeersIn.get(namespace) ?? []), ...(this.crossPeersOf.get(namespace) ?? [])];
    for (const peerKey of relevant) {
      this.work.peersExamined += 1;
      const entry = this.peers.get(peerKey);
      if (!entry) continue;
      const was = entry.pods.has(key);
      const now = after !== undefined && this.chooses(entry, after);
      if (was === now && !(now && addressesChanged)) continue;
      if (now) entry.pods.add(key);
      else entry.pods.delete(key);
      this.usersOf(entry, affected);
    }
  }

  private updateTarget(
    key: string,
    before: PolicyPod | undefined,
    after: PolicyPod | undefined,
    affected: Set<string>,
  ) {
    const wasTarget = before !== undefined && isCompileTarget(before, this.localNode);
    const isTarget = after !== undefined && isCompileTarget(after, this.localNode);
    if (!wasTarget && !isTarget) return;
    affected.add(key);
    if (wasTarget && isTarget && sameJson(before?.labels, after?.labels)) return;
    for (const policyKey of this.selectedBy.get(key) ?? []) this.selects.get(policyKey)?.delete(key);
    this.selectedBy.delete(key);
    for (const clusterKey of this.clusterSelectedBy.get(key) ?? []) this.clusterSelects.get(clusterKey)?.delete(key);
    this.clusterSelectedBy.delete(key);
    const namespace = (after ?? before)?.namespace as string;
    if (!isTarget || !after) {
      deleteFrom(this.targetsIn, namespace, key);
      return;
    }
    getOrMake(this.targetsIn, namespace, () => new Set()).add(key);
    for (const policyKey of this.policiesIn.get(namespace) ?? []) {
      const selector = podSelectorOf(this.policies.get(policyKey)?.parse as PolicyParse);
      this.work.podsExamined += 1;
      if (selector && selectorMatches(selector, after.labels)) this.select(policyKey, key);
    }
    const labels = this.namespaceLabels.get(namespace) ?? NO_LABELS;
    for (const [clusterKey, state] of this.clusterPolicies) {
      this.work.podsExamined += 1;
      if (subjectSelects(state.parse.subject, after, labels)) this.selectCluster(clusterKey, key);
    }
  }

  private selectCluster(clusterKey: string, podKey: string): void {
    getOrMake(this.clusterSelects, clusterKey, () => new Set()).add(podKey);
    getOrMake(this.clusterSelectedBy, podKey, () => new Set()).add(clusterKey);
  }

  private unselectCluster(clusterKey: string, podKey: string): void {
    deleteFrom(this.clusterSelects, clusterKey, podKey);
    deleteFrom(this.clusterSelectedBy, podKey, clusterKey);
  }

  private select(policyKey: string, podKey: string): void {
    getOrMake(this.selects, policyKey, () => new Set()).add(podKey);
    getOrMake(this.selectedBy, podKey, () => new Set()).add(policyKey);
  }

  // ---- namespaces ----------------------------------------------------------------------

  namespaceChanged(
    name: string,
    _before: PolicyNamespace | undefined,
    after: PolicyNamespace | undefined,
  ): Set<string> {
    const affected = new Set<string>();
    const labelsBefore = this.namespaceLabels.get(name) ?? NO_LABELS;
    if (after) this.namespaceLabels.set(name, after.labels);
    else this.namespaceLabels.delete(name);
    const labelsAfter = after?.labels ?? NO_LABELS;
    if (after) this.knowNamespace(name);
    const matching = this.crossPeersOf.get(name);
    const relabelled = !sameJson(labelsBefore, labelsAfter);
    if (matching && relabelled) {
      for (const peerKey of this.crossPeers) this.rematchNamespace(peerKey, name, labelsAfter, matching, affected);
    }
    if (relabelled) this.rematchSubjects(name, labelsAfter, affected);
    if (!after) this.forgetNamespaceIfUnused(name);
    return affected;
  }

  /** The namespace's local targets against the subjects whose namespace selector is not everything. */
  private rematchSubjects(name: string, labels: Labels, affected: Set<string>): void {
    const targets = this.targetsIn.get(name);
    if (!targets) return;
    for (const [clusterKey, state] of this.clusterPolicies) {
      if (state.parse.subject.namespaces.requirements.length === 0) continue;
      for (const podKey of targets) {
        const pod = this.pods.get(podKey);
        this.work.podsExamined += 1;
        const now = pod !== undefined && subjectSelects(state.parse.subject, pod, labels);
        if (now === (this.clusterSelects.get(clusterKey)?.has(podKey) ?? false)) continue;
        if (now) this.selectCluster(clusterKey, podKey);
        else this.unselectCluster(clusterKey, podKey);
        affected.add(podKey);
      }
    }
  }

  /** A cross-namespace peer against a namespace's new labels: its pods join or leave. */
  private rematchNamespace(
    peerKey: string,
    name: string,
    labels: Labels,
    matching: Set<string>,
    affected: Set<string>,
  ) {
    const entry = this.peers.get(peerKey);
    if (!entry?.peer.namespaces) return;
    this.work.peersExamined += 1;
    this.work.namespacesExamined += 1;
    const was = matching.has(peerKey);
    const now = selectorMatches(entry.peer.namespaces, labels);
    if (was === now) return;
    if (now) {
      matching.add(peerKey);
      entry.namespaces.add(name);
    } else {
      matching.delete(peerKey);
      entry.namespaces.delete(name);
    }
    let changed = false;
    for (const podKey of this.podsIn.get(name) ?? []) {
      const pod = this.pods.get(podKey);
      const chosen = now && pod !== undefined && this.chooses(entry, pod);
      if (chosen === entry.pods.has(podKey)) continue;
      changed = true;
      if (chosen) entry.pods.add(podKey);
      else entry.pods.delete(podKey);
    }
    if (changed) this.usersOf(entry, affected);
  }

  /** A namespace with pods or an object: its matching cross-namespace peers are kept. */
  private knowNamespace(name: string): void {
    if (this.crossPeersOf.has(name)) return;
    const labels = this.namespaceLabels.get(name) ?? NO_LABELS;
    const matching = new Set<string>();
    for (const peerKey of this.crossPeers) {
      const entry = this.peers.get(peerKey);
      this.work.namespacesExamined += 1;
      if (!entry?.peer.namespaces || !selectorMatches(entry.peer.namespaces, labels)) continue;
      matching.add(peerKey);
      entry.namespaces.add(name);
    }
    this.crossPeersOf.set(name, matching);
  }

  private forgetNamespaceIfUnused(name: string): void {
    if (this.namespaceLabels.has(name) || this.podsIn.has(name)) return;
    for (const peerKey of this.crossPeersOf.get(name) ?? []) this.peers.get(peerKey)?.namespaces.delete(name);
    this.crossPeersOf.delete(name);
  }

  // ---- policies ------------------------------------------------------------------------

  policyChanged(key: string, _before: KeptPolicy | undefined, after: KeptPolicy | undefined): Set<string> {
    const affected = new Set<string>();
    const old = this.policies.get(key);
    if (old) {
      this.policyTargets(key, old, affected);
      this.dropPolicy(key, old);
    }
    if (after) this.policyTargets(key, this.addPolicy(key, after), affected);
    return affected;
  }

  /** The local pods a policy's change may touch: those it selects, or all of its namespace's when unknown. */
  private policyTargets(key: string, state: PolicyState, affected: Set<string>): void {
    const known = podSelectorOf(state.parse) !== undefined;
    const targets = known ? this.selects.get(key) : this.targetsIn.get(state.namespace);
    for (const podKey of targets ?? []) affected.add(podKey);
  }

  private addPolicy(key: string, kept: KeptPolicy): PolicyState {
    const parse = parsePolicy(kept);
    const state: PolicyState = { namespace: kept.namespace, parse, peerKeys: [] };
    this.policies.set(key, state);
    getOrMake(this.policiesIn, kept.namespace, () => new Set()).add(key);
    const selector = podSelectorOf(parse);
    for (const podKey of selector ? (this.targetsIn.get(kept.namespace) ?? []) : []) {
      const pod = this.pods.get(podKey);
      this.work.podsExamined += 1;
      if (selector && pod && selectorMatches(selector, pod.labels)) this.select(key, podKey);
    }
    if (!parse.ok) return state;
    for (const peer of selectorPeersOf(parse.policy)) {
      const entry = this.peers.get(peer.key) ?? this.addPeer(peer);
      entry.users.set(key, (entry.users.get(key) ?? 0) + 1);
      state.peerKeys.push(peer.key);
    }
    return state;
  }

  private dropPolicy(key: string, state: PolicyState): void {
    for (const peerKey of state.peerKeys) this.releasePeer(peerKey, key);
    for (const podKey of this.selects.get(key) ?? []) this.selectedBy.get(podKey)?.delete(key);
    this.selects.delete(key);
    this.policies.delete(key);
    deleteFrom(this.policiesIn, state.namespace, key);
  }

  /** A peer no rule had before: matched once against the pods in its scope. */
  private addPeer(peer: SelectorPeer): PeerEntry {
    const entry: PeerEntry = { peer, users: new Map(), pods: new Set(), namespaces: new Set() };
    this.peers.set(peer.key, entry);
    let scope: Iterable<string> = [peer.namespace];
    if (peer.namespaces) {
      this.crossPeers.add(peer.key);
      scope = this.matchNewCrossPeer(entry, peer.namespaces);
    } else {
      getOrMake(this.ownPeersIn, peer.namespace, () => new Set()).add(peer.key);
    }
    for (const namespace of scope) {
      for (const podKey of this.podsIn.get(namespace) ?? []) {
        const pod = this.pods.get(podKey);
        if (pod && this.chooses(entry, pod)) entry.pods.add(podKey);
      }
    }
    return entry;
  }

  private matchNewCrossPeer(entry: PeerEntry, namespaces: NonNullable<SelectorPeer["namespaces"]>): Set<string> {
    for (const [name, matching] of this.crossPeersOf) {
      this.work.namespacesExamined += 1;
      if (!selectorMatches(namespaces, this.namespaceLabels.get(name) ?? NO_LABELS)) continue;
      matching.add(entry.peer.key);
      entry.namespaces.add(name);
    }
    return entry.namespaces;
  }

  private releasePeer(peerKey: string, policyKey: string): void {
    const entry = this.peers.get(peerKey);
    if (!entry) return;
    const uses = (entry.users.get(policyKey) ?? 1) - 1;
    if (uses > 0) entry.users.set(policyKey, uses);
    else entry.users.delete(policyKey);
    if (entry.users.size > 0) return;
    this.peers.delete(peerKey);
    if (!entry.peer.namespaces) {
      deleteFrom(this.ownPeersIn, entry.peer.namespace, peerKey);
      return;
    }
    this.crossPeers.delete(peerKey);
    for (const name of entry.namespaces) this.crossPeersOf.get(name)?.delete(peerKey);
  }

  // ---- ClusterNetworkPolicies ------------------------------------------------------------

  /** A ClusterNetworkPolicy (by name, its informer key) appeared, changed or went. */
  clusterPolicyChanged(
    name: string,
    _before: KeptClusterPolicy | undefined,
    after: KeptClusterPolicy | undefined,
  ): Set<string> {
    const key = clusterPolicyKey(name);
    const affected = new Set<string>();
    const old = this.clusterPolicies.get(key);
    if (old) {
      for (const podKey of this.clusterSelects.get(key) ?? []) affected.add(podKey);
      this.dropClusterPolicy(key, old);
    }
    if (after) {
      this.addClusterPolicy(key, after);
      for (const podKey of this.clusterSelects.get(key) ?? []) affected.add(podKey);
    }
    return affected;
  }

  private addClusterPolicy(key: string, kept: KeptClusterPolicy): void {
    const parse = parseClusterPolicy(kept);
    const state: ClusterState = { parse, peerKeys: [], nodePeerKeys: [] };
    this.clusterPolicies.set(key, state);
    for (const [namespace, targets] of this.targetsIn) {
      const labels = this.namespaceLabels.get(namespace) ?? NO_LABELS;
      for (const podKey of targets) {
        const pod = this.pods.get(podKey);
        this.work.podsExamined += 1;
        if (pod && subjectSelects(parse.subject, pod, labels)) this.selectCluster(key, podKey);
      }
    }
    for (const peer of clusterSelectorPeersOf(parse)) {
      const entry = this.peers.get(peer.key) ?? this.addPeer(peer);
      entry.users.set(key, (entry.users.get(key) ?? 0) + 1);
      state.peerKeys.push(peer.key);
    }
    for (const peer of clusterNodePeersOf(parse)) {
      const entry = this.nodePeers.get(peer.key) ?? this.addNodePeer(peer);
      entry.users.set(key, (entry.users.get(key) ?? 0) + 1);
      state.nodePeerKeys.push(peer.key);
    }
  }

  private dropClusterPolicy(key: string, state: ClusterState): void {
    for (const peerKey of state.peerKeys) this.releasePeer(peerKey, key);
    for (const peerKey of state.nodePeerKeys) {
      const entry = this.nodePeers.get(peerKey);
      if (!entry) continue;
      const uses = (entry.users.get(key) ?? 1) - 1;
      if (uses > 0) entry.users.set(key, uses);
      else entry.users.delete(key);
      if (entry.users.size === 0) this.nodePeers.delete(peerKey);
    }
    for (const podKey of this.clusterSelects.get(key) ?? []) deleteFrom(this.clusterSelectedBy, podKey, key);
    this.clusterSelects.delete(key);
    this.clusterPolicies.delete(key);
  }

  /** A nodes peer no rule had before: matched once against every node. */
  private addNodePeer(peer: NodePeer): NodePeerEntry {
    const entry: NodePeerEntry = { peer, users: new Map(), nodes: new Set() };
    this.nodePeers.set(peer.key, entry);
    for (const node of this.nodes.values()) {
      this.work.nodesExamined = (this.work.nodesExamined ?? 0) + 1;
      if (selectorMatches(peer.nodes, node.labels)) entry.nodes.add(node.name);
    }
    return entry;
  }

  // ---- nodes ----------------------------------------------------------------------------

  /** A Node appeared, changed or went (`before` is the index's own copy; the argument is ignored). */
  nodeChanged(name: string, _before: PolicyNode | undefined, after: PolicyNode | undefined): Set<string> {
    const affected = new Set<string>();
    const before = this.nodes.get(name);
    if (after) this.nodes.set(name, after);
    else this.nodes.delete(name);
    const readdressed = !sameJson(before?.addresses, after?.addresses);
    for (const entry of this.nodePeers.values()) {
      this.work.peersExamined += 1;
      this.work.nodesExamined = (this.work.nodesExamined ?? 0) + 1;
      const was = entry.nodes.has(name);
      const now = after !== undefined && selectorMatches(entry.peer.nodes, after.labels);
      if (was === now && !(now && readdressed)) continue;
      if (now) entry.nodes.add(name);
      else entry.nodes.delete(name);
      for (const clusterKey of entry.users.keys()) {
        for (const podKey of this.clusterSelects.get(clusterKey) ?? []) affected.add(podKey);
      }
    }
    return affected;
  }

  // ---- shared --------------------------------------------------------------------------

  private chooses(entry: PeerEntry, pod: PolicyPod): boolean {
    this.work.podsExamined += 1;
    if (!isPeerCandidate(pod)) return false;
    const { peer } = entry;
    const inScope = peer.namespaces ? entry.namespaces.has(pod.namespace) : pod.namespace === peer.namespace;
    return inScope && selectorMatches(peer.pods, pod.labels);
  }

  /** The local pods selected by the policies (NetworkPolicies and ClusterNetworkPolicies) that use a peer. */
  private usersOf(entry: PeerEntry, affected: Set<string>): void {
    for (const policyKey of entry.users.keys()) {
      const selected = this.selects.get(policyKey) ?? this.clusterSelects.get(policyKey) ?? [];
      for (const podKey of selected) affected.add(podKey);
    }
  }

  // ---- answers -------------------------------------------------------------------------

  /** A local target's compiled policy; undefined for a pod that is none. */
  compile(podKey: string, mode: CompileMode = "enforced"): CompileResult | undefined {
    const pod = this.pods.get(podKey);
    if (!pod || !isCompileTarget(pod, this.localNode)) return undefined;
    const source: CompileSource = {
      selecting: () => this.selectingPolicies(podKey),
      unreadable: (p) => unreadableSelecting(p, this.parsesIn(pod.namespace)),
      peerPods: (peer) => this.peerPods(peer),
      clusterSelecting: () => this.clusterSelecting(podKey),
      nodeAddresses: (peer) => this.nodeAddresses(peer),
    };
    const result = compilePod(pod, source, mode);
    result.problems.unshift(...unreadableProblems(pod, this.parsesIn(pod.namespace)));
    return result;
  }

  private selectingPolicies(podKey: string): ParsedPolicy[] {
    const policies: ParsedPolicy[] = [];
    for (const policyKey of this.selectedBy.get(podKey) ?? []) {
      const parse = this.policies.get(policyKey)?.parse;
      if (parse?.ok) policies.push(parse.policy);
    }
    return policies;
  }

  private clusterSelecting(podKey: string): ParsedClusterPolicy[] {
    const selecting: ParsedClusterPolicy[] = [];
    for (const clusterKey of this.clusterSelectedBy.get(podKey) ?? []) {
      const state = this.clusterPolicies.get(clusterKey);
      if (state) selecting.push(state.parse);
    }
    return selecting;
  }

  private nodeAddresses(peer: NodePeer): string[] {
    const names = this.nodePeers.get(peer.key)?.nodes ?? [];
    return [...names].flatMap((name) => this.nodes.get(name)?.addresses ?? []);
  }

  private peerPods(peer: SelectorPeer): PolicyPod[] {
    const keys = this.peers.get(peer.key)?.pods ?? [];
    return [...keys].map((k) => this.pods.get(k)).filter((p): p is PolicyPod => p !== undefined);
  }

  private parsesIn(namespace: string): PolicyParse[] {
    return [...(this.policiesIn.get(namespace) ?? [])].map((k) => this.policies.get(k)?.parse as PolicyParse);
  }

  /** Every unreadable policy's problems: what the agent reports and counts. */
  policyProblems(): PolicyProblem[] {
    return [...this.policies.values()].flatMap((s) => (s.parse.ok ? [] : s.parse.problems));
  }

  /** One policy's problems: none while it is readable (or unknown). */
  problemsOf(policyKey: string): PolicyProblem[] {
    const parse = this.policies.get(policyKey)?.parse;
    return parse && !parse.ok ? parse.problems : [];
  }

  /** Each ClusterNetworkPolicy that could not be read as written, by name: its problems (for its status). */
  clusterPolicyProblems(): Map<string, PolicyProblem[]> {
    const out = new Map<string, PolicyProblem[]>();
    for (const state of this.clusterPolicies.values()) {
      if (state.parse.problems.length > 0) out.set(state.parse.name, state.parse.problems);
    }
    return out;
  }

  /**
   * Whether a ClusterNetworkPolicy's subject may select pods of a namespace with these
   * labels (its namespace selector matches them): such a namespace is marked as one with
   * policies, so a pod ADD wires there before the agent judged it waits for its verdict.
   */
  clusterSubjectsCover(namespaceLabels: Labels): boolean {
    for (const state of this.clusterPolicies.values()) {
      if (selectorMatches(state.parse.subject.namespaces, namespaceLabels)) return true;
    }
    return false;
  }

  /** Every ClusterNetworkPolicy as read: its tier, priority, local pods selected and problems, by name. */
  clusterPolicySummaries(): ClusterPolicySummary[] {
    return [...this.clusterPolicies.entries()]
      .map(([key, state]) => ({
        name: state.parse.name,
        tier: state.parse.tier,
        priority: state.parse.priority,
        localPods: this.clusterSelects.get(key)?.size ?? 0,
        problems: state.parse.problems,
      }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Unreadable policies by kind of problem (a policy counts once per kind it has). */
  problemCounts(): Partial<Record<ProblemKind, number>> {
    const counts: Partial<Record<ProblemKind, number>> = {};
    for (const state of this.policies.values()) {
      if (state.parse.ok) continue;
      for (const kind of new Set(state.parse.problems.map((p) => p.kind))) counts[kind] = (counts[kind] ?? 0) + 1;
    }
    return counts;
  }
}

/** Whether anything a peer reads of a pod differs: labels, scope, candidacy, addresses, ports. */
function peerFactsDiffer(before: PolicyPod | undefined, after: PolicyPod | undefined): boolean {
  if (!before || !after) return true;
  return (
    !sameJson(before.labels, after.labels) ||
    isPeerCandidate(before) !== isPeerCandidate(after) ||
    !samePeerFacts(before, after)
  );
}

/** What a chosen pod puts in compiled rules: its addresses, and its ports for named egress ports. */
function samePeerFacts(before: PolicyPod | undefined, after: PolicyPod | undefined): boolean {
  return (
    before !== undefined &&
    after !== undefined &&
    sameJson(before.ips, after.ips) &&
    sameJson(before.ports, after.ports)
  );
}

function deleteFrom<K, V>(map: Map<K, Set<V>>, key: K, value: V): void {
  const set = map.get(key);
  if (!set) return;
  set.delete(value);
  if (set.size === 0) map.delete(key);
}
