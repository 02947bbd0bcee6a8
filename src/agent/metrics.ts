/**
 * The agent's Prometheus metrics (prom-client). Read at each scrape from where the facts
 * live: per pod, the fast path's counters, rate-limit drops, flow table and Service
 * translation state from the pinned maps (as `netkit-cni endpoints` reads them), each
 * map's occupancy (as `status` does), and the plugin's verb timings (verb-log.ts); the
 * agent's own routes, peers, syncs and errors are set by its controllers as they happen;
 * NetworkPolicy's unreadable policies, pods past a datapath bound and pods whose policy
 * could not be written in full are read from its controller at each collect, every kind
 * present (0 when none has it).
 *
 * A pod is labelled namespace/name where the runtime passed K8S_POD_NAMESPACE and
 * K8S_POD_NAME to ADD, else by its container id.
 *
 * With --flows, each flow record is counted by its ends' namespaces and verdict as the
 * reader hands it over (countFlow), at most a bounded number of namespace pairs (a
 * cluster's namespaces are many; each pair is a series), the rest under "other".
 */
import * as fs from "node:fs";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { type PolicyVerdictCount, pinnedMapOccupancy } from "../bpf/index";
import { podNames } from "../commands/agent-state";
import { listEndpoints } from "../commands/endpoints";
import type { FlowEnd, FlowRecord } from "../flows/record";
import { agentLog } from "./log";
import type { PolicyController } from "./policy/controller";
import { MAX_PORT_RANGES, MAX_RULES } from "./policy/model/compile";
import { BOUND_KINDS, CLUSTER_UNREADABLE_KINDS, UNREADABLE_KINDS } from "./policy/model/parse";
import type { PeerState } from "./routes/plan";
import { VerbLog } from "./verb-log";
import type { VerbCounts } from "./verbs/server";

const POD = ["pod", "interface"];
const PEER_STATES: PeerState[] = ["routed", "unreachable", "conflict", "no-address", "no-pod-cidr", "outside-cluster"];

const PATHS = [
  ["redirected", "redirected"],
  ["passedStack", "stack"],
  ["dropped", "dropped"],
] as const;

/** "redirectedFib" → ["redirected", "fib"]; "passedStack" → ["stack", "default"]. */
export function counterPath(name: string): { path: string; reason: string } | undefined {
  for (const [prefix, path] of PATHS) {
    if (!name.startsWith(prefix)) continue;
    const rest = name.slice(prefix.length);
    const reason = rest === "" ? "default" : rest.replace(/[A-Z]/g, (c, i) => (i === 0 ? c : `-${c}`)).toLowerCase();
    return { path, reason };
  }
  return undefined;
}

/** Distinct (source, destination) namespace pairs netkit_cni_flows_total keeps apart. */
export const DEFAULT_FLOW_NAMESPACE_PAIRS = 200;

/** A pod's namespace; what is not a pod, its kind (a Service's namespace is not its own series). */
const flowNamespace = (end: FlowEnd) => (end.kind === "pod" ? (end.namespace ?? "pod") : end.kind);

export class AgentMetrics {
  readonly registry = new Registry();
  readonly routes: Gauge;
  readonly peers: Gauge;
  readonly syncErrors: Counter;
  readonly syncSeconds: Histogram;
  readonly apiErrors: Counter;
  readonly synced: Gauge;
  readonly retiredDeleted: Counter;
  /** Verbs plugins handed to the agent (--serve-verbs), by verb and outcome. */
  readonly handedVerbs: Counter;
  private readonly verbLog: VerbLog;
  private readonly verbs: Histogram;
  private readonly packets: Counter;
  private readonly limitDrops: Counter;
  private readonly policyFlows: Counter;
  private readonly flowEntries: Gauge;
  private readonly flowCapacity: Gauge;
  private readonly evictions: Counter;
  private readonly svcAffinity: Gauge;
  private readonly svcEvents: Counter;
  private readonly pods: Gauge;
  private readonly mapEntries: Gauge;
  private readonly mapCapacity: Gauge;
  private policy:
    | (Pick<PolicyController, "unreadableCounts" | "overBoundCounts" | "incompleteCounts"> &
        Partial<Pick<PolicyController, "clusterCounts">>)
    | undefined;
  private policyVerdicts: (() => readonly PolicyVerdictCount[]) | undefined;
  private readonly flows: Counter;
  private readonly flowPairs = new Set<string>();
  private flowRecordsLost = 0;

  constructor(
    private readonly bpffsRoot: string,
    private readonly stateDir: string,
    private readonly flowNamespacePairs = DEFAULT_FLOW_NAMESPACE_PAIRS,
  ) {
    const registry = this.registry;
    this.verbLog = new VerbLog(stateDir);
    this.routes = new Gauge({
      name: "netkit_cni_agent_routes",
      help: "Routes the agent keeps to other nodes' pod CIDRs",
      labelNames: ["family"],
      registers: [registry],
    });
    this.peers = new Gauge({
      name: "netkit_cni_agent_peers",
      help: "Other nodes by how the agent handles them (routed, unreachable, conflict, no-address, no-pod-cidr, outside-cluster)",
      labelNames: ["state"],
      registers: [registry],
    });
    this.syncErrors = new Counter({
      name: "netkit_cni_agent_sync_errors_total",
      help: "Failed syncs, by controller (conflist, routes, masquerade, services)",
      labelNames: ["step"],
      registers: [registry],
    });
    this.syncSeconds = new Histogram({
      name: "netkit_cni_agent_sync_duration_seconds",
      help: "Time one sync of a key took, by controller (a key: one node, one Service, or * for all)",
      labelNames: ["controller"],
      buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [registry],
    });
    this.retiredDeleted = new Counter({
      name: "netkit_cni_agent_retired_devices_deleted_total",
      help: 'Device pairs a DEL with "teardown": "deferred" left retired that the agent deleted',
      registers: [registry],
    });
    this.handedVerbs = new Counter({
      name: "netkit_cni_agent_handed_verbs_total",
      help: "Verbs plugins handed to the agent, by verb and outcome (ok, error, or declined: the plugin did it)",
      labelNames: ["verb", "outcome"],
      registers: [registry],
    });
    this.apiErrors = new Counter({
      name: "netkit_cni_agent_api_errors_total",
      help: "Failed lists and watches of the Kubernetes API",
      registers: [registry],
    });
    this.synced = new Gauge({
      name: "netkit_cni_agent_synced",
      help: "1 once the conflist and the routes of a complete node list are written",
      registers: [registry],
    });
    this.verbs = new Histogram({
      name: "netkit_cni_verb_duration_seconds",
      help: "Time the plugin took per verb, as it recorded it",
      labelNames: ["verb", "result"],
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    });
    this.packets = new Counter({
      name: "netkit_cni_pod_packets_total",
      help: "Packets a pod sent, by the path the fast path gave them (redirected, stack, dropped) and why",
      labelNames: [...POD, "path", "reason"],
      registers: [registry],
    });
    this.limitDrops = new Counter({
      name: "netkit_cni_pod_limit_drops_total",
      help: "Packets dropped by a pod's rate limit, by direction",
      labelNames: [...POD, "direction"],
      registers: [registry],
    });
    this.flowEntries = new Gauge({
      name: "netkit_cni_pod_flow_table_entries",
      help: "Flows a pod's direct-flow table holds",
      labelNames: POD,
      registers: [registry],
    });
    this.flowCapacity = new Gauge({
      name: "netkit_cni_pod_flow_table_capacity",
      help: "Flows a pod's direct-flow table can hold",
      labelNames: POD,
      registers: [registry],
    });
    this.evictions = new Counter({
      name: "netkit_cni_pod_flow_table_evictions_total",
      help: "Flows the LRU took out of a pod's direct-flow table to make room",
      labelNames: POD,
      registers: [registry],
    });
    this.svcAffinity = new Gauge({
      name: "netkit_cni_pod_service_affinity_held",
      help: "Services a pod's ClientIP affinity holds it to (its own, at most 32)",
      labelNames: POD,
      registers: [registry],
    });
    this.svcEvents = new Counter({
      name: "netkit_cni_pod_service_state_total",
      help: "A pod's Service translation state refused (no-socket-state: left to the stack) or given up of its own (socket-replaced, affinity-replaced)",
      labelNames: [...POD, "event"],
      registers: [registry],
    });
    this.policyFlows = new Counter({
      name: "netkit_cni_pod_policy_flows_total",
      help: "New flows a pod's NetworkPolicy judged, by direction and verdict (allowed, denied)",
      labelNames: [...POD, "direction", "verdict"],
      registers: [registry],
    });
    // Read at each collect; registered, so kept by the registry.
    const metrics = this;
    new Counter({
      name: "netkit_cni_network_policy_verdicts_total",
      help: "New flows the node's policy rules judged, by direction, the tier that decided (admin and baseline: a ClusterNetworkPolicy rule; networkPolicy: the pod's NetworkPolicies; none: no tier decided, or not judged the rules' way: pending, incomplete, unreadable) and verdict",
      labelNames: ["direction", "tier", "verdict"],
      registers: [registry],
      collect() {
        const read = metrics.policyVerdicts;
        if (!read) return;
        this.reset();
        try {
          for (const c of read())
            this.inc({ direction: c.direction, tier: c.tier, verdict: c.verdict }, Number(c.flows));
        } catch (e) {
          agentLog.warn(`metrics: cannot read the policy verdicts: ${(e as Error).message}`);
        }
      },
    });
    new Gauge({
      name: "netkit_cni_network_policies_unreadable",
      help: "NetworkPolicies the agent cannot read, each isolating what it selects and allowing nothing, by kind of problem (a policy counts once per kind it has)",
      labelNames: ["kind"],
      registers: [registry],
      collect() {
        this.reset();
        const policy = metrics.policy;
        if (!policy) return;
        const counts = policy.unreadableCounts();
        for (const kind of UNREADABLE_KINDS) this.set({ kind }, counts[kind] ?? 0);
      },
    });
    new Gauge({
      name: "netkit_cni_cluster_network_policies",
      help: "ClusterNetworkPolicies the agent reads, by tier (none while the CRD is not installed)",
      labelNames: ["tier"],
      registers: [registry],
      collect() {
        this.reset();
        const counts = metrics.policy?.clusterCounts?.();
        if (!counts) return;
        for (const [tier, n] of Object.entries(counts.byTier)) this.set({ tier }, n);
      },
    });
    new Gauge({
      name: "netkit_cni_cluster_network_policies_unreadable",
      help: "ClusterNetworkPolicies not read in full, by kind of problem (a policy counts once per kind it has): an unreadable Accept rule matches nothing, a Deny or Pass rule denies everything, domainNames match nothing",
      labelNames: ["kind"],
      registers: [registry],
      collect() {
        this.reset();
        const counts = metrics.policy?.clusterCounts?.();
        if (!counts) return;
        for (const kind of [...UNREADABLE_KINDS, ...CLUSTER_UNREADABLE_KINDS])
          this.set({ kind }, counts.unreadable[kind] ?? 0);
      },
    });
    new Gauge({
      name: "netkit_cni_network_policy_pods_over_bound",
      help: `Local pods whose policy in a direction is past a datapath bound (rules-bound: ${MAX_RULES} rules, port-ranges-bound: ${MAX_PORT_RANGES} port ranges a rule), so that direction denies everything`,
      labelNames: ["direction", "kind"],
      registers: [registry],
      collect() {
        this.reset();
        const policy = metrics.policy;
        if (!policy) return;
        for (const direction of ["ingress", "egress"]) for (const kind of BOUND_KINDS) this.set({ direction, kind }, 0);
        for (const c of policy.overBoundCounts()) this.set({ direction: c.direction, kind: c.kind }, c.pods);
      },
    });
    new Gauge({
      name: "netkit_cni_network_policy_pods_incomplete",
      help: "Local pods whose policy the agent could not write in full (a full map, a write error), so that direction denies everything until a retry writes it",
      labelNames: ["direction"],
      registers: [registry],
      collect() {
        this.reset();
        const policy = metrics.policy;
        if (!policy) return;
        for (const direction of ["ingress", "egress"]) this.set({ direction }, 0);
        for (const c of policy.incompleteCounts()) this.set({ direction: c.direction }, c.pods);
      },
    });
    this.flows = new Counter({
      name: "netkit_cni_flows_total",
      help: `Flow records (--flows), by the ends' namespaces (a pod's; world, node or service for what is not a pod) and verdict; past ${flowNamespacePairs} namespace pairs, the rest count under other/other`,
      labelNames: ["source_namespace", "destination_namespace", "verdict"],
      registers: [registry],
    });
    new Counter({
      name: "netkit_cni_flow_records_lost_total",
      help: "Flow records the datapath could not hand to the agent (its ring was full)",
      registers: [registry],
      collect() {
        this.reset();
        this.inc(metrics.flowRecordsLost);
      },
    });
    this.pods = new Gauge({
      name: "netkit_cni_pods",
      help: "Pod interfaces the plugin wired on this node",
      registers: [registry],
    });
    this.mapEntries = new Gauge({
      name: "netkit_cni_map_entries",
      help: "Entries a pinned eBPF map holds",
      labelNames: ["map", "kind"],
      registers: [registry],
    });
    this.mapCapacity = new Gauge({
      name: "netkit_cni_map_capacity",
      help: "Entries a pinned eBPF map can hold (max_entries)",
      labelNames: ["map", "kind"],
      registers: [registry],
    });
  }

  /** Reads the facts that live outside the agent; called before each scrape is rendered. */
  async refresh(): Promise<void> {
    for (const t of this.verbLog.read()) this.verbs.observe({ verb: t.verb, result: t.ok ? "ok" : "error" }, t.seconds);
    await this.refreshPods();
    this.refreshMaps();
  }

  /** The node's counts of new flows judged by policy, by direction, deciding tier and verdict (the maps'). */
  watchPolicyVerdicts(read: () => readonly PolicyVerdictCount[]): void {
    this.policyVerdicts = read;
  }

  /** NetworkPolicy's controller, whose skipped policies and pods past a bound are counted from now on. */
  watchPolicy(
    policy: Pick<PolicyController, "unreadableCounts" | "overBoundCounts" | "incompleteCounts"> &
      Partial<Pick<PolicyController, "clusterCounts">>,
  ): void {
    this.policy = policy;
  }

  countFlow(record: FlowRecord): void {
    let source = flowNamespace(record.source);
    let destination = flowNamespace(record.destination);
    const pair = `${source}\n${destination}`;
    if (!this.flowPairs.has(pair)) {
      if (this.flowPairs.size < this.flowNamespacePairs) this.flowPairs.add(pair);
      else source = destination = "other";
    }
    this.flows.inc({ source_namespace: source, destination_namespace: destination, verdict: record.verdict });
  }

  /** The datapath's count of flow records it lost, as the reader last read it. */
  /** The counts of verbs the agent does for plugins (verbs/server.ts). */
  verbCounts(): VerbCounts {
    return {
      served: (verb, exitCode) => this.handedVerbs.inc({ verb, outcome: exitCode === 0 ? "ok" : "error" }),
      declined: () => this.handedVerbs.inc({ verb: "", outcome: "declined" }),
    };
  }

  setFlowRecordsLost(n: number): void {
    this.flowRecordsLost = n;
  }

  setPeers(peers: Iterable<{ state: PeerState }>, routesByFamily: { v4: number; v6: number }): void {
    const counts = new Map<PeerState, number>(PEER_STATES.map((s) => [s, 0]));
    for (const p of peers) counts.set(p.state, (counts.get(p.state) ?? 0) + 1);
    for (const [state, n] of counts) this.peers.set({ state }, n);
    this.routes.set({ family: "ipv4" }, routesByFamily.v4);
    this.routes.set({ family: "ipv6" }, routesByFamily.v6);
  }

  private async refreshPods(): Promise<void> {
    const { packets, limitDrops, flowEntries, flowCapacity, evictions, svcAffinity, svcEvents, policyFlows } = this;
    for (const m of [packets, limitDrops, flowEntries, flowCapacity, evictions, svcAffinity, svcEvents, policyFlows])
      m.reset();
    let rows: Awaited<ReturnType<typeof listEndpoints>> = [];
    try {
      rows = await listEndpoints(this.bpffsRoot);
    } catch (e) {
      agentLog.warn(`metrics: cannot read the endpoints: ${(e as Error).message}`);
    }
    const names = podNames(this.stateDir);
    const live = new Set<string>();
    for (const r of rows) {
      const key = `${r.containerId}/${r.ifname}`;
      live.add(key);
      const named = names.get(key);
      const pod = named?.namespace && named.name ? `${named.namespace}/${named.name}` : r.containerId;
      const l = { pod, interface: r.ifname };
      for (const [name, value] of Object.entries(r.counters ?? {})) {
        const p = counterPath(name);
        if (p) packets.inc({ ...l, ...p }, value);
      }
      if (r.limits?.ingress) limitDrops.inc({ ...l, direction: "ingress" }, r.limits.ingress.dropped);
      if (r.limits?.egress) limitDrops.inc({ ...l, direction: "egress" }, r.limits.egress.dropped);
      if (r.flowTable) {
        flowEntries.set(l, r.flowTable.entries);
        flowCapacity.set(l, r.flowTable.capacity);
        evictions.inc(l, Math.max(0, r.flowTable.evicted));
      }
      if (r.services) {
        svcAffinity.set(l, r.services.affinityHeld);
        svcEvents.inc({ ...l, event: "no-socket-state" }, r.services.noSocketState);
        svcEvents.inc({ ...l, event: "socket-replaced" }, r.services.socketReplaced);
        svcEvents.inc({ ...l, event: "affinity-replaced" }, r.services.affinityReplaced);
      }
      if (r.policy) {
        for (const direction of ["ingress", "egress"] as const) {
          policyFlows.inc({ ...l, direction, verdict: "allowed" }, r.policy.allowed[direction]);
          policyFlows.inc({ ...l, direction, verdict: "denied" }, r.policy.denied[direction]);
        }
      }
    }
    // A name whose pod went without a DEL through this node's plugin (GC): dropped
    // once it is old enough not to be an ADD still under way.
    for (const [key, named] of names) {
      if (live.has(key)) continue;
      try {
        if (Date.now() - fs.statSync(named.file).mtimeMs > 60_000) fs.rmSync(named.file, { force: true });
      } catch {
        // gone already
      }
    }
    this.pods.set(rows.length);
  }

  private refreshMaps(): void {
    this.mapEntries.reset();
    this.mapCapacity.reset();
    let maps: ReturnType<typeof pinnedMapOccupancy> = [];
    try {
      maps = fs.existsSync(this.bpffsRoot) ? pinnedMapOccupancy(this.bpffsRoot) : [];
    } catch (e) {
      agentLog.warn(`metrics: cannot read the maps: ${(e as Error).message}`);
    }
    for (const m of maps) {
      this.mapEntries.set({ map: m.name, kind: m.kind }, m.entries);
      this.mapCapacity.set({ map: m.name, kind: m.kind }, m.capacity);
    }
  }
}
