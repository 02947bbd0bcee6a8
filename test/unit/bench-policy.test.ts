/**
 * The NetworkPolicy section's pure parts: the 100 policies it writes (bench/lib/policy-set.ts)
 * and which of them select which pods, as the agent's compiler reads them; its report
 * (bench/lib/policy-report.ts) from a made-up run.
 */
import { describe, expect, it } from "vitest";
import { crossingsUnchanged, policyRatioTable, policySection, policyTargets } from "../../bench/lib/policy-report";
import type { PolicyCrossing, PolicyRun } from "../../bench/lib/policy-result";
import {
  localPods,
  NETPERF_PORTS,
  type NetperfPod,
  namespacesWithPolicies,
  POLICY_COUNT,
  policyCluster,
  SELECTED_NS,
  UNJUDGED_NS,
} from "../../bench/lib/policy-set";
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
