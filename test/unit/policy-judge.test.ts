/**
 * Audit mode's model (src/agent/policy/model): a pod compiled with its audit-mode
 * policies left out (what the datapath enforces) or in, as if enforced; and one
 * direction judging a flow as the programs do (judge.ts), which is how the agent tells
 * what an audit-mode policy would deny.
 */
import { describe, expect, it } from "vitest";
import type { ParsedClusterPolicy } from "../../src/agent/policy/model/cluster-parse";
import { type CompileSource, compilePod, type DirectionPolicy } from "../../src/agent/policy/model/compile";
import { judgeDirection } from "../../src/agent/policy/model/judge";
import type { KeptPolicy, PolicyPod } from "../../src/agent/policy/model/objects";
import { type ParsedPolicy, parsePolicy } from "../../src/agent/policy/model/parse";

const server: PolicyPod = {
  namespace: "b",
  name: "server",
  labels: { app: "server" },
  ips: ["10.0.1.7"],
  hostNetwork: false,
  ports: [],
  nodeName: "node-2",
};

/** A NetworkPolicy of namespace b, as the API gives it and the agent reads it. */
function parsed(name: string, spec: KeptPolicy["spec"], audit = false): ParsedPolicy {
  const kept: KeptPolicy = { namespace: "b", name, spec };
  if (audit) kept.audit = true;
  const read = parsePolicy(kept);
  if (!read.ok) throw new Error(JSON.stringify(read.problems));
  return read.policy;
}
const allowA80 = parsed("allow-a", {
  podSelector: {},
  policyTypes: ["Ingress"],
  ingress: [{ from: [{ ipBlock: { cidr: "10.0.0.0/24" } }], ports: [{ protocol: "TCP", port: 80 }] }],
});
const denyAll = parsed("deny-all", { podSelector: {}, policyTypes: ["Ingress"] }, true);

function source(policies: ParsedPolicy[], cluster: ParsedClusterPolicy[] = []): CompileSource {
  return {
    selecting: () => policies,
    unreadable: () => [],
    peerPods: () => [],
    clusterSelecting: () => cluster,
  };
}

describe("compiling with audit-mode policies", () => {
  it("leaves them out of what is enforced, names them, and compiles them in as if enforced for the audit", () => {
    const enforced = compilePod(server, source([denyAll]));
    expect(enforced.policy).toEqual({});
    expect(enforced.selectedBy).toEqual([]);
    expect(enforced.auditedBy).toEqual(["b/deny-all"]);
    const audited = compilePod(server, source([denyAll]), "audited");
    expect(audited.policy.ingress).toEqual({ rules: [] });
    expect(audited.selectedBy).toEqual(["b/deny-all"]);
  });

  it("compiles an enforced policy the same either way, the audit-mode one beside it only in the audit", () => {
    const enforced = compilePod(server, source([allowA80, denyAll]));
    expect(enforced.policy.ingress?.rules.map((r) => r.origin)).toEqual(["b/allow-a ingress[0]"]);
    expect(enforced.auditedBy).toEqual(["b/deny-all"]);
    const withoutAudit = compilePod(server, source([allowA80]));
    expect(withoutAudit.policy).toEqual(enforced.policy);
    expect(withoutAudit.auditedBy).toBeUndefined();
  });
});

const tcp = (remote: string, port: number) => ({ remote, protocol: "TCP" as const, port });

describe("judging a flow as the programs do", () => {
  const np: DirectionPolicy = {
    rules: [
      {
        origin: "b/p ingress[0]",
        peers: [{ cidr: "10.0.0.0/24", except: ["10.0.0.9/32"] }],
        ports: [{ protocol: "TCP", from: 80, to: 81 }],
      },
      { origin: "b/q ingress[0]", peers: [{ cidr: "fd00::/64", except: [] }], ports: "any" },
    ],
  };

  it("allows by the first rule matching address and port, outside its excepts; else the default deny", () => {
    expect(judgeDirection(np, tcp("10.0.0.5", 81))).toEqual({ allowed: true, by: "b/p ingress[0]" });
    expect(judgeDirection(np, tcp("10.0.0.9", 80))).toEqual({ allowed: false, by: "default deny" });
    expect(judgeDirection(np, tcp("10.0.0.5", 82)).allowed).toBe(false);
    expect(judgeDirection(np, { remote: "10.0.0.5", protocol: "UDP", port: 80 }).allowed).toBe(false);
    expect(judgeDirection(np, { remote: "fd00::7", protocol: undefined, port: 0 })).toEqual({
      allowed: true,
      by: "b/q ingress[0]",
    });
    // A flow without ports matches only a rule naming none.
    expect(judgeDirection(np, { remote: "10.0.0.5", protocol: undefined, port: 0 }).allowed).toBe(false);
    expect(judgeDirection(undefined, tcp("192.0.2.1", 1))).toEqual({ allowed: true, by: "no rule" });
    expect(judgeDirection({ rules: [] }, tcp("10.0.0.5", 80)).allowed).toBe(false);
  });

  it("reads the tiers: Admin first (Pass on to the NetworkPolicies), Baseline after, else allowed", () => {
    const tier = (action: "Accept" | "Deny" | "Pass", rule: string, cidr: string) => ({
      origin: `c ${rule}`,
      peers: [{ cidr, except: [] }],
      ports: "any" as const,
      action,
      policy: "c",
      rule,
    });
    const tiered: DirectionPolicy = {
      ...np,
      admin: [tier("Pass", "pass-5", "10.0.0.5/32"), tier("Deny", "no-10", "10.0.0.0/8")],
    };
    expect(judgeDirection(tiered, tcp("10.0.0.5", 80))).toEqual({ allowed: true, by: "b/p ingress[0]" });
    expect(judgeDirection(tiered, tcp("10.0.0.6", 80))).toEqual({ allowed: false, by: "c/no-10 (Admin Deny)" });
    const baseline: DirectionPolicy = {
      rules: [],
      unisolated: true,
      baseline: [tier("Deny", "no-192", "192.0.2.0/24")],
    };
    expect(judgeDirection(baseline, tcp("192.0.2.1", 80))).toEqual({ allowed: false, by: "c/no-192 (Baseline Deny)" });
    expect(judgeDirection(baseline, tcp("198.51.100.1", 80))).toEqual({ allowed: true, by: "no rule" });
  });
});
