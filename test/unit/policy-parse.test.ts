/**
 * A NetworkPolicy's spec read and checked (src/agent/policy/model/parse.ts): defaults as
 * the API server applies them, rules and ports in canonical form, CIDRs as the API server
 * reads them, and every reason a policy cannot be read named.
 */
import { describe, expect, it } from "vitest";
import type { KeptPolicy } from "../../src/agent/policy/model/objects";
import {
  type ParsedPolicy,
  type PolicyParse,
  parsePolicy,
  peerText,
  readPolicyCidr,
  selectorPeersOf,
} from "../../src/agent/policy/model/parse";
import { formatSubnet } from "../../src/cni/address";

const kept = (spec: KeptPolicy["spec"]): KeptPolicy => ({ namespace: "x", name: "p", spec });

function parsed(spec: KeptPolicy["spec"]): ParsedPolicy {
  const result = parsePolicy(kept(spec));
  if (!result.ok) throw new Error(JSON.stringify(result.problems));
  return result.policy;
}

const reasons = (spec: KeptPolicy["spec"]): string[] => {
  const result: PolicyParse = parsePolicy(kept(spec));
  return result.ok ? [] : result.problems.map((p) => `${p.kind}: ${p.reason}`);
};

describe("policyTypes", () => {
  it("default to Ingress, and Egress when there is an egress rule", () => {
    const ingressOnly = parsed({ podSelector: {}, egress: [] });
    expect(ingressOnly.ingress).toEqual([]);
    expect(ingressOnly).not.toHaveProperty("egress");
    const both = parsed({ egress: [{}] });
    expect(both.ingress).toEqual([]);
    expect(both.egress).toHaveLength(1);
    expect(parsed({ policyTypes: [], egress: [{}] }).ingress).toEqual([]);
  });

  it("read only the directions they name", () => {
    const egressOnly = parsed({ policyTypes: ["Egress"], ingress: [{ ports: [{ protocol: "ICMP" }] }] });
    expect(egressOnly).not.toHaveProperty("ingress");
    expect(egressOnly.egress).toEqual([]);
  });
});

describe("rules", () => {
  it("read a missing or empty from/to/ports as any (the API reference: empty or missing matches all)", () => {
    const p = parsed({ ingress: [{}, { from: [], ports: [] }, { from: null, ports: null }] });
    expect(p.ingress?.map((r) => [r.origin, r.peers, r.ports])).toEqual([
      ["x/p ingress[0]", "any", "any"],
      ["x/p ingress[1]", "any", "any"],
      ["x/p ingress[2]", "any", "any"],
    ]);
  });

  it("read ports: numbers, ranges, names, a protocol alone, TCP unless told", () => {
    const p = parsed({
      ingress: [
        {
          ports: [
            { port: 80 },
            { port: 8000, endPort: 8080, protocol: "UDP" },
            { port: "http" },
            { protocol: "SCTP" },
            { port: 53, protocol: "UDP", endPort: 53 },
          ],
        },
      ],
    });
    expect(p.ingress?.[0]?.ports).toEqual([
      { protocol: "TCP", from: 80, to: 80 },
      { protocol: "UDP", from: 8000, to: 8080 },
      { protocol: "TCP", name: "http" },
      { protocol: "SCTP", from: 1, to: 65535 },
      { protocol: "UDP", from: 53, to: 53 },
    ]);
  });

  it("read peers: pods of the policy's namespace, of selected namespaces, both, and blocks", () => {
    const p = parsed({
      ingress: [
        {
          from: [
            { podSelector: { matchLabels: { a: "1" } } },
            { namespaceSelector: {} },
            { namespaceSelector: { matchLabels: { ns: "y" } }, podSelector: {} },
            { ipBlock: { cidr: "10.0.0.0/8", except: ["10.1.0.0/16"] } },
          ],
        },
      ],
    });
    const peers = p.ingress?.[0]?.peers;
    if (peers === "any" || !peers) throw new Error("no peers");
    const shown = peers.map((peer) =>
      peer.kind === "block" ? [formatSubnet(peer.cidr), peer.except.map(formatSubnet)] : peerText(peer),
    );
    expect(shown).toEqual([
      "pods a=1 in x",
      "pods {} in namespaces {}",
      "pods {} in namespaces ns=y",
      ["10.0.0.0/8", ["10.1.0.0/16"]],
    ]);
    // Only a peer scoped to the policy's own namespace is keyed by it.
    const other = parsePolicy({
      namespace: "y",
      name: "q",
      spec: { ingress: [{ from: [{ namespaceSelector: {} }, { podSelector: {} }] }] },
    });
    const [anywhere, ownY] = other.ok ? selectorPeersOf(other.policy) : [];
    const keys = selectorPeersOf(p).map((peer) => peer.key);
    expect(keys).toContain(anywhere?.key);
    expect(ownY?.key).toBe('[{"namespace":"y"},"[]"]');
    expect(selectorPeersOf(p)).toHaveLength(3);
  });

  it("give an egress rule to any peer with named ports the pods its names resolve on", () => {
    const p = parsed({
      policyTypes: ["Egress"],
      egress: [{ ports: [{ port: "dns", protocol: "UDP" }] }, { ports: [{ port: 53 }] }],
    });
    expect(p.egress?.[0]?.namedPortPods?.key).toBe('[{"namespaces":"[]"},"[]"]');
    expect(p.egress?.[1]).not.toHaveProperty("namedPortPods");
    expect(selectorPeersOf(p)).toHaveLength(1);
  });
});

describe("CIDRs, read as the API server reads them (legacy validation)", () => {
  const read = (text: unknown) => {
    const s = readPolicyCidr(text);
    return s ? formatSubnet(s) : undefined;
  };

  it("take the network of a prefix with host bits, and decimal octets with leading zeros", () => {
    expect(read("10.1.2.3/8")).toBe("10.0.0.0/8");
    expect(read("010.001.002.000/024")).toBe("10.1.2.0/24");
    expect(read("0.0.0.0/0")).toBe("0.0.0.0/0");
    expect(read("FD00:0:0:0:0:0:0:1/64")).toBe("fd00::/64");
    expect(read("10.0.0.1/32")).toBe("10.0.0.1/32");
  });

  it("read an IPv4-mapped IPv6 prefix of /96 or longer as the IPv4 prefix it maps", () => {
    expect(read("::ffff:10.1.0.0/112")).toBe("10.1.0.0/16");
    expect(read("::ffff:10.1.2.3/128")).toBe("10.1.2.3/32");
    expect(read("::ffff:10.1.0.0/80")).toBe("::/80");
  });

  it("refuse what is no CIDR", () => {
    for (const text of [
      "10.0.0.0",
      "10.0.0.0/33",
      "10.0.0.256/8",
      "fd00::/129",
      "10.0.0.0/-1",
      "10.0.0.0/",
      "x/8",
      8,
      null,
    ]) {
      expect(read(text), String(text)).toBeUndefined();
    }
  });
});

describe("unreadable policies", () => {
  it("name every reason the API server would have refused them for", () => {
    expect(
      reasons({
        podSelector: { matchExpressions: [{ key: "a", operator: "Equals", values: ["1"] }] },
        policyTypes: ["Ingress", "Egress"],
        ingress: [
          { ports: [{ protocol: "ICMP" }, { port: 0 }, { port: 90, endPort: 80 }, { port: "http", endPort: 90 }] },
          {
            from: [{ ipBlock: { cidr: "10.0.0.0/33" } }, { ipBlock: { cidr: "10.0.0.0/8", except: ["11.0.0.0/16"] } }],
          },
          { from: [{ ipBlock: { cidr: "10.0.0.0/8", except: ["10.0.0.0/8"] } }, {}] },
          { from: [{ ipBlock: { cidr: "10.0.0.0/8" }, podSelector: {} }, { podSelector: { matchLabels: { a: 1 } } }] },
        ],
        egress: [
          { to: [{ ipBlock: { cidr: "fd00::/8", except: ["10.0.0.0/16"] } }], action: "Deny" },
          { ports: [{ port: 70000 }] },
        ],
      }),
    ).toEqual([
      'selector: spec.podSelector: matchExpressions[0]: unknown operator "Equals"',
      'protocol: spec.ingress[0].ports[0].protocol: "ICMP" is not TCP, UDP or SCTP',
      "port: spec.ingress[0].ports[1].port: 0 is not a port (1-65535)",
      "port: spec.ingress[0].ports[2].endPort: 80 is not a port from 90 to 65535",
      "port: spec.ingress[0].ports[3].endPort: needs a numeric port",
      'cidr: spec.ingress[1].from[0].ipBlock.cidr: "10.0.0.0/33" is not a CIDR',
      'except: spec.ingress[1].from[1].ipBlock.except[0]: "11.0.0.0/16" is not strictly inside the cidr',
      'except: spec.ingress[2].from[0].ipBlock.except[0]: "10.0.0.0/8" is not strictly inside the cidr',
      "peer: spec.ingress[2].from[1]: names no podSelector, namespaceSelector or ipBlock",
      "peer: spec.ingress[3].from[0]: ipBlock cannot be combined with a selector",
      'selector: spec.ingress[3].from[1].podSelector: matchLabels["a"] is not a string',
      'unknown-field: spec.egress[0]: field "action" is not understood',
      "port: spec.egress[1].ports[0].port: 70000 is not a port (1-65535)",
    ]);
  });

  it("name fields of a newer API, wrong shapes and unknown policyTypes", () => {
    expect(reasons({ ingress: [{ from: [{ nodeSelector: {} }] }] })).toEqual([
      'unknown-field: spec.ingress[0].from[0]: field "nodeSelector" is not understood',
    ]);
    expect(reasons({ ingress: {} })).toEqual(["shape: spec.ingress: must be a list"]);
    expect(reasons({ ingress: [{ ports: { port: 80 } }] })).toEqual(["shape: spec.ingress[0].ports: must be a list"]);
    expect(reasons({ policyTypes: ["Ingress", "Sideways"] })).toEqual([
      'policy-types: spec.policyTypes: unknown ["Sideways"]',
    ]);
  });

  it("keep the pod selector when it could be read, to tell which pods to report to", () => {
    const result = parsePolicy(
      kept({ podSelector: { matchLabels: { a: "1" } }, ingress: [{ ports: [{ protocol: "ICMP" }] }] }),
    );
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.podSelector?.requirements).toHaveLength(1);
    const unreadable = parsePolicy(kept({ podSelector: { matchLabels: [] } }));
    expect(!unreadable.ok && unreadable.podSelector).toBeUndefined();
  });
});
