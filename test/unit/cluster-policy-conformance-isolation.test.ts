/**
 * The scenarios of upstream's open pull request 896ee81 ("conformance: verify CNP
 * ingress/egress directional isolation (Admin + Baseline)", kubernetes-sigs/
 * network-policy-api, not yet on main; its tests/*-standard-ingress-egress-isolation.go
 * over base/{admin,baseline}_tier/standard-{ingress,egress}-isolation.yaml): a
 * ClusterNetworkPolicy with rules in one direction only leaves the other direction of
 * its subject alone ("CNPs with no ingress rules do not affect ingress traffic", and the
 * same for egress). Upstream's names, subtests and verdicts; each probe in both families
 * against the oracle and the compiled tiers, in the main-line base cluster.
 */
import { clusterPolicy, conformanceTest, named, subtest } from "../support/cluster-policy-conformance";

const deny = (direction: "ingress" | "egress") => [
  direction === "ingress"
    ? { name: "deny-from-slytherin", action: "Deny", from: [{ namespaces: named("slytherin") }] }
    : { name: "deny-to-slytherin", action: "Deny", to: [{ namespaces: named("slytherin") }] },
];

/** base/{admin,baseline}_tier/standard-{ingress,egress}-isolation.yaml: one direction's rule only. */
const isolation = (tier: "Admin" | "Baseline", direction: "ingress" | "egress") => [
  clusterPolicy(`${tier.toLowerCase()}-${direction}-isolation`, {
    tier,
    priority: 20,
    subject: { namespaces: named("gryffindor") },
    [direction]: deny(direction),
  }),
];

for (const tier of ["Admin", "Baseline"] as const) {
  conformanceTest(`CNP${tier}TierIngressRulesEgressUnaffected`, () => {
    const s0 = isolation(tier, "ingress");
    return [
      subtest("Should enforce the ingress rule: deny ingress from slytherin to gryffindor", [
        s0,
        [["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, false]],
      ]),
      subtest("Should not affect egress: gryffindor can still egress to ravenclaw", [
        s0,
        [["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "tcp", 80, true]],
      ]),
      subtest("Should not affect egress: gryffindor can still egress to hufflepuff", [
        s0,
        [["gryffindor:harry-potter-0", "hufflepuff:cedric-diggory-0", "tcp", 80, true]],
      ]),
    ];
  });

  conformanceTest(`CNP${tier}TierEgressRulesIngressUnaffected`, () => {
    const s0 = isolation(tier, "egress");
    return [
      subtest("Should enforce the egress rule: deny egress from gryffindor to slytherin", [
        s0,
        [["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, false]],
      ]),
      subtest("Should not affect ingress: ravenclaw can still reach gryffindor", [
        s0,
        [["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-0", "tcp", 80, true]],
      ]),
      subtest("Should not affect ingress: hufflepuff can still reach gryffindor", [
        s0,
        [["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-0", "tcp", 80, true]],
      ]),
    ];
  });
}
