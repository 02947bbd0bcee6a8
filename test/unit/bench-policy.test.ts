/**
 * The NetworkPolicy section's pure parts: the 100 policies it writes (bench/lib/policy-set.ts)
 * and which of them select which pods, as the agent's compiler reads them; its report
 * (bench/lib/policy-report.ts) from a made-up run.
 */
import { describe, expect, it } from "vitest";
import { crossingsUnchanged, policyRatioTable, policySection, policyTargets } from "../../bench/lib/policy-report";
import type { PolicyCrossing, PolicyRun } from "../../bench/lib/policy-result";
import {
  CLUSTER_POLICY_COUNT,
  DENIED_PORT,
  localPods,
  NETPERF_PORTS,
  type NetperfPod,
  namespacesWithPolicies,
  POLICY_COUNT,
  policyCluster,
  SELECTED_NS,
  UNJUDGED_NS,
} from "../../bench/lib/policy-set";
import { podRules } from "../../src/agent/policy/controller";
import { compileCluster, compiledAllows, snapshotOf } from "../../test/support/policy-cluster";

const netperfPods: NetperfPod[] = [
  { name: "client", role: "client", node: "a", ips: ["10.244.0.2", "fd00:244::2"] },
  { name: "server-b", role: "server", node: "b", ips: ["10.244.1.2", "fd00:244:1::2"] },
  { name: "server-a", role: "server", node: "a", ips: ["10.244.0.3", "fd00:244::3"] },
];
const cluster = policyCluster(netperfPods);

describe("the NetworkPolicy section's policies", () => {
  it("are 100, six of them in the netperf pods' namespace and none in the unjudged one", () => {
    expect(cluster.policies).toHaveLength(POLICY_COUNT);
    expect(cluster.policies.filter((p) => p.metadata.namespace === SELECTED_NS)).toHaveLength(6);
    expect(namespacesWithPolicies(cluster)).toEqual([SELECTED_NS, "tenant-a", "tenant-b", "tenant-c"]);
    expect(namespacesWithPolicies(cluster)).not.toContain(UNJUDGED_NS);
  });

  it("select the servers by three ingress policies and the client by three egress ones", () => {
    const snapshot = snapshotOf(cluster);
    const selectedBy = (name: string) => {
      const target = snapshot.pods.find((p) => p.namespace === SELECTED_NS && p.name === name);
      if (!target) throw new Error(`no pod ${name}`);
      const { policy, selectedBy } = snapshot.compile(target);
      return { by: [...selectedBy].sort(), ingress: policy.ingress !== undefined, egress: policy.egress !== undefined };
    };
    const servers = ["server-from-client", "server-from-frontends", "server-from-monitoring"];
    for (const server of ["server-a", "server-b"]) {
      expect(selectedBy(server)).toEqual({
        by: servers.map((n) => `${SELECTED_NS}/${n}`),
        ingress: true,
        egress: false,
      });
    }
    const client = ["client-to-databases", "client-to-dns", "client-to-server"];
    expect(selectedBy("client")).toEqual({
      by: client.map((n) => `${SELECTED_NS}/${n}`),
      ingress: false,
      egress: true,
    });
  });

  it("give each of the other 94 one app's pods, one on each node, isolated both ways", () => {
    const compiled = compileCluster(cluster);
    const others = [...compiled].filter(([key]) => key.startsWith("tenant-"));
    expect(others).toHaveLength(2 * (POLICY_COUNT - 6));
    expect(others.every(([, p]) => p.ingress !== undefined && p.egress !== undefined)).toBe(true);
    expect(localPods(cluster, "a")).toHaveLength(94 + 2);
    expect(localPods(cluster, "b")).toHaveLength(94 + 1);
  });

  it("allow netperf's traffic both ways and nothing else from the client", () => {
    const compiled = compileCluster(cluster);
    const probe = (to: string, port: number) =>
      compiledAllows(cluster, compiled, {
        from: { pod: `${SELECTED_NS}/client` },
        to: { pod: to },
        port,
        protocol: "TCP",
      });
    for (const port of NETPERF_PORTS) {
      expect(probe(`${SELECTED_NS}/server-b`, port)).toBe(true);
      expect(probe(`${SELECTED_NS}/server-a`, port)).toBe(true);
    }
    expect(probe(`${SELECTED_NS}/server-b`, 8080)).toBe(false);
    expect(probe("tenant-a/app-0-a", 8000)).toBe(false);
  });
});

const hops = { wire: 0, loopback: 0, intoPod: 0, outOfPod: 0 };
const per = (total: number) => ({ packets: 1000, total, hops });
const crossing = (mode: PolicyCrossing["mode"], placement: PolicyCrossing["placement"], total: number) => ({
  mode,
  placement,
  rrRequest: per(total),
  rrResponse: per(total),
});
const rates = (rr: number[], crr: number[]) => ({ TCP_RR: rr, TCP_CRR: crr });

const run = (selectedAcross = 2): PolicyRun => ({
  rounds: 3,
  seconds: 2,
  crrConnections: 4000,
  policies: {
    total: 100,
    namespaces: [SELECTED_NS, "tenant-a"],
    selecting: { client: ["c1", "c2", "c3"], "server-b": ["s1", "s2", "s3"], "server-a": ["s1", "s2", "s3"] },
  },
  maps: [{ node: "a", pods: 96, slots: 96, peers: 4809, ports: 949 }],
  probe: { refused: true, deniedEgress: 2 },
  crossings: [
    crossing("off", "across", 2),
    crossing("none", "across", 2),
    crossing("selected", "across", selectedAcross),
    crossing("off", "same", 1),
    crossing("none", "same", 1),
    crossing("selected", "same", 1),
  ],
  samples: {
    off: { across: rates([100, 100, 100], [50, 40, 50]), same: rates([200, 200, 200], [60, 60, 60]) },
    none: { across: rates([100, 90, 110], [50, 40, 50]), same: rates([200, 200, 200], [60, 60, 60]) },
    selected: { across: rates([90, 95, 80], [45, 40, 25]), same: rates([200, 190, 180], [60, 54, 48]) },
  },
  verdicts: [],
  errors: [],
});

describe("the NetworkPolicy section's report", () => {
  it("gives none ÷ off and selected ÷ off as medians of per-round ratios with their spread", () => {
    const t = policyRatioTable(run());
    expect(t).toContain("| TCP_RR | across nodes | 100 | 100 | 90 | 1.00× (0.90–1.10) | 0.90× (0.80–0.95) |");
    expect(t).toContain("| TCP_CRR | across nodes | 50 | 50 | 40 | 1.00× (1.00–1.00) | 0.90× (0.50–1.00) |");
    expect(t).toContain("| TCP_CRR | one node | 60 | 60 | 54 | 1.00× (1.00–1.00) | 0.90× (0.80–1.00) |");
  });

  it("says whether crossings per packet are the same in every mode, and judges the target by it", () => {
    expect(crossingsUnchanged(run())).toBe(true);
    expect(crossingsUnchanged(run(3))).toBe(false);
    expect(policySection(run(), 1000)).toContain("(1000 transactions; exact): the same in every mode.");
    expect(policySection(run(3), 1000)).toContain("**not the same in every mode**");
    const [target] = policyTargets(run());
    expect(target?.met).toBe(true);
    expect(target?.measured).toContain("across nodes 2.00 / 2.00 / 2.00; one node 1.00 / 1.00 / 1.00");
    expect(target?.measured).toContain("TCP_RR across 0.90×, one node 0.95×; TCP_CRR across 0.90×, one node 0.90×");
    expect(policyTargets(run(3))[0]?.met).toBe(false);
    expect(policyTargets(undefined)).toEqual([]);
  });

  it("shows what the maps held and that a flow no rule allows was refused", () => {
    const text = policySection(run(), 1000);
    expect(text).toContain("100 policies in 2 namespaces; selected: client by 3, server-a by 3, server-b by 3.");
    expect(text).toContain("node a: 96 pods on 96 slots, 4,809 peer and 949 port prefixes");
    expect(text).toContain("refused (2 denied by the client's egress)");
  });
});

describe("the NetworkPolicy section's report with flow records", () => {
  const withFlows = (onAcross = 2, lost = 0): PolicyRun => ({
    ...run(),
    flows: {
      samples: {
        off: { across: rates([100, 100, 100], [50, 50, 50]), same: rates([200, 200, 200], [60, 60, 60]) },
        on: { across: rates([99, 100, 98], [50, 48, 49]), same: rates([200, 196, 200], [60, 57, 60]) },
        read: { across: rates([95, 96, 97], [45, 45, 45]), same: rates([190, 190, 190], [54, 54, 54]) },
      },
      crossings: [
        { variant: "off", placement: "across", rrRequest: per(2), rrResponse: per(2) },
        { variant: "on", placement: "across", rrRequest: per(onAcross), rrResponse: per(onAcross) },
        { variant: "off", placement: "same", rrRequest: per(1), rrResponse: per(1) },
        { variant: "on", placement: "same", rrRequest: per(1), rrResponse: per(1) },
      ],
      records: 48_123,
      lost,
      recordsPerCrrConnection: 2.001,
    },
  });

  it("gives on ÷ off and read ÷ off per test and placement, with the records taken and lost", () => {
    const text = policySection(withFlows(), 1000);
    expect(text).toContain("| TCP_RR | across nodes | 100 | 99 | 96 | 0.99× (0.98–1.00) | 0.96× (0.95–0.97) |");
    expect(text).toContain("| TCP_CRR | one node | 60 | 60 | 54 | 1.00× (0.95–1.00) | 0.90× (0.90–0.90) |");
    expect(text).toContain("48,123 records taken, 0 lost, 2.001 per TCP_CRR connection");
    expect(text).toContain("across nodes 2.00 / 2.00; one node 1.00 / 1.00 (the same)");
  });

  it("meets its target only with crossings unchanged and nothing lost", () => {
    const target = (r: PolicyRun) => policyTargets(r).find((t) => t.target.startsWith("Flow records"));
    expect(target(withFlows())?.met).toBe(true);
    expect(target(withFlows(3))?.met).toBe(false);
    expect(target(withFlows(2, 5))?.met).toBe(false);
    expect(target(run())).toBeUndefined();
    expect(policySection(run(), 1000)).not.toContain("Flow records");
  });
});

describe("the tiers mode's ClusterNetworkPolicies", () => {
  const tiered = policyCluster(netperfPods, true);
  const snapshot = snapshotOf(tiered);
  const compiledOf = (name: string) => {
    const target = snapshot.pods.find((p) => p.namespace === SELECTED_NS && p.name === name);
    if (!target) throw new Error(`no pod ${name}`);
    return snapshot.compile(target);
  };

  it("are 50 beside the same 100 policies, Admin and Baseline, at several priorities, all read in full", () => {
    expect(tiered.policies).toEqual(cluster.policies);
    const cnps = tiered.clusterPolicies ?? [];
    expect(cnps).toHaveLength(CLUSTER_POLICY_COUNT);
    expect(new Set(cnps.map((c) => c.metadata.name)).size).toBe(CLUSTER_POLICY_COUNT);
    const admin = cnps.filter((c) => c.spec.tier === "Admin");
    const baseline = cnps.filter((c) => c.spec.tier === "Baseline");
    expect(admin.length).toBeGreaterThanOrEqual(20);
    expect(baseline.length).toBeGreaterThanOrEqual(20);
    expect(admin.length + baseline.length).toBe(CLUSTER_POLICY_COUNT);
    expect(new Set(cnps.map((c) => c.spec.priority)).size).toBeGreaterThan(40);
    expect(snapshot.clusterPolicies.flatMap((c) => c.problems)).toEqual([]);
    expect(policyCluster(netperfPods).clusterPolicies).toBeUndefined();
  });

  it("select the netperf pods by five, and mark the namespaces their subjects cover, never the unjudged one", () => {
    expect(compiledOf("client").clusterSelectedBy).toEqual([
      "bench-client-no-ssh",
      "bench-namespace-baseline",
      "bench-netperf-pass",
    ]);
    for (const server of ["server-a", "server-b"]) {
      expect(compiledOf(server).clusterSelectedBy).toEqual([
        "bench-namespace-baseline",
        "bench-netperf-accept",
        "bench-servers-no-batch",
      ]);
      // The NetworkPolicies selecting them are those of the selected mode.
      expect(compiledOf(server).selectedBy).toHaveLength(3);
    }
    expect(namespacesWithPolicies(tiered)).toEqual([SELECTED_NS, "tenant-a", "tenant-b", "tenant-c"]);
    const others = snapshot.pods.filter((p) => p.namespace.startsWith("tenant-"));
    const selectedOthers = others.filter((p) => (snapshot.compile(p).clusterSelectedBy ?? []).length > 0);
    expect(selectedOthers.length).toBeGreaterThan(others.length / 2);
    expect(others.every((p) => snapshot.compile(p).problems.length === 0)).toBe(true);
  });

  it("give the netperf pods' slots tier masks: the servers' Admin Accept and Baseline on ingress, the client's Admin Deny and Pass on egress", () => {
    const server = podRules(compiledOf("server-b").policy);
    const client = podRules(compiledOf("client").policy);
    const ingress = server.tiers?.ingress;
    // Admin: from-batch (Deny, priority 5), netperf-from-client (Accept, 10); NetworkPolicy; Baseline: same-namespace (Accept), other-namespaces (Deny).
    const np = BigInt((server.ingress?.length ?? 0) - 4);
    expect(np).toBe(3n);
    expect(ingress).toMatchObject({
      admin: 0b11n,
      baseline: 0b11n << (2n + np),
      deny: 0b1n | (0b10n << (2n + np)),
      pass: 0n,
      networkPolicy: true,
    });
    // No rule judges the servers' egress: the replies pass unjudged, as in the selected mode.
    expect(server.tiers?.egress).toBeUndefined();
    expect(server.egress).toBeUndefined();
    // Admin: no-ssh (Deny, priority 5), netperf-to-servers (Pass, 20); then NetworkPolicy.
    expect(client.tiers?.egress).toMatchObject({ admin: 0b11n, deny: 0b1n, pass: 0b10n, networkPolicy: true });
    expect(client.tiers?.ingress).toMatchObject({ admin: 0n, baseline: 0b11n, deny: 0b10n, networkPolicy: false });
    // The selected mode's pods have no tiers.
    const plain = snapshotOf(cluster);
    const selectedClient = plain.pods.find((p) => p.namespace === SELECTED_NS && p.name === "client");
    expect(selectedClient && podRules(plain.compile(selectedClient).policy).tiers).toBeUndefined();
  });

  it("keep netperf's traffic allowed, and deny the client the servers' ssh port in the Admin tier", () => {
    const compiled = compileCluster(tiered);
    const probe = (to: string, port: number) =>
      compiledAllows(tiered, compiled, {
        from: { pod: `${SELECTED_NS}/client` },
        to: { pod: `${SELECTED_NS}/${to}` },
        port,
        protocol: "TCP",
      });
    for (const port of NETPERF_PORTS) {
      expect(probe("server-b", port)).toBe(true);
      expect(probe("server-a", port)).toBe(true);
    }
    expect(probe("server-b", DENIED_PORT)).toBe(false);
    // The Admin tier decides it, before the client's NetworkPolicies are read.
    const first = compiledOf("client").policy.egress?.admin?.[0];
    expect(first).toMatchObject({ policy: "bench-client-no-ssh", action: "Deny" });
    expect(first?.ports).toEqual([{ protocol: "TCP", from: DENIED_PORT, to: DENIED_PORT }]);
  });
});

describe("the NetworkPolicy section's report with the tiers mode", () => {
  const withTiers = (tiersAcross = 2): PolicyRun => {
    const r = run();
    return {
      ...r,
      crossings: [...r.crossings, crossing("tiers", "across", tiersAcross), crossing("tiers", "same", 1)],
      samples: {
        ...r.samples,
        tiers: { across: rates([81, 76, 88], [36, 40, 20]), same: rates([180, 190, 162], [54, 54, 24]) },
      },
      tiers: {
        policies: {
          total: 100,
          namespaces: [SELECTED_NS, "tenant-a"],
          selecting: {},
          cluster: { total: 50, admin: 27, baseline: 23, selecting: { client: ["b", "p"] } },
        },
        maps: [{ node: "a", pods: 96, slots: 97, peers: 5000, ports: 990, tiers: 120 }],
        probes: [{ flow: "client → server-b:22", rule: "no-ssh/no-ssh (Admin Deny)", refused: true, denied: 1 }],
        decided: [{ node: "a", direction: "ingress", tier: "admin", verdict: "allowed", flows: 4000 }],
      },
    };
  };

  it("gives tiers ÷ off and tiers ÷ selected as medians of per-round ratios", () => {
    const t = policyRatioTable(withTiers());
    expect(t).toContain(
      "| test | placement | off /s | none /s | selected /s | tiers /s | none ÷ off | selected ÷ off | tiers ÷ off | tiers ÷ selected |",
    );
    expect(t).toContain(
      "| TCP_RR | across nodes | 100 | 100 | 90 | 81 | 1.00× (0.90–1.10) | 0.90× (0.80–0.95) | 0.81× (0.76–0.88) | 0.90× (0.80–1.10) |",
    );
    expect(t).toContain(
      "| TCP_CRR | one node | 60 | 60 | 54 | 54 | 1.00× (1.00–1.00) | 0.90× (0.80–1.00) | 0.90× (0.40–0.90) | 0.90× (0.50–1.00) |",
    );
    // A results file from before the tiers mode keeps its three modes.
    expect(policyRatioTable(run())).not.toContain("tiers");
  });

  it("states its own target: crossings as selected's, with the ratios beside", () => {
    const targets = policyTargets(withTiers());
    expect(targets).toHaveLength(2);
    expect(targets[0]?.measured).toContain("off / none / selected: across nodes 2.00 / 2.00 / 2.00;");
    expect(targets[1]?.target).toContain("50 ClusterNetworkPolicies beside 100 NetworkPolicies");
    expect(targets[1]?.measured).toContain("TCP_RR selected / tiers: across nodes 2.00 / 2.00; one node 1.00 / 1.00");
    expect(targets[1]?.measured).toContain(
      "tiers ÷ off: TCP_RR across 0.81×, one node 0.90×; TCP_CRR across 0.72×, one node 0.90×",
    );
    expect(targets[1]?.measured).toContain(
      "tiers ÷ selected: TCP_RR across 0.90×, one node 0.90×; TCP_CRR across 0.80×",
    );
    expect(targets[1]?.met).toBe(true);
    expect(policyTargets(withTiers(3))[1]?.met).toBe(false);
    expect(policyTargets(withTiers(3))[0]?.met).toBe(true);
    expect(policyTargets(run())).toHaveLength(1);
  });

  it("shows the tiers cluster's maps, probes and deciding tiers", () => {
    const text = policySection(withTiers(), 1000);
    expect(text).toContain("four ways");
    expect(text).toContain(
      "| tiers: as selected, with 50 ClusterNetworkPolicies, a few applying to the pods | 2.00 / 2.00 | 1.00 / 1.00 |",
    );
    expect(text).toContain("50 ClusterNetworkPolicies (27 Admin, 23 Baseline)");
    expect(text).toContain("client by b, p");
    expect(text).toContain("node a: 96 pods on 97 slots, 120 read by tiers");
    expect(text).toContain("client → server-b:22 by no-ssh/no-ssh (Admin Deny): refused (1 denied)");
    expect(text).toContain("node a ingress 4,000 by the Admin tier; none denied");
    expect(policySection(run(), 1000)).toContain("three ways");
    expect(crossingsUnchanged(withTiers(3))).toBe(false);
  });
});
