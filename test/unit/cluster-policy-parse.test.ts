/**
 * A ClusterNetworkPolicy read (src/agent/policy/model/cluster-parse.ts) and what the
 * informers keep of it and of Nodes (objects.ts): every field, and failing closed as
 * the API prescribes where a part cannot be read.
 */
import { describe, expect, it } from "vitest";
import { parseClusterPolicy } from "../../src/agent/policy/model/cluster-parse";
import { clusterNetworkPolicyObject, nodeObject } from "../../src/agent/policy/model/objects";
import { EVERYTHING } from "../../src/agent/policy/model/selectors";

const parse = (spec: Record<string, unknown>) => parseClusterPolicy({ name: "p", spec });
const base = { tier: "Admin", priority: 10, subject: { namespaces: {} } };
const egress = (rule: Record<string, unknown>) => parse({ ...base, egress: [rule] });
const kinds = (p: ReturnType<typeof parse>) => p.problems.map((q) => q.kind);

describe("what the informers keep", () => {
  it("of a ClusterNetworkPolicy: its name and the spec's fields as written", () => {
    const kept = clusterNetworkPolicyObject({
      metadata: { name: "p", annotations: { a: "b" } },
      spec: { tier: "Admin", priority: 1, subject: { namespaces: {} }, ingress: [], future: 1 },
    });
    expect(kept).toEqual({
      key: "p",
      object: { name: "p", spec: { tier: "Admin", priority: 1, subject: { namespaces: {} }, ingress: [] } },
    });
  });

  it("of a Node: labels and its InternalIP and ExternalIP addresses, canonical, once", () => {
    const kept = nodeObject({
      metadata: { name: "n1", labels: { zone: "east" } },
      status: {
        addresses: [
          { type: "InternalIP", address: "10.0.0.1" },
          { type: "ExternalIP", address: "FD00::0001" },
          { type: "Hostname", address: "n1" },
          { type: "InternalDNS", address: "10.9.9.9" },
          { type: "InternalIP", address: "10.0.0.1" },
          { type: "ExternalIP", address: "nonsense" },
        ],
      },
    });
    expect(kept).toEqual({
      key: "n1",
      object: { name: "n1", labels: { zone: "east" }, addresses: ["10.0.0.1", "fd00::1"] },
    });
  });
});

describe("a readable ClusterNetworkPolicy", () => {
  it("reads tier, priority, both subjects and every peer kind, rules in written order", () => {
    const p = parse({
      tier: "Baseline",
      priority: 7,
      subject: {
        pods: { namespaceSelector: { matchLabels: { team: "a" } }, podSelector: { matchLabels: { app: "w" } } },
      },
      ingress: [
        { name: "from-ns", action: "Accept", from: [{ namespaces: { matchLabels: { team: "b" } } }] },
        { action: "Deny", from: [{ pods: { podSelector: { matchLabels: { app: "x" } } } }] },
      ],
      egress: [
        { action: "Accept", to: [{ nodes: { matchLabels: { zone: "east" } } }] },
        { action: "Deny", to: [{ networks: ["10.0.0.0/8", "fd00::/64"] }] },
      ],
    });
    expect(p.problems).toEqual([]);
    expect([p.key, p.tier, p.priority]).toEqual(["cnp:p", "Baseline", 7]);
    expect(p.subject.namespaces.requirements).toEqual([{ key: "team", operator: "In", values: ["a"] }]);
    expect(p.subject.pods.requirements).toEqual([{ key: "app", operator: "In", values: ["w"] }]);
    expect(p.ingress.map((r) => [r.name, r.action, r.origin])).toEqual([
      ["from-ns", "Accept", "cnp:p ingress[0]"],
      ["ingress[1]", "Deny", "cnp:p ingress[1]"],
    ]);
    const [fromNs, fromPods] = p.ingress;
    expect(fromNs?.peers).toMatchObject([{ kind: "pods", pods: EVERYTHING, namespaces: { key: expect.any(String) } }]);
    expect(fromPods?.peers).toMatchObject([{ kind: "pods", namespaces: EVERYTHING }]);
    expect(p.egress[0]?.peers).toMatchObject([{ kind: "nodes", nodes: { requirements: [{ key: "zone" }] } }]);
    expect(p.egress[1]?.peers).toMatchObject([
      { kind: "block", cidr: { prefixLength: 8 }, except: [] },
      { kind: "block", cidr: { prefixLength: 64 }, except: [] },
    ]);
    expect(p.ingress[0]?.ports).toBe("any");
  });

  it("reads protocols: a number, a range, a whole protocol, a named port of any protocol", () => {
    const p = egress({
      action: "Accept",
      to: [{ namespaces: {} }],
      protocols: [
        { tcp: { destinationPort: { number: 80 } } },
        { udp: { destinationPort: { range: { start: 1000, end: 2000 } } } },
        { sctp: {} },
        { destinationNamedPort: "web" },
      ],
    });
    expect(p.problems).toEqual([]);
    expect(p.egress[0]?.ports).toEqual([
      { protocol: "TCP", from: 80, to: 80 },
      { protocol: "UDP", from: 1000, to: 2000 },
      { protocol: "SCTP", from: 1, to: 65535 },
      { protocol: "TCP", name: "web" },
      { protocol: "UDP", name: "web" },
      { protocol: "SCTP", name: "web" },
    ]);
  });
});

describe("what cannot be read fails closed", () => {
  it("a peer of no known kind: an Accept rule matches nothing, a Deny or Pass rule denies everything", () => {
    const accept = egress({ action: "Accept", to: [{ somethingNew: {} }] });
    expect(accept.egress).toEqual([]);
    expect(kinds(accept)).toEqual(["unknown-field"]);
    expect(accept.problems[0]?.reason).toMatch(/matches nothing$/);
    for (const action of ["Deny", "Pass"]) {
      const closed = egress({ action, to: [{ namespaces: {} }, {}], protocols: [{ tcp: {} }] });
      expect(closed.egress).toEqual([
        { origin: "cnp:p egress[0]", name: "egress[0]", action: "Deny", peers: "any", ports: "any" },
      ]);
      expect(closed.problems[0]?.reason).toMatch(/denies every peer and port$/);
    }
  });

  it("an unknown field in a rule or protocol, two kinds in one peer, a bad range, an unmasked network", () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ action: "Deny", to: [{ namespaces: {} }], when: "now" }, "unknown-field"],
      [{ action: "Deny", to: [{ namespaces: {}, nodes: {} }] }, "peer"],
      [
        { action: "Deny", to: [{ namespaces: {} }], protocols: [{ tcp: { destinationPort: { number: 80 }, x: 1 } }] },
        "unknown-field",
      ],
      [{ action: "Deny", to: [{ namespaces: {} }], protocols: [{ tcp: {}, udp: {} }] }, "protocol"],
      [
        {
          action: "Deny",
          to: [{ namespaces: {} }],
          protocols: [{ tcp: { destinationPort: { range: { start: 9, end: 9 } } } }],
        },
        "port",
      ],
      [{ action: "Deny", to: [{ namespaces: {} }], protocols: [{ icmp: {} }] }, "unknown-field"],
      [{ action: "Deny", to: [{ networks: ["10.0.0.1/8"] }] }, "cidr"],
      [{ action: "Deny", to: [{ networks: ["nonsense"] }] }, "cidr"],
      [{ action: "Deny", to: [] }, "peer"],
      [{ action: "Deny", to: [{ namespaces: { matchExpressions: [{ key: "a", operator: "Is" }] } }] }, "selector"],
      [{ action: "Deny", to: [{ pods: { namespaceSelector: {} } }] }, "selector"],
      [{ action: "Deny", to: [{ networks: ["10.0.0.0/8"] }], protocols: [{ destinationNamedPort: "web" }] }, "port"],
      [{ action: "Allow", to: [{ namespaces: {} }] }, "action"],
    ];
    for (const [rule, kind] of cases) {
      const p = egress(rule);
      expect(kinds(p), JSON.stringify(rule)).toContain(kind);
      expect(p.egress, JSON.stringify(rule)).toEqual([
        { origin: "cnp:p egress[0]", name: "egress[0]", action: "Deny", peers: "any", ports: "any" },
      ]);
    }
  });

  it("Pass in the Baseline tier is refused: the rule denies everything", () => {
    const p = parse({ ...base, tier: "Baseline", ingress: [{ action: "Pass", from: [{ namespaces: {} }] }] });
    expect(kinds(p)).toEqual(["action"]);
    expect(p.ingress[0]).toMatchObject({ action: "Deny", peers: "any", ports: "any" });
  });

  it("refuses domainNames, said so: the peer matches nothing, the rule's other peers still do", () => {
    const p = egress({ action: "Accept", to: [{ domainNames: ["example.com"] }, { networks: ["192.0.2.0/24"] }] });
    expect(p.problems).toEqual([
      {
        policy: "cnp:p",
        kind: "domain-names",
        reason: "spec.egress[0].to[0].domainNames: domainNames is not implemented: the rule matches no domain",
      },
    ]);
    expect(p.egress[0]?.peers).toMatchObject([{ kind: "block" }]);
    // In a Deny rule the API refuses it: deny everything.
    expect(egress({ action: "Deny", to: [{ domainNames: ["example.com"] }] }).egress[0]?.peers).toBe("any");
  });

  it("an unreadable subject selects every pod; its readable rules stay", () => {
    for (const subject of [undefined, {}, { namespaces: {}, pods: { podSelector: {} } }, { namespaces: "team=a" }]) {
      const p = parse({ ...base, subject, ingress: [{ action: "Deny", from: [{ namespaces: {} }] }] });
      expect(p.subject, JSON.stringify(subject)).toEqual({ namespaces: EVERYTHING, pods: EVERYTHING });
      expect(kinds(p)).toContain("subject");
      expect(p.ingress[0]?.peers).not.toBe("any");
    }
  });

  it("an unreadable tier or priority: Admin, priority 0, Deny rules kept, Pass read as Deny, Accept dropped", () => {
    const rules = [
      { action: "Accept", from: [{ namespaces: {} }] },
      { action: "Pass", from: [{ namespaces: { matchLabels: { a: "b" } } }] },
      { action: "Deny", from: [{ namespaces: {} }], protocols: [{ tcp: {} }] },
    ];
    for (const [tier, priority, kind] of [
      ["Middle", 3, "tier"],
      ["Baseline", 1001, "priority"],
      ["Admin", -1, "priority"],
    ] as const) {
      const p = parse({ ...base, tier, priority, ingress: rules });
      expect([p.tier, p.priority, kinds(p)]).toEqual(["Admin", 0, [kind]]);
      expect(p.ingress.map((r) => [r.name, r.action])).toEqual([
        ["ingress[1]", "Deny"],
        ["ingress[2]", "Deny"],
      ]);
      expect(p.ingress[1]?.ports).toEqual([{ protocol: "TCP", from: 1, to: 65535 }]);
    }
  });
});
