/**
 * A CompileSource that scans the objects it was given for every answer and keeps no
 * cache: the plain reading of the semantics, which the incremental index
 * (policy-index.ts) must agree with, and a way to compile a few pods without building
 * one. Pure.
 */
import { type NodePeer, type ParsedClusterPolicy, parseClusterPolicy } from "./cluster-parse";
import {
  type CompileResult,
  type CompileSource,
  compilePod,
  isPeerCandidate,
  peerChooses,
  subjectSelects,
  type UnreadableSelecting,
  unreadableProblems,
  unreadableSelecting,
} from "./compile";
import type { KeptClusterPolicy, KeptPolicy, PolicyNamespace, PolicyNode, PolicyPod } from "./objects";
import { type ParsedPolicy, type PolicyParse, parsePolicy, type SelectorPeer } from "./parse";
import { type Labels, selectorMatches } from "./selectors";

export class PolicySnapshot implements CompileSource {
  readonly pods: readonly PolicyPod[];
  readonly parses: readonly PolicyParse[];
  readonly clusterPolicies: readonly ParsedClusterPolicy[];
  readonly nodes: readonly PolicyNode[];
  private readonly namespaceLabels: ReadonlyMap<string, Labels>;

  constructor(
    pods: Iterable<PolicyPod>,
    namespaces: Iterable<PolicyNamespace>,
    policies: Iterable<KeptPolicy>,
    clusterPolicies: Iterable<KeptClusterPolicy> = [],
    nodes: Iterable<PolicyNode> = [],
  ) {
    this.pods = [...pods];
    this.namespaceLabels = new Map([...namespaces].map((n) => [n.name, n.labels]));
    this.parses = [...policies].map(parsePolicy);
    this.clusterPolicies = [...clusterPolicies].map(parseClusterPolicy);
    this.nodes = [...nodes];
  }

  clusterSelecting(pod: PolicyPod): ParsedClusterPolicy[] {
    const labels = this.namespaceLabels.get(pod.namespace) ?? {};
    return this.clusterPolicies.filter((c) => subjectSelects(c.subject, pod, labels));
  }

  nodeAddresses(peer: NodePeer): string[] {
    return this.nodes.filter((n) => selectorMatches(peer.nodes, n.labels)).flatMap((n) => n.addresses);
  }

  selecting(pod: PolicyPod): ParsedPolicy[] {
    const selecting: ParsedPolicy[] = [];
    for (const parse of this.parses) {
      if (!parse.ok || parse.policy.namespace !== pod.namespace) continue;
      if (selectorMatches(parse.policy.podSelector, pod.labels)) selecting.push(parse.policy);
    }
    return selecting;
  }

  unreadable(pod: PolicyPod): UnreadableSelecting[] {
    return unreadableSelecting(pod, this.parses);
  }

  peerPods(peer: SelectorPeer): PolicyPod[] {
    return this.pods.filter(
      (pod) => isPeerCandidate(pod) && peerChooses(peer, pod, this.namespaceLabels.get(pod.namespace) ?? {}),
    );
  }

  /** The pod's compiled policy, with the problems of the unreadable policies that may select it first. */
  compile(pod: PolicyPod): CompileResult {
    const result = compilePod(pod, this);
    if (isPeerCandidate(pod)) result.problems.unshift(...unreadableProblems(pod, this.parses));
    return result;
  }
}
