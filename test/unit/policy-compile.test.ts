/**
 * One pod's compiled policy (src/agent/policy/model/compile.ts, through the scanning
 * snapshot): the contract with the datapath — canonical, merged, bounded — and the
 * semantics the truth tables cannot show (origins, named-port grouping, what is dropped
 * and reported).
 */

import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import {
  type CompiledPolicy,
  type CompileResult,
  MAX_PORT_RANGES,
  MAX_RULES,
  policyFingerprint,
} from "../../src/agent/policy/model/compile";
import { namespace, pod, policy, snapshotOf } from "../support/policy-cluster";
import type { Cluster, RawPolicy } from "../support/policy-model";

const web = [{ name: "http", port: 8080 }];

function cluster(pods: V1Pod[], ...policies: RawPolicy[]): Cluster {
  return { namespaces: [namespace("x"), namespace("y", { team: "blue" })], pods, policies };
}

function compile(c: Cluster, key: string): CompileResult {
  const snapshot = snapshotOf(c);
  const target = snapshot.pods.find((p) => `${p.namespace}/${p.name}` === key);
  if (!target) throw new Error(`no pod ${key}`);
  return snapshot.compile(target);
}

const server = pod("x/server", { labels: { app: "server" }, ips: ["10.0.0.1", "fd00::1"], ports: web });
const target = { podSelector: { matchLabels: { app: "server" } } };

describe("isolation", () => {
  it("leaves a pod no policy selects unisolated, and isolates one selected with no rules", () => {
    const open = compile(cluster([server]), "x/server");
    expect(open).toEqual({ policy: {}, selectedBy: [], problems: [] });
    const closed = compile(
      cluster([server], policy("x/deny", { ...target, policyTypes: ["Ingress", "Egress"] })),
      "x/server",
    );
    expect(closed.policy).toEqual({ ingress: { rules: [] }, egress: { rules: [] } });
    expect(closed.selectedBy).toEqual(["x/deny"]);
  });

  it("never polices a hostNetwork pod, whatever selects it", () => {
    const host = pod("x/host", { labels: { app: "server" }, ips: ["192.168.0.1"], hostNetwork: true });
    expect(compile(cluster([host], policy("x/deny", target)), "x/host").policy).toEqual({});
  });
});

describe("peers", () => {
  it("are canonical: sorted by address (IPv4 first), deduplicated, host prefixes for pods", () => {
    const clients = [
      pod("x/c10", { labels: { role: "client" }, ips: ["10.0.0.10"] }),
      pod("x/c9", { labels: { role: "client" }, ips: ["10.0.0.9", "FD00::9"] }),
      pod("y/c2", { labels: { role: "client" }, ips: ["10.0.1.2"] }),
    ];
    const from = [
      { podSelector: { matchLabels: { role: "client" } } },
      { namespaceSelector: { matchLabels: { team: "blue" } } },
      { ipBlock: { cidr: "10.0.0.9/32" } },
      { podSelector: { matchLabels: { role: "client" } } },
      { ipBlock: { cidr: "10.0.0.0/8", except: ["10.0.2.0/24", "10.0.1.0/24", "10.0.2.0/24"] } },
    ];
    const result = compile(
      cluster([server, ...clients], policy("x/p", { ...target, ingress: [{ from }] })),
      "x/server",
    );
    expect(result.policy.ingress?.rules).toEqual([
      {
        origin: "x/p ingress[0]",
        peers: [
          { cidr: "10.0.0.0/8", except: ["10.0.1.0/24", "10.0.2.0/24"] },
          { cidr: "10.0.0.9/32", except: [] },
          { cidr: "10.0.0.10/32", except: [] },
          { cidr: "10.0.1.2/32", except: [] },
          { cidr: "fd00::9/128", except: [] },
        ],
        ports: "any",
      },
    ]);
  });

  it("chosen by labels contribute nothing when they have no address, finished, or share the node's", () => {
    const pods = [
      server,
      pod("x/pending", { labels: { role: "client" } }),
      pod("x/done", { labels: { role: "client" }, ips: ["10.0.0.7"], phase: "Succeeded" }),
      pod("x/host", { labels: { role: "client" }, ips: ["192.168.0.1"], hostNetwork: true }),
    ];
    const p = policy("x/p", { ...target, ingress: [{ from: [{ podSelector: { matchLabels: { role: "client" } } }] }] });
    // The rule has no peer left: it allows nothing, it never becomes "any".
    expect(compile(cluster(pods, p), "x/server").policy).toEqual({ ingress: { rules: [] } });
  });
});

describe("ports", () => {
  it("merge overlapping and adjacent ranges of one protocol, sorted TCP, UDP, SCTP", () => {
    const ports = [
      { port: 90 },
      { port: 80, endPort: 85 },
      { port: 86, endPort: 88 },
      { protocol: "SCTP", port: 9 },
      { protocol: "UDP", port: 53 },
      { port: 84 },
      { port: 89 },
    ];
    const result = compile(cluster([server], policy("x/p", { ...target, ingress: [{ ports }] })), "x/server");
    expect(result.policy.ingress?.rules[0]?.ports).toEqual([
      { protocol: "TCP", from: 80, to: 90 },
      { protocol: "UDP", from: 53, to: 53 },
      { protocol: "SCTP", from: 9, to: 9 },
    ]);
  });

  it("named, for ingress, resolve on the target pod (name and protocol); unresolved ones match nothing", () => {
    const rules = (ports: unknown[]) =>
      compile(cluster([server], policy("x/p", { ...target, ingress: [{ ports }] })), "x/server").policy.ingress?.rules;
    expect(rules([{ port: "http" }, { port: 81 }])?.[0]?.ports).toEqual([
      { protocol: "TCP", from: 81, to: 81 },
      { protocol: "TCP", from: 8080, to: 8080 },
    ]);
    expect(rules([{ port: "http", protocol: "UDP" }])).toEqual([]);
    expect(rules([{ port: "nope" }])).toEqual([]);
  });

  it("named, for egress, resolve on each destination: one rule per number, pods grouped; blocks never match a name", () => {
    const pods = [
      server,
      pod("y/a", { labels: { app: "api" }, ips: ["10.0.1.1"], ports: [{ name: "http", port: 80 }] }),
      pod("y/b", { labels: { app: "api" }, ips: ["10.0.1.2"], ports: [{ name: "http", port: 8080 }] }),
      pod("y/c", { labels: { app: "api" }, ips: ["10.0.1.3"], ports: [{ name: "http", port: 80 }] }),
      pod("y/d", { labels: { app: "api" }, ips: ["10.0.1.4"] }),
    ];
    const egress = [
      {
        to: [
          { namespaceSelector: {}, podSelector: { matchLabels: { app: "api" } } },
          { ipBlock: { cidr: "203.0.113.0/24" } },
        ],
        ports: [{ port: "http" }, { port: 443 }],
      },
    ];
    const result = compile(cluster(pods, policy("x/p", { ...target, policyTypes: ["Egress"], egress })), "x/server");
    const host = (ip: string) => ({ cidr: `${ip}/32`, except: [] });
    expect(result.policy.egress?.rules).toEqual([
      {
        origin: "x/p egress[0]",
        peers: [host("10.0.1.1"), host("10.0.1.3")],
        ports: [{ protocol: "TCP", from: 80, to: 80 }],
      },
      {
        origin: "x/p egress[0]",
        peers: [
          host("10.0.1.1"),
          host("10.0.1.2"),
          host("10.0.1.3"),
          host("10.0.1.4"),
          { cidr: "203.0.113.0/24", except: [] },
        ],
        ports: [{ protocol: "TCP", from: 443, to: 443 }],
      },
      { origin: "x/p egress[0]", peers: [host("10.0.1.2")], ports: [{ protocol: "TCP", from: 8080, to: 8080 }] },
    ]);
  });

  it("named, for egress to any peer, resolve on every pod of every namespace", () => {
    const pods = [server, pod("y/a", { ips: ["10.0.1.1"], ports: [{ name: "dns", port: 53, protocol: "UDP" }] })];
    const egress = [{ ports: [{ port: "dns", protocol: "UDP" }] }];
    const result = compile(cluster(pods, policy("x/p", { ...target, policyTypes: ["Egress"], egress })), "x/server");
    expect(result.policy.egress?.rules).toEqual([
      {
        origin: "x/p egress[0]",
        peers: [{ cidr: "10.0.1.1/32", except: [] }],
        ports: [{ protocol: "UDP", from: 53, to: 53 }],
      },
    ]);
  });
});

describe("rules", () => {
  it("with the same ports merge across policies, their origins listed; others stay apart, sorted by ports", () => {
    const clients = [
      pod("x/a", { labels: { r: "a" }, ips: ["10.0.0.2"] }),
      pod("x/b", { labels: { r: "b" }, ips: ["10.0.0.3"] }),
    ];
    const rule = (r: string, port: number) => ({ from: [{ podSelector: { matchLabels: { r } } }], ports: [{ port }] });
    const result = compile(
      cluster(
        [server, ...clients],
        policy("x/two", { ...target, ingress: [rule("a", 81), rule("b", 80)] }),
        policy("x/one", { ...target, ingress: [rule("a", 80)] }),
      ),
      "x/server",
    );
    expect(result.selectedBy).toEqual(["x/one", "x/two"]);
    expect(result.policy.ingress?.rules.map((r) => [r.origin, r.peers, r.ports])).toEqual([
      [
        "x/one ingress[0], x/two ingress[1]",
        [
          { cidr: "10.0.0.2/32", except: [] },
          { cidr: "10.0.0.3/32", except: [] },
        ],
        [{ protocol: "TCP", from: 80, to: 80 }],
      ],
      ["x/two ingress[0]", [{ cidr: "10.0.0.2/32", except: [] }], [{ protocol: "TCP", from: 81, to: 81 }]],
    ]);
  });

  it("are redundant beside one that allows every peer on every port", () => {
    const result = compile(
      cluster(
        [server],
        policy("x/some", { ...target, ingress: [{ ports: [{ port: 80 }] }] }),
        policy("x/all", { ...target, ingress: [{}] }),
      ),
      "x/server",
    );
    expect(result.policy.ingress?.rules).toEqual([{ origin: "x/all ingress[0]", peers: "any", ports: "any" }]);
  });
});

describe("the datapath's bounds", () => {
  const withRules = (n: number) => Array.from({ length: n }, (_, i) => ({ ports: [{ port: 1000 + 2 * i }] }));

  it("hold after merging: many rules with one port set are one rule", () => {
    const same = Array.from({ length: 200 }, () => ({ ports: [{ port: 80 }] }));
    const result = compile(cluster([server], policy("x/p", { ...target, ingress: same })), "x/server");
    expect(result.policy.ingress?.rules).toHaveLength(1);
    expect(result.problems).toEqual([]);
    expect(
      compile(cluster([server], policy("x/p", { ...target, ingress: withRules(MAX_RULES) })), "x/server").problems,
    ).toEqual([]);
  });

  it("past the rule bound, deny the direction and say why", () => {
    const p = policy("x/p", {
      ...target,
      policyTypes: ["Ingress", "Egress"],
      ingress: withRules(MAX_RULES + 1),
      egress: [{}],
    });
    const result = compile(cluster([server], p), "x/server");
    expect(result.policy).toEqual({
      ingress: { rules: [] },
      egress: { rules: [{ origin: "x/p egress[0]", peers: "any", ports: "any" }] },
    });
    expect(result.problems).toEqual([
      {
        policy: "x/p",
        kind: "rules-bound",
        reason: "ingress: 65 rules after merging, the datapath holds 64; all ingress denied",
        direction: "ingress",
      },
    ]);
  });

  it("past the port-range bound, deny the direction and say why", () => {
    const ports = Array.from({ length: MAX_PORT_RANGES + 1 }, (_, i) => ({ port: 2000 + 2 * i }));
    const result = compile(cluster([server], policy("x/p", { ...target, ingress: [{ ports }] })), "x/server");
    expect(result.policy).toEqual({ ingress: { rules: [] } });
    expect(result.problems.map((p) => p.kind)).toEqual(["port-ranges-bound"]);
    expect(result.problems[0]?.reason).toBe(
      "ingress: x/p ingress[0] has 17 port ranges, the datapath holds 16 a rule; all ingress denied",
    );
  });
});

describe("fingerprints", () => {
  it("are equal for pods with the same inputs, whatever the order of keys, and differ otherwise", () => {
    const twin = pod("x/twin", { labels: { app: "server" }, ips: ["10.0.0.2"], ports: web });
    const other = pod("x/other", {
      labels: { app: "server" },
      ips: ["10.0.0.3"],
      ports: [{ name: "http", port: 9090 }],
    });
    const c = cluster([server, twin, other], policy("x/p", { ...target, ingress: [{ ports: [{ port: "http" }] }] }));
    const [a, b, d] = ["x/server", "x/twin", "x/other"].map((k) => compile(c, k).policy) as CompiledPolicy[];
    expect(a).toEqual(b);
    expect(policyFingerprint(a as CompiledPolicy)).toBe(policyFingerprint(b as CompiledPolicy));
    expect(policyFingerprint(a as CompiledPolicy)).not.toBe(policyFingerprint(d as CompiledPolicy));
    const reordered = {
      egress: undefined,
      ingress: { rules: [{ ports: "any", peers: "any", origin: "o" }] },
    } as CompiledPolicy;
    expect(policyFingerprint(reordered)).toBe(
      policyFingerprint({ ingress: { rules: [{ origin: "o", peers: "any", ports: "any" }] } }),
    );
    expect(policyFingerprint({})).not.toBe(policyFingerprint({ ingress: { rules: [] } }));
  });
});

describe("unreadable policies", () => {
  it("isolate what they select and allow nothing, named to each such pod; the others still apply", () => {
    const other = pod("x/other", { labels: { app: "other" }, ips: ["10.0.0.5"] });
    const c = cluster(
      [server, other],
      policy("x/bad", { ...target, ingress: [{ ports: [{ protocol: "ICMP" }] }] }),
      policy("x/bad-selector", { podSelector: { matchExpressions: [{ key: "a", operator: "Like" }] } }),
      policy("x/good", { podSelector: {}, policyTypes: ["Egress"] }),
    );
    const result = compile(c, "x/server");
    // x/bad isolates the server for ingress and allows nothing; so does x/bad-selector,
    // whose selector could not be read (all of x); x/good isolates egress.
    expect(result.policy).toEqual({ ingress: { rules: [] }, egress: { rules: [] } });
    expect(result.selectedBy).toEqual(["x/bad", "x/bad-selector", "x/good"]);
    expect(result.problems.map((p) => [p.policy, p.kind])).toEqual([
      ["x/bad", "protocol"],
      ["x/bad-selector", "selector"],
    ]);
    // x/bad's pod selector does not select x/other; x/bad-selector's could not be read.
    const forOther = compile(c, "x/other");
    expect(forOther.problems.map((p) => p.policy)).toEqual(["x/bad-selector"]);
    expect(forOther.policy.ingress).toEqual({ rules: [] });
  });

  it("isolate both ways when their policyTypes cannot be read; readable rules still add", () => {
    const c = cluster(
      [server],
      policy("x/odd-types", { ...target, policyTypes: ["Ingress", "Sideways"] }),
      policy("x/allow-80", { ...target, ingress: [{ ports: [{ port: 80 }] }] }),
    );
    const result = compile(c, "x/server");
    expect(result.policy.egress).toEqual({ rules: [] });
    expect(result.policy.ingress?.rules).toEqual([
      { origin: "x/allow-80 ingress[0]", peers: "any", ports: [{ protocol: "TCP", from: 80, to: 80 }] },
    ]);
  });
});
