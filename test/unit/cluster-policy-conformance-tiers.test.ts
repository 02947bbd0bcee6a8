/**
 * network-policy-api's ClusterNetworkPolicy conformance scenarios (kubernetes-sigs/
 * network-policy-api, conformance/tests/admin-network-policy-standard-priority.go and admin-network-policy-standard-integration.go), ported as model-level truth tables: each
 * upstream test a describe, each subtest an it with upstream's name, each of its probes
 * (client pod, server pod, protocol, port) with upstream's expected verdict, asked in
 * both families of the oracle (test/support/cluster-policy-model.ts) and of the compiled
 * tiers as the datapath judges them. Upstream's subtests patch the policies in turn, each
 * starting from the patches before it: so do these. The base cluster and the manifests
 * are in test/support/cluster-policy-conformance.ts.
 */
import { describe, expect, it } from "vitest";
import type { DirectionPolicy, TierRule } from "../../src/agent/policy/model/compile";
import {
  adminTier_standardPriorityField,
  apiIntegration_standardAnpNpBanp,
  conformanceTest,
  editRule,
  mismatches,
  NS,
  patch,
  type Scenario,
  subtest,
  withoutPolicy,
} from "../support/cluster-policy-conformance";
import { type DirectionJudge, datapathJudge, ruleCovers } from "../support/policy-cluster";
import type { Probe } from "../support/policy-model";

/** conformance/tests/admin-network-policy-standard-priority.go, over conformance/base/admin_tier/standard-priority-field.yaml */
const priorityField = conformanceTest("CNPAdminTierPriorityField", () => {
  const s0 = adminTier_standardPriorityField();
  // The Pass policy moves from priority 60 to 40, ahead of the Deny at 50.
  const s1 = patch(s0, "old-priority-60-new-priority-40-example", (spec) => ({ ...spec, priority: 40 }));
  return [
    subtest("Should Deny traffic from slytherin to gryffindor respecting admin CNP", [
      s0,
      [
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, false],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, false],
      ],
    ]),
    subtest("Should Deny traffic to slytherin from gryffindor respecting admin CNP", [
      s0,
      [
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, false],
      ],
    ]),
    subtest(
      "Should respect admin CNP priority field; thus passing both ingress and egress traffic over to baseline CNP",
      [
        s1,
        [
          ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, true],
          ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
          ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, true],
        ],
      ],
    ),
  ];
});
/** conformance/tests/admin-network-policy-standard-integration.go, over conformance/base/api_integration/standard-anp-np-banp.yaml */
const integration = conformanceTest("CNPAdminTierIntegration", () => {
  const s0 = apiIntegration_standardAnpNpBanp();
  const pass = (rule: Record<string, unknown>) => ({ ...rule, action: "Pass" });
  const s1 = editRule(s0, "pass-example", "ingress", 0, pass);
  const s2 = editRule(s1, "pass-example", "egress", 0, pass);
  // With the NetworkPolicy gone, Baseline's Deny is what the Passes reach.
  const s3 = withoutPolicy(s2, `${NS("gryffindor")}/allow-gress-from-to-slytherin-to-gryffindor`);
  return [
    subtest("Should Deny traffic from slytherin to gryffindor respecting admin CNP", [
      s0,
      [
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, false],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, false],
      ],
    ]),
    subtest("Should Deny traffic to slytherin from gryffindor respecting admin CNP", [
      s0,
      [
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, false],
      ],
    ]),
    subtest("Should support a 'pass-ingress' policy for admin CNP and respect the match for network policy", [
      s1,
      [
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, true],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
      ],
    ]),
    subtest("Should support a 'pass-egress' policy for admin CNP and respect the match for network policy", [
      s2,
      [
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, true],
      ],
    ]),
    subtest(
      "Should support a 'pass-ingress' policy for admin CNP and respect the match for baseline cluster network policy",
      [
        s3,
        [
          ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, false],
          ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, false],
        ],
      ],
    ),
    subtest(
      "Should support a 'pass-egress' policy for admin CNP and respect the match for baseline cluster network policy",
      [
        s3,
        [
          ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, false],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, false],
        ],
      ],
    ),
  ];
});

/**
 * The suite can fail: copies of the datapath's judgement with the tiers' order broken
 * (policy-cluster.ts's datapathJudge, altered here, never in the product), each of which
 * some ported scenario must catch. Only the compiled side is judged by the mutant; the
 * oracle is left out of it.
 */
describe("conformance suite mutation check", () => {
  type Tiers = { direction: DirectionPolicy; matches: (r: { peers: unknown; ports: unknown }) => boolean };
  const tiersOf = (direction: DirectionPolicy, ip: string, probe: Probe): Tiers => ({
    direction,
    matches: (r) => ruleCovers(r as TierRule, ip, probe),
  });
  const networkPolicy = ({ direction, matches }: Tiers) =>
    direction.unisolated ? undefined : direction.rules.some((r) => matches(r));
  const first = (rules: TierRule[] | undefined, { matches }: Tiers) => rules?.find((r) => matches(r))?.action;

  const mutants: Record<string, DirectionJudge> = {
    "Baseline evaluated before NetworkPolicy": (direction, ip, probe) => {
      if (!direction) return true;
      const t = tiersOf(direction, ip, probe);
      const admin = first(direction.admin, t);
      if (admin === "Accept" || admin === "Deny") return admin === "Accept";
      const baseline = first(direction.baseline, t);
      if (baseline !== undefined) return baseline === "Accept";
      return networkPolicy(t) ?? true;
    },
    "Pass treated as Accept": (direction, ip, probe) => {
      if (!direction) return true;
      const t = tiersOf(direction, ip, probe);
      const admin = first(direction.admin, t);
      if (admin !== undefined) return admin !== "Deny";
      return datapathJudge({ ...direction, admin: [] }, ip, probe);
    },
    "NetworkPolicy evaluated before Admin": (direction, ip, probe) => {
      if (!direction) return true;
      const t = tiersOf(direction, ip, probe);
      const np = networkPolicy(t);
      if (np !== undefined) return np;
      return datapathJudge(direction, ip, probe);
    },
  };

  const scenarios: Scenario[] = [priorityField, integration];
  const caught = (judge: DirectionJudge) =>
    scenarios.flatMap((scenario) =>
      scenario.subtests
        .filter((s) => s.checks.some(([world, pokes]) => mismatches(world, pokes, judge).length > 0))
        .map((s) => `${scenario.name}: ${s.name}`),
    );

  it("the datapath's own judgement passes every scenario here", () => {
    expect(caught(datapathJudge)).toEqual([]);
  });

  const expectedCatch: Record<string, string> = {
    "Baseline evaluated before NetworkPolicy":
      "CNPAdminTierIntegration: Should support a 'pass-ingress' policy for admin CNP and respect the match for network policy",
    "Pass treated as Accept":
      "CNPAdminTierIntegration: Should support a 'pass-ingress' policy for admin CNP and respect the match for baseline cluster network policy",
    "NetworkPolicy evaluated before Admin":
      "CNPAdminTierIntegration: Should Deny traffic from slytherin to gryffindor respecting admin CNP",
  };
  for (const [name, judge] of Object.entries(mutants)) {
    it(`a ported scenario fails with ${name}`, () => {
      expect(caught(judge)).toContain(expectedCatch[name]);
    });
  }
});
