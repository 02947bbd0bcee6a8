/**
 * The incremental policy index (src/agent/policy/policy-index.ts): with 1,000 pods in 20
 * namespaces and 100 policies, one change names exactly the local pods whose policies
 * have a rule choosing what changed, and the work it does (counted by the index) stays
 * in proportion to that, not to the cluster.
 */
import { beforeEach, describe, expect, it } from "vitest";
import { isPeerCandidate, peerChooses } from "../../src/agent/policy/compile";
import type { KeptPolicy, PolicyNamespace, PolicyPod } from "../../src/agent/policy/objects";
import { parsePolicy, selectorPeersOf } from "../../src/agent/policy/parse";
import { PolicyIndex } from "../../src/agent/policy/policy-index";
import { selectorMatches } from "../../src/agent/policy/selectors";
import { PolicySnapshot } from "../../src/agent/policy/snapshot";

const NAMESPACES = 20;
const PODS_PER_NAMESPACE = 50;
const NODES = 10;
const LOCAL = "node-0";

const nsName = (n: number) => `ns-${n}`;

function makePod(n: number, i: number, overrides: Partial<PolicyPod> = {}): PolicyPod {
  return {
    namespace: nsName(n),
    name: `pod-${i}`,
    labels: { app: `app-${i % 10}`, tier: i % 2 === 0 ? "front" : "back" },
    ips: [`10.${n}.${Math.floor(i / 250)}.${(i % 250) + 1}`],
    // Namespace n's local pods are those with i % 10 === n % 10: all app-(n % 10).
    nodeName: `node-${(i - (n % NODES) + NODES) % NODES}`,
    hostNetwork: false,
    ports: [{ name: "http", port: 8000 + (i % 3), protocol: "TCP" }],
    ...overrides,
  };
}

function makeNamespace(n: number, team = `t${n % 4}`): PolicyNamespace {
  return { name: nsName(n), labels: { "kubernetes.io/metadata.name": nsName(n), team } };
}

/** Five policies per namespace: own-namespace, cross-namespace, egress with a named port, a block, an all-namespaces peer. */
function makePolicies(n: number): KeptPolicy[] {
  const ns = nsName(n);
  const kept = (name: string, spec: KeptPolicy["spec"]): KeptPolicy => ({ namespace: ns, name, spec });
  return [
    kept("p0", {
      podSelector: { matchLabels: { app: "app-0" } },
      ingress: [{ from: [{ podSelector: { matchLabels: { app: "app-1" } } }] }],
    }),
    kept("p1", {
      podSelector: { matchLabels: { app: "app-2" } },
      ingress: [
        {
          from: [
            {
              namespaceSelector: { matchLabels: { team: `t${(n + 1) % 4}` } },
              podSelector: { matchLabels: { app: "app-3" } },
            },
          ],
        },
      ],
    }),
    kept("p2", {
      podSelector: { matchLabels: { tier: "front" } },
      policyTypes: ["Egress"],
      egress: [{ to: [{ podSelector: { matchLabels: { app: "app-4" } } }], ports: [{ port: "http" }] }],
    }),
    kept("p3", {
      podSelector: { matchLabels: { app: "app-8" } },
      ingress: [{ from: [{ ipBlock: { cidr: "192.168.0.0/16" } }] }],
    }),
    kept("p4", {
      podSelector: { matchLabels: { app: "app-5" } },
      ingress: [
        { from: [{ namespaceSelector: {}, podSelector: { matchLabels: { app: "app-6" } } }], ports: [{ port: 443 }] },
      ],
    }),
  ];
}

interface World {
  pods: Map<string, PolicyPod>;
  namespaces: Map<string, PolicyNamespace>;
  policies: Map<string, KeptPolicy>;
}

function world(): World {
  const pods = new Map<string, PolicyPod>();
  const namespaces = new Map<string, PolicyNamespace>();
  const policies = new Map<string, KeptPolicy>();
  for (let n = 0; n < NAMESPACES; n++) {
    namespaces.set(nsName(n), makeNamespace(n));
    for (let i = 0; i < PODS_PER_NAMESPACE; i++) pods.set(`${nsName(n)}/pod-${i}`, makePod(n, i));
    for (const p of makePolicies(n)) policies.set(`${p.namespace}/${p.name}`, p);
  }
  return { pods, namespaces, policies };
}

const keyOf = (p: PolicyPod) => `${p.namespace}/${p.name}`;
const isLocalTarget = (p: PolicyPod) => p.nodeName === LOCAL && isPeerCandidate(p);

/**
 * By brute force: the local pods selected by policies with a peer whose choice of `pod`
 * differs between the two worlds, or that chooses it in both while its addresses or
 * ports changed; plus the pod itself if it is a local target in either.
 */
function expectedAfterPodChange(before: World, after: World, key: string): Set<string> {
  const was = before.pods.get(key);
  const now = after.pods.get(key);
  const factsChanged = JSON.stringify([was?.ips, was?.ports]) !== JSON.stringify([now?.ips, now?.ports]);
  const chooses = (w: World, p: PolicyPod | undefined, peer: Parameters<typeof peerChooses>[0]) =>
    p !== undefined && isPeerCandidate(p) && peerChooses(peer, p, w.namespaces.get(p.namespace)?.labels ?? {});
  const users = new Set<string>();
  for (const policy of after.policies.values()) {
    const parse = parsePolicy(policy);
    if (!parse.ok) continue;
    for (const peer of selectorPeersOf(parse.policy)) {
      const a = chooses(before, was, peer);
      const b = chooses(after, now, peer);
      if (a !== b || (a && b && factsChanged)) users.add(parse.policy.key);
    }
  }
  const expected = new Set<string>();
  for (const p of after.pods.values()) {
    if (!isLocalTarget(p)) continue;
    for (const policyKey of users) {
      const parse = parsePolicy(after.policies.get(policyKey) as KeptPolicy);
      if (parse.ok && parse.policy.namespace === p.namespace && selectorMatches(parse.policy.podSelector, p.labels)) {
        expected.add(keyOf(p));
      }
    }
  }
  for (const p of [was, now]) if (p && isLocalTarget(p)) expected.add(key);
  return expected;
}

function clone(w: World): World {
  return { pods: new Map(w.pods), namespaces: new Map(w.namespaces), policies: new Map(w.policies) };
}

function resetWork(index: PolicyIndex): void {
  index.work.podsExamined = 0;
  index.work.peersExamined = 0;
  index.work.namespacesExamined = 0;
}

function agreesWithSnapshot(index: PolicyIndex, w: World, keys: Iterable<string>): void {
  const snapshot = new PolicySnapshot(w.pods.values(), w.namespaces.values(), w.policies.values());
  for (const key of keys) {
    const pod = w.pods.get(key);
    expect(index.compile(key), key).toEqual(pod && isLocalTarget(pod) ? snapshot.compile(pod) : undefined);
  }
}

describe("the policy index at 1,000 pods, 20 namespaces, 100 policies", () => {
  let w: World;
  let index: PolicyIndex;

  beforeEach(() => {
    w = world();
    index = new PolicyIndex(LOCAL);
    const targets = index.reset(w.pods.values(), w.namespaces.values(), w.policies.values());
    expect(targets.size).toBe(100);
    resetWork(index);
  });

  it("on a remote pod's label change, names only the local pods whose policies choose it, and looks at a handful", () => {
    const key = "ns-0/pod-11"; // app-1, remote: chosen by ns-0/p0's peer, whose policy selects ns-0's local app-0 pods
    const before = clone(w);
    const moved = { ...(w.pods.get(key) as PolicyPod), labels: { app: "app-6", tier: "back" } };
    w.pods.set(key, moved);
    const named = index.podChanged(key, before.pods.get(key), moved);
    const expected = expectedAfterPodChange(before, w, key);
    expect(named).toEqual(expected);
    // ns-0/p0 selects ns-0's 5 local pods; as app-6 it is every p4's peer, selecting ns-5's and ns-15's.
    expect(named.size).toBe(15);
    // The peers relevant to ns-3: its 2 own-namespace ones and the cross-namespace ones matching it.
    expect(index.work.peersExamined).toBeLessThanOrEqual(10);
    expect(index.work.podsExamined).toBeLessThanOrEqual(10);
    agreesWithSnapshot(index, w, [...named, "ns-0/pod-0"]);
  });

  it("on a remote pod's new address, names the local pods of the rules choosing it; a pod nobody chooses names none", () => {
    const chosen = "ns-7/pod-3"; // app-3 in a team t3 namespace, remote: ns-2/p1's peer, selecting ns-2's local app-2 pods
    const before = clone(w);
    const readdressed = { ...(w.pods.get(chosen) as PolicyPod), ips: ["10.99.0.1"] };
    w.pods.set(chosen, readdressed);
    const named = index.podChanged(chosen, undefined, readdressed);
    expect(named).toEqual(expectedAfterPodChange(before, w, chosen));
    expect(named.size).toBe(5);
    agreesWithSnapshot(index, w, named);

    resetWork(index);
    const nobody = "ns-7/pod-9"; // app-9, back, remote: no rule chooses it
    const lonely = { ...(w.pods.get(nobody) as PolicyPod), ips: ["10.99.0.2"] };
    w.pods.set(nobody, lonely);
    expect(index.podChanged(nobody, undefined, lonely)).toEqual(new Set());
    expect(index.work.podsExamined).toBeLessThanOrEqual(10);
  });

  it("on a local pod's label change, names it and the local pods choosing it, looking at its namespace's policies", () => {
    const local = [...w.pods.values()].find((p) => isLocalTarget(p) && p.labels.app === "app-1") as PolicyPod;
    const key = keyOf(local);
    const before = clone(w);
    const relabelled = { ...local, labels: { app: "app-0", tier: local.labels.tier as string } };
    w.pods.set(key, relabelled);
    const named = index.podChanged(key, undefined, relabelled);
    expect(named).toEqual(expectedAfterPodChange(before, w, key));
    expect(named.has(key)).toBe(true);
    expect(index.compile(key)?.selectedBy).toContain(`${local.namespace}/p0`);
    expect(index.work.podsExamined).toBeLessThanOrEqual(20);
    agreesWithSnapshot(index, w, named);
  });

  it("on a namespace's label change, visits the cross-namespace peers and that namespace's pods", () => {
    const before = new PolicySnapshot(w.pods.values(), w.namespaces.values(), w.policies.values());
    w.namespaces.set("ns-5", makeNamespace(5, "t0"));
    const named = index.namespaceChanged("ns-5", undefined, w.namespaces.get("ns-5"));
    const after = new PolicySnapshot(w.pods.values(), w.namespaces.values(), w.policies.values());
    const changed = [...w.pods.values()]
      .filter(isLocalTarget)
      .filter((p) => JSON.stringify(before.compile(p)) !== JSON.stringify(after.compile(p)))
      .map(keyOf);
    expect(changed.length).toBeGreaterThan(0);
    for (const key of changed) expect(named.has(key), key).toBe(true);
    // p1's peers (4 distinct teams) and p4's one: 5 cross-namespace peers, 50 pods per changed one.
    expect(index.work.peersExamined).toBeLessThanOrEqual(5);
    expect(index.work.podsExamined).toBeLessThanOrEqual(3 * PODS_PER_NAMESPACE);
    agreesWithSnapshot(index, w, named);
  });

  it("on a policy's change, names the local pods it selects before or after, and matches only new peers' scope", () => {
    const key = "ns-2/p0";
    const changed: KeptPolicy = {
      namespace: "ns-2",
      name: "p0",
      spec: {
        podSelector: { matchLabels: { tier: "front" } },
        ingress: [{ from: [{ podSelector: { matchLabels: { app: "app-7" } } }] }],
      },
    };
    const selectedBy = (labels: Record<string, string>) =>
      [...w.pods.values()]
        .filter((p) => p.namespace === "ns-2" && isLocalTarget(p))
        .filter((p) => Object.entries(labels).every(([k, v]) => p.labels[k] === v))
        .map(keyOf);
    expect(selectedBy({ app: "app-0" })).toEqual([]);
    w.policies.set(key, changed);
    const named = index.policyChanged(key, undefined, changed);
    expect(named).toEqual(new Set(selectedBy({ tier: "front" })));
    expect(named.size).toBe(5);
    // The new peer is matched against ns-2's 50 pods once; the selection against its 5 local targets.
    expect(index.work.podsExamined).toBeLessThanOrEqual(PODS_PER_NAMESPACE + 5);
    agreesWithSnapshot(index, w, named);
  });

  it("reports unreadable policies, to the pods they might select, and counts them by kind", () => {
    const bad: KeptPolicy = {
      namespace: "ns-0",
      name: "bad",
      spec: { podSelector: { matchLabels: { app: "app-0" } }, ingress: [{ ports: [{ protocol: "ICMP" }] }] },
    };
    const worse: KeptPolicy = {
      namespace: "ns-0",
      name: "worse",
      spec: { podSelector: { matchExpressions: [{ key: "a", operator: "Is" }] } },
    };
    const targets0 = [...w.pods.values()].filter((p) => p.namespace === "ns-0" && isLocalTarget(p));
    expect(index.policyChanged("ns-0/bad", undefined, bad)).toEqual(
      new Set(targets0.filter((p) => p.labels.app === "app-0").map(keyOf)),
    );
    // A pod selector that cannot be read might select any of the namespace's pods.
    expect(index.policyChanged("ns-0/worse", undefined, worse)).toEqual(new Set(targets0.map(keyOf)));
    expect(index.problemCounts()).toEqual({ protocol: 1, selector: 1 });
    expect(index.policyProblems().map((p) => p.policy)).toEqual(["ns-0/bad", "ns-0/worse"]);
    const app0 = targets0.find((p) => p.labels.app === "app-0") as PolicyPod;
    expect(index.compile(keyOf(app0))?.problems.map((p) => p.policy)).toEqual(["ns-0/bad", "ns-0/worse"]);
    expect(index.policyChanged("ns-0/worse", worse, undefined)).toEqual(new Set(targets0.map(keyOf)));
    expect(index.problemCounts()).toEqual({ protocol: 1 });
  });

  it("names a local pod that stops being a target (finished, deleted), and compiles it no more", () => {
    const local = [...w.pods.values()].find(isLocalTarget) as PolicyPod;
    const key = keyOf(local);
    expect(index.podChanged(key, local, { ...local, terminal: true }).has(key)).toBe(true);
    expect(index.compile(key)).toBeUndefined();
    expect(index.localTargets()).not.toContain(key);
    const other = [...w.pods.values()].filter(isLocalTarget)[1] as PolicyPod;
    expect(index.podChanged(keyOf(other), other, undefined).has(keyOf(other))).toBe(true);
    expect(index.compile(keyOf(other))).toBeUndefined();
    expect(index.localTargets()).toHaveLength(98);
  });
});

describe("the policy index on small changes", () => {
  it("learns a namespace from its pods before its object arrives, then its labels", () => {
    const index = new PolicyIndex("n1");
    const server: PolicyPod = {
      namespace: "a",
      name: "s",
      labels: {},
      ips: ["10.0.0.1"],
      nodeName: "n1",
      hostNetwork: false,
      ports: [],
    };
    const client: PolicyPod = {
      namespace: "b",
      name: "c",
      labels: {},
      ips: ["10.0.0.2"],
      nodeName: "n2",
      hostNetwork: false,
      ports: [],
    };
    const allowTeam: KeptPolicy = {
      namespace: "a",
      name: "p",
      spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: "x" } } }] }] },
    };
    index.reset([server, client], [], [allowTeam]);
    expect(index.compile("a/s")?.policy).toEqual({ ingress: { rules: [] } });
    expect(index.namespaceChanged("b", undefined, { name: "b", labels: { team: "x" } })).toEqual(new Set(["a/s"]));
    expect(index.compile("a/s")?.policy.ingress?.rules[0]?.peers).toEqual([{ cidr: "10.0.0.2/32", except: [] }]);
    expect(index.namespaceChanged("b", { name: "b", labels: { team: "x" } }, undefined)).toEqual(new Set(["a/s"]));
    expect(index.compile("a/s")?.policy).toEqual({ ingress: { rules: [] } });
  });
});
