/**
 * A pod's compiled tiers (src/agent/policy/model/compile.ts through the snapshot), and
 * the index's work on ClusterNetworkPolicy changes: precedence across and within
 * policies, Pass, unisolated, named ports split, bounds, fingerprints.
 */
import { describe, expect, it } from "vitest";
import { type CompileResult, MAX_RULES, policyFingerprint } from "../../src/agent/policy/model/compile";
import type { KeptClusterPolicy, PolicyNamespace, PolicyPod } from "../../src/agent/policy/model/objects";
import { PolicyIndex } from "../../src/agent/policy/model/policy-index";
import { clusterPolicy, namespace, pod, policy, snapshotOf } from "../support/policy-cluster";
import type { Cluster, RawClusterPolicy, RawPolicy } from "../support/policy-model";

const server = pod("x/server", { labels: { app: "server" }, ips: ["10.0.0.1"], ports: [{ name: "web", port: 8080 }] });
const client = pod("y/client", { labels: { app: "client" }, ips: ["10.0.1.1"], ports: [{ name: "web", port: 80 }] });
const other = pod("y/other", { labels: { app: "other" }, ips: ["10.0.1.2"], ports: [{ name: "web", port: 81 }] });

function compile(cnps: RawClusterPolicy[], nps: RawPolicy[] = [], key = "x/server"): CompileResult {
  const c: Cluster = {
    namespaces: [namespace("x"), namespace("y", { team: "blue" })],
    pods: [server, client, other],
    policies: nps,
    clusterPolicies: cnps,
    nodes: [{ name: "n1", ips: ["192.168.0.1"], labels: { zone: "east" } }],
  };
  const snapshot = snapshotOf(c);
  return snapshot.compile(snapshot.pods.find((p) => `${p.namespace}/${p.name}` === key) as PolicyPod);
}

const everyone = { namespaces: {} };
const cnp = (name: string, tier: string, priority: number, ingress: unknown[], egress?: unknown[]) =>
  clusterPolicy(name, { tier, priority, subject: everyone, ingress, ...(egress ? { egress } : {}) });
const fromBlue = (action: string, extra: Record<string, unknown> = {}) => ({
  action,
  from: [{ namespaces: { matchLabels: { team: "blue" } } }],
  ...extra,
});
const summary = (rules: { policy: string; rule: string; action: string }[] | undefined) =>
  rules?.map((r) => `${r.policy}/${r.rule}:${r.action}`);

describe("tiers", () => {
  it("order Admin rules by priority, then name, then written order; Baseline apart; unisolated without NetworkPolicy", () => {
    const result = compile([
      cnp("b", "Admin", 5, [fromBlue("Deny", { name: "one" }), fromBlue("Pass", { name: "two" })]),
      cnp("a", "Admin", 5, [fromBlue("Accept")]),
      cnp("c", "Admin", 1, [fromBlue("Pass")]),
      cnp("base", "Baseline", 0, [fromBlue("Deny")]),
    ]);
    expect(summary(result.policy.ingress?.admin)).toEqual([
      "c/ingress[0]:Pass",
      "a/ingress[0]:Accept",
      "b/one:Deny",
      "b/two:Pass",
    ]);
    expect(summary(result.policy.ingress?.baseline)).toEqual(["base/ingress[0]:Deny"]);
    expect(result.policy.ingress).toMatchObject({ rules: [], unisolated: true });
    expect(result.policy.egress).toBeUndefined();
    expect(result.clusterSelectedBy).toEqual(["a", "b", "base", "c"]);
    expect(result.policy.ingress?.admin?.[0]?.peers).toEqual([
      { cidr: "10.0.1.1/32", except: [] },
      { cidr: "10.0.1.2/32", except: [] },
    ]);
  });

  it("sit around NetworkPolicy's rules when one isolates the pod, which keeps its form", () => {
    const np = policy("x/np", { podSelector: {}, ingress: [{ from: [{ podSelector: {} }] }] });
    const alone = compile([], [np]);
    const tiered = compile([cnp("a", "Admin", 0, [fromBlue("Deny")])], [np]);
    expect(tiered.policy.ingress?.rules).toEqual(alone.policy.ingress?.rules);
    expect(tiered.policy.ingress?.unisolated).toBeUndefined();
    expect(alone).not.toHaveProperty("clusterSelectedBy");
    expect(policyFingerprint(alone.policy)).not.toBe(policyFingerprint(tiered.policy));
  });

  it("split a named port by what it is on each destination, adjacent, one action; drop what matches nothing", () => {
    const result = compile([
      cnp(
        "a",
        "Admin",
        0,
        [fromBlue("Accept", { protocols: [{ destinationNamedPort: "web" }] })],
        [
          {
            action: "Deny",
            to: [{ namespaces: { matchLabels: { team: "blue" } } }],
            protocols: [{ destinationNamedPort: "web" }],
          },
          { action: "Deny", to: [{ pods: { podSelector: { matchLabels: { app: "nobody" } } } }] },
          { action: "Deny", to: [{ nodes: { matchLabels: { zone: "east" } } }] },
        ],
      ),
    ]);
    expect(result.policy.ingress?.admin?.[0]?.ports).toEqual([{ protocol: "TCP", from: 8080, to: 8080 }]);
    const egress = result.policy.egress?.admin ?? [];
    expect(egress.map((r) => [r.rule, r.peers, r.ports])).toEqual([
      ["egress[0]", [{ cidr: "10.0.1.1/32", except: [] }], [{ protocol: "TCP", from: 80, to: 80 }]],
      ["egress[0]", [{ cidr: "10.0.1.2/32", except: [] }], [{ protocol: "TCP", from: 81, to: 81 }]],
      ["egress[2]", [{ cidr: "192.168.0.1/32", except: [] }], "any"],
    ]);
  });

  it("keep a failed-closed Deny and report the policy's problems to each pod it selects", () => {
    const result = compile([cnp("a", "Admin", 0, [{ action: "Pass", from: [{ future: {} }] }])]);
    expect(result.policy.ingress?.admin).toEqual([
      { origin: "cnp:a ingress[0]", peers: "any", ports: "any", action: "Deny", policy: "a", rule: "ingress[0]" },
    ]);
    expect(result.problems.map((p) => [p.policy, p.kind])).toEqual([["cnp:a", "unknown-field"]]);
  });

  it("count toward the rule bound with NetworkPolicy's: past it the direction denies everything, said so", () => {
    const many = Array.from({ length: MAX_RULES + 1 }, (_, i) =>
      fromBlue("Deny", { protocols: [{ tcp: { destinationPort: { number: i + 1 } } }] }),
    );
    const result = compile([cnp("big", "Baseline", 0, many)]);
    expect(result.policy.ingress).toEqual({ rules: [] });
    expect(result.problems).toMatchObject([{ policy: "cnp:big", kind: "rules-bound", direction: "ingress" }]);
  });

  it("name equal inputs equally and any tier change differently", () => {
    const one = compile([cnp("a", "Admin", 0, [fromBlue("Deny")])]).policy;
    expect(policyFingerprint(one)).toBe(policyFingerprint(compile([cnp("a", "Admin", 0, [fromBlue("Deny")])]).policy));
    for (const changed of [
      cnp("a", "Admin", 0, [fromBlue("Accept")]),
      cnp("a", "Baseline", 0, [fromBlue("Deny")]),
      cnp("b", "Admin", 0, [fromBlue("Deny")]),
    ]) {
      expect(policyFingerprint(compile([changed]).policy)).not.toBe(policyFingerprint(one));
    }
  });
});

describe("the index's work on ClusterNetworkPolicy changes", () => {
  const pods: PolicyPod[] = [];
  const namespaces: PolicyNamespace[] = [];
  for (let n = 0; n < 20; n++) {
    namespaces.push({ name: `ns-${n}`, labels: { team: `t${n % 4}` } });
    for (let i = 0; i < 50; i++) {
      pods.push({
        namespace: `ns-${n}`,
        name: `pod-${i}`,
        labels: { app: `app-${i % 10}` },
        ips: [`10.${n}.0.${i + 1}`],
        nodeName: i % 10 === 0 ? "local" : "other",
        hostNetwork: false,
        ports: [],
      });
    }
  }
  const kept = (name: string, team: string): KeptClusterPolicy => ({
    name,
    spec: {
      tier: "Admin",
      priority: 1,
      subject: { namespaces: { matchLabels: { team } } },
      ingress: [{ action: "Deny", from: [{ pods: { podSelector: { matchLabels: { app: "app-3" } } } }] }],
    },
  });

  it("visits the local targets once for a policy, and a namespace's own for its relabelling", () => {
    const index = new PolicyIndex("local");
    index.reset(pods, namespaces, [], [kept("a", "t0")]);
    index.work.podsExamined = 0;
    const named = index.clusterPolicyChanged("b", undefined, kept("b", "t1"));
    // Five t1 namespaces, five local pods each.
    expect(named.size).toBe(25);
    // The 100 local targets once; the new policy shares its peer with "a": no pod matched again.
    expect(index.work.podsExamined).toBeLessThanOrEqual(100);
    index.work.podsExamined = 0;
    index.work.peersExamined = 0;
    const relabelled = index.namespaceChanged("ns-0", undefined, { name: "ns-0", labels: { team: "t1" } });
    expect(relabelled).toEqual(new Set([0, 10, 20, 30, 40].map((i) => `ns-0/pod-${i}`)));
    // Its 5 local pods against the two subjects; the shared peer against its 50 pods.
    expect(index.work.podsExamined).toBeLessThanOrEqual(2 * 5 + 50);
    expect(index.compile("ns-0/pod-0")?.clusterSelectedBy).toEqual(["b"]);
    expect(index.clusterPolicyProblems()).toEqual(new Map());
  });
});
