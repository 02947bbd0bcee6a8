/**
 * network-policy-api's ClusterNetworkPolicy conformance scenarios (kubernetes-sigs/
 * network-policy-api, conformance/tests/admin-network-policy-standard-{ingress,egress}-{tcp,udp,sctp}-rules.go and admin-network-policy-standard-gress-rules.go), ported as model-level truth tables: each
 * upstream test a describe, each subtest an it with upstream's name, each of its probes
 * (client pod, server pod, protocol, port) with upstream's expected verdict, asked in
 * both families of the oracle (test/support/cluster-policy-model.ts) and of the compiled
 * tiers as the datapath judges them. Upstream's subtests patch the policies in turn, each
 * starting from the patches before it: so do these. The base cluster and the manifests
 * are in test/support/cluster-policy-conformance.ts.
 */
import {
  adminTier_standardEgressSctpRules,
  adminTier_standardEgressTcpRules,
  adminTier_standardEgressUdpRules,
  adminTier_standardGressRulesCombined,
  adminTier_standardIngressSctpRules,
  adminTier_standardIngressTcpRules,
  adminTier_standardIngressUdpRules,
  conformanceTest,
  subtest,
  swapRules,
} from "../support/cluster-policy-conformance";

/** conformance/tests/admin-network-policy-standard-ingress-tcp-rules.go, over conformance/base/admin_tier/standard-ingress-tcp-rules.yaml */
conformanceTest("CNPAdminTierIngressTCP", () => {
  const s0 = adminTier_standardIngressTcpRules();
  const s1 = swapRules(s0, "ingress-tcp", "ingress", 0, 1);
  const s2 = swapRules(s1, "ingress-tcp", "ingress", 0, 2);
  const s3 = swapRules(s2, "ingress-tcp", "ingress", 3, 4);
  return [
    subtest("Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected", [
      s0,
      [
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-0", "tcp", 80, true],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
      ],
    ]),
    subtest("Should support an 'allow-ingress' policy for TCP protocol at the specified port", [
      s0,
      [
        ["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-1", "tcp", 80, true],
        ["hufflepuff:cedric-diggory-1", "gryffindor:harry-potter-1", "tcp", 8080, false],
      ],
    ]),
    subtest("Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected", [
      s1,
      [
        // UPSTREAM: mutate.Spec.Ingress[0]
        // UPSTREAM: mutate.Spec.Ingress[1] = allowRule
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-1", "tcp", 80, false],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-1", "tcp", 8080, false],
      ],
    ]),
    subtest("Should support a 'deny-ingress' policy for TCP protocol at the specified port", [
      s1,
      [
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, false],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
      ],
    ]),
    subtest("Should support an 'pass-ingress' policy for TCP protocol; ensure rule ordering is respected", [
      s2,
      [
        // UPSTREAM: mutate.Spec.Ingress[0]
        // UPSTREAM: mutate.Spec.Ingress[2] = denyRule
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-0", "tcp", 80, true],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
      ],
    ]),
    subtest("Should support a 'pass-ingress' policy for TCP protocol at the specified port", [
      s3,
      [
        // UPSTREAM: mutate.Spec.Ingress[3]
        // UPSTREAM: mutate.Spec.Ingress[4] = denyRule
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, true],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-standard-ingress-udp-rules.go, over conformance/base/admin_tier/standard-ingress-udp-rules.yaml */
conformanceTest("CNPAdminTierIngressUDP", () => {
  const s0 = adminTier_standardIngressUdpRules();
  const s1 = swapRules(s0, "ingress-udp", "ingress", 0, 1);
  const s2 = swapRules(s1, "ingress-udp", "ingress", 0, 2);
  const s3 = swapRules(s2, "ingress-udp", "ingress", 3, 4);
  return [
    subtest("Should support an 'allow-ingress' policy for UDP protocol; ensure rule ordering is respected", [
      s0,
      [
        ["ravenclaw:luna-lovegood-0", "hufflepuff:cedric-diggory-0", "udp", 53, true],
        ["ravenclaw:luna-lovegood-1", "hufflepuff:cedric-diggory-0", "udp", 5353, true],
      ],
    ]),
    subtest("Should support an 'allow-ingress' policy for UDP protocol at the specified port", [
      s0,
      [
        ["gryffindor:harry-potter-0", "hufflepuff:cedric-diggory-1", "udp", 53, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "udp", 5353, false],
      ],
    ]),
    subtest("Should support an 'deny-ingress' policy for UDP protocol; ensure rule ordering is respected", [
      s1,
      [
        // UPSTREAM: mutate.Spec.Ingress[0]
        // UPSTREAM: mutate.Spec.Ingress[1] = allowRule
        ["ravenclaw:luna-lovegood-0", "hufflepuff:cedric-diggory-1", "udp", 53, false],
        ["ravenclaw:luna-lovegood-1", "hufflepuff:cedric-diggory-1", "udp", 5353, false],
      ],
    ]),
    subtest("Should support a 'deny-ingress' policy for UDP protocol at the specified port", [
      s1,
      [
        ["slytherin:draco-malfoy-0", "hufflepuff:cedric-diggory-0", "udp", 5353, false],
        ["slytherin:draco-malfoy-1", "hufflepuff:cedric-diggory-0", "udp", 53, true],
      ],
    ]),
    subtest("Should support an 'pass-ingress' policy for UDP protocol; ensure rule ordering is respected", [
      s2,
      [
        // UPSTREAM: mutate.Spec.Ingress[0]
        // UPSTREAM: mutate.Spec.Ingress[2] = denyRule
        ["ravenclaw:luna-lovegood-0", "hufflepuff:cedric-diggory-1", "udp", 5353, true],
        ["ravenclaw:luna-lovegood-1", "hufflepuff:cedric-diggory-1", "udp", 53, true],
      ],
    ]),
    subtest("Should support a 'pass-ingress' policy for UDP protocol at the specified port", [
      s3,
      [
        // UPSTREAM: mutate.Spec.Ingress[3]
        // UPSTREAM: mutate.Spec.Ingress[4] = denyRule
        ["slytherin:draco-malfoy-0", "hufflepuff:cedric-diggory-0", "udp", 5353, true],
        ["slytherin:draco-malfoy-1", "hufflepuff:cedric-diggory-0", "udp", 53, true],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-standard-ingress-sctp-rules.go, over conformance/base/admin_tier/standard-ingress-sctp-rules.yaml */
conformanceTest("CNPAdminTierIngressSCTP", () => {
  const s0 = adminTier_standardIngressSctpRules();
  const s1 = swapRules(s0, "ingress-sctp", "ingress", 0, 1);
  const s2 = swapRules(s1, "ingress-sctp", "ingress", 0, 2);
  const s3 = swapRules(s2, "ingress-sctp", "ingress", 3, 4);
  return [
    subtest("Should support an 'allow-ingress' policy for SCTP protocol; ensure rule ordering is respected", [
      s0,
      [
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "sctp", 9003, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "sctp", 9005, true],
      ],
    ]),
    subtest("Should support an 'allow-ingress' policy for SCTP protocol at the specified port", [
      s0,
      [
        ["hufflepuff:cedric-diggory-0", "ravenclaw:luna-lovegood-1", "sctp", 9003, true],
        ["hufflepuff:cedric-diggory-1", "ravenclaw:luna-lovegood-1", "sctp", 9005, false],
      ],
    ]),
    subtest("Should support an 'deny-ingress' policy for SCTP protocol; ensure rule ordering is respected", [
      s1,
      [
        // UPSTREAM: mutate.Spec.Ingress[0]
        // UPSTREAM: mutate.Spec.Ingress[1] = allowRule
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-1", "sctp", 9003, false],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "sctp", 9005, false],
      ],
    ]),
    subtest("Should support a 'deny-ingress' policy for SCTP protocol at the specified port", [
      s1,
      [
        ["slytherin:draco-malfoy-0", "ravenclaw:luna-lovegood-0", "sctp", 9003, false],
        ["slytherin:draco-malfoy-1", "ravenclaw:luna-lovegood-0", "sctp", 9005, true],
      ],
    ]),
    subtest("Should support an 'pass-ingress' policy for SCTP protocol; ensure rule ordering is respected", [
      s2,
      [
        // UPSTREAM: mutate.Spec.Ingress[0]
        // UPSTREAM: mutate.Spec.Ingress[2] = denyRule
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-1", "sctp", 9003, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "sctp", 9005, true],
      ],
    ]),
    subtest("Should support a 'pass-ingress' policy for SCTP protocol at the specified port", [
      s3,
      [
        // UPSTREAM: mutate.Spec.Ingress[3]
        // UPSTREAM: mutate.Spec.Ingress[4] = denyRule
        ["slytherin:draco-malfoy-0", "ravenclaw:luna-lovegood-0", "sctp", 9003, true],
        ["slytherin:draco-malfoy-1", "ravenclaw:luna-lovegood-0", "sctp", 9005, true],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-standard-egress-tcp-rules.go, over conformance/base/admin_tier/standard-egress-tcp-rules.yaml */
conformanceTest("CNPAdminTierEgressTCP", () => {
  const s0 = adminTier_standardEgressTcpRules();
  const s1 = swapRules(s0, "egress-tcp", "egress", 0, 1);
  const s2 = swapRules(s1, "egress-tcp", "egress", 0, 2);
  const s3 = swapRules(s2, "egress-tcp", "egress", 3, 4);
  return [
    subtest("Should support an 'allow-egress' policy for TCP protocol; ensure rule ordering is respected", [
      s0,
      [
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "tcp", 8080, true],
      ],
    ]),
    subtest("Should support an 'allow-egress' policy for TCP protocol at the specified port", [
      s0,
      [
        ["gryffindor:harry-potter-0", "hufflepuff:cedric-diggory-1", "tcp", 8080, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "tcp", 80, false],
      ],
    ]),
    subtest("Should support an 'deny-egress' policy for TCP protocol; ensure rule ordering is respected", [
      s1,
      [
        // UPSTREAM: mutate.Spec.Egress[0]
        // UPSTREAM: mutate.Spec.Egress[1] = allowRule
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-1", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "tcp", 8080, false],
      ],
    ]),
    subtest("Should support a 'deny-egress' policy for TCP protocol at the specified port", [
      s1,
      [
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, true],
      ],
    ]),
    subtest("Should support an 'pass-egress' policy for TCP protocol; ensure rule ordering is respected", [
      s2,
      [
        // UPSTREAM: mutate.Spec.Egress[0]
        // UPSTREAM: mutate.Spec.Egress[2] = denyRule
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "tcp", 8080, true],
      ],
    ]),
    subtest("Should support a 'pass-egress' policy for TCP protocol at the specified port", [
      s3,
      [
        // UPSTREAM: mutate.Spec.Egress[3]
        // UPSTREAM: mutate.Spec.Egress[4] = denyRule
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, true],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-standard-egress-udp-rules.go, over conformance/base/admin_tier/standard-egress-udp-rules.yaml */
conformanceTest("CNPAdminTierEgressUDP", () => {
  const s0 = adminTier_standardEgressUdpRules();
  const s1 = swapRules(s0, "egress-udp", "egress", 0, 1);
  const s2 = swapRules(s1, "egress-udp", "egress", 0, 2);
  const s3 = swapRules(s2, "egress-udp", "egress", 3, 4);
  return [
    subtest("Should support an 'allow-egress' policy for UDP protocol; ensure rule ordering is respected", [
      s0,
      [
        ["hufflepuff:cedric-diggory-0", "ravenclaw:luna-lovegood-0", "udp", 53, true],
        ["hufflepuff:cedric-diggory-1", "ravenclaw:luna-lovegood-0", "udp", 5353, true],
      ],
    ]),
    subtest("Should support an 'allow-egress' policy for UDP protocol at the specified port", [
      s0,
      [
        ["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-1", "udp", 53, true],
        ["hufflepuff:cedric-diggory-1", "gryffindor:harry-potter-1", "udp", 5353, false],
      ],
    ]),
    subtest("Should support an 'deny-egress' policy for UDP protocol; ensure rule ordering is respected", [
      s1,
      [
        // UPSTREAM: mutate.Spec.Egress[0]
        // UPSTREAM: mutate.Spec.Egress[1] = allowRule
        ["hufflepuff:cedric-diggory-0", "ravenclaw:luna-lovegood-1", "udp", 53, false],
        ["hufflepuff:cedric-diggory-1", "ravenclaw:luna-lovegood-1", "udp", 5353, false],
      ],
    ]),
    subtest("Should support a 'deny-egress' policy for UDP protocol at the specified port", [
      s1,
      [
        ["hufflepuff:cedric-diggory-0", "slytherin:draco-malfoy-0", "udp", 5353, false],
        ["hufflepuff:cedric-diggory-1", "slytherin:draco-malfoy-0", "udp", 53, true],
      ],
    ]),
    subtest("Should support an 'pass-egress' policy for UDP protocol; ensure rule ordering is respected", [
      s2,
      [
        // UPSTREAM: mutate.Spec.Egress[0]
        // UPSTREAM: mutate.Spec.Egress[2] = denyRule
        ["hufflepuff:cedric-diggory-0", "ravenclaw:luna-lovegood-1", "udp", 5353, true],
        ["hufflepuff:cedric-diggory-1", "ravenclaw:luna-lovegood-1", "udp", 53, true],
      ],
    ]),
    subtest("Should support a 'pass-egress' policy for UDP protocol at the specified port", [
      s3,
      [
        // UPSTREAM: mutate.Spec.Egress[3]
        // UPSTREAM: mutate.Spec.Egress[4] = denyRule
        ["hufflepuff:cedric-diggory-0", "slytherin:draco-malfoy-0", "udp", 5353, true],
        ["hufflepuff:cedric-diggory-1", "slytherin:draco-malfoy-0", "udp", 53, true],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-standard-egress-sctp-rules.go, over conformance/base/admin_tier/standard-egress-sctp-rules.yaml */
conformanceTest("CNPAdminTierEgressSCTP", () => {
  const s0 = adminTier_standardEgressSctpRules();
  const s1 = swapRules(s0, "egress-sctp", "egress", 0, 1);
  const s2 = swapRules(s1, "egress-sctp", "egress", 0, 2);
  const s3 = swapRules(s2, "egress-sctp", "egress", 3, 4);
  return [
    subtest("Should support an 'allow-egress' policy for SCTP protocol; ensure rule ordering is respected", [
      s0,
      [
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-0", "sctp", 9003, true],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "sctp", 9005, true],
      ],
    ]),
    subtest("Should support an 'allow-egress' policy for SCTP protocol at the specified port", [
      s0,
      [
        ["ravenclaw:luna-lovegood-0", "hufflepuff:cedric-diggory-1", "sctp", 9003, true],
        ["ravenclaw:luna-lovegood-1", "hufflepuff:cedric-diggory-1", "sctp", 9005, false],
      ],
    ]),
    subtest("Should support an 'deny-egress' policy for SCTP protocol; ensure rule ordering is respected", [
      s1,
      [
        // UPSTREAM: mutate.Spec.Egress[0]
        // UPSTREAM: mutate.Spec.Egress[1] = allowRule
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-1", "sctp", 9003, false],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-1", "sctp", 9005, false],
      ],
    ]),
    subtest("Should support a 'deny-egress' policy for SCTP protocol at the specified port", [
      s1,
      [
        ["ravenclaw:luna-lovegood-0", "slytherin:draco-malfoy-0", "sctp", 9003, false],
        ["ravenclaw:luna-lovegood-1", "slytherin:draco-malfoy-0", "sctp", 9005, true],
      ],
    ]),
    subtest("Should support an 'pass-egress' policy for SCTP protocol; ensure rule ordering is respected", [
      s2,
      [
        // UPSTREAM: mutate.Spec.Egress[0]
        // UPSTREAM: mutate.Spec.Egress[2] = denyRule
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-1", "sctp", 9003, true],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-1", "sctp", 9005, true],
      ],
    ]),
    subtest("Should support a 'pass-egress' policy for SCTP protocol at the specified port", [
      s3,
      [
        // UPSTREAM: mutate.Spec.Egress[3]
        // UPSTREAM: mutate.Spec.Egress[4] = denyRule
        ["ravenclaw:luna-lovegood-0", "slytherin:draco-malfoy-0", "sctp", 9003, true],
        ["ravenclaw:luna-lovegood-1", "slytherin:draco-malfoy-0", "sctp", 9005, true],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-standard-gress-rules.go, over conformance/base/admin_tier/standard-gress-rules-combined.yaml */
conformanceTest("CNPAdminTierGress", () => {
  const s0 = adminTier_standardGressRulesCombined();
  const s1 = swapRules(swapRules(s0, "gress-rules", "egress", 0, 1), "gress-rules", "ingress", 0, 1);
  const s2 = swapRules(swapRules(s1, "gress-rules", "egress", 0, 2), "gress-rules", "ingress", 0, 2);
  const s3 = swapRules(swapRules(s2, "gress-rules", "egress", 3, 4), "gress-rules", "ingress", 3, 4);
  return [
    subtest("Should support an 'allow-gress' policy across different protocols", [
      s0,
      [
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "udp", 53, true],
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "sctp", 9003, true],
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-0", "tcp", 80, true],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "udp", 53, true],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "sctp", 9003, true],
      ],
    ]),
    subtest("Should support an 'allow-gress' policy across different protocols at the specified ports", [
      s0,
      [
        ["gryffindor:harry-potter-0", "hufflepuff:cedric-diggory-1", "tcp", 8080, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "tcp", 80, false],
        ["gryffindor:harry-potter-0", "hufflepuff:cedric-diggory-1", "udp", 5353, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "udp", 53, false],
        ["gryffindor:harry-potter-0", "hufflepuff:cedric-diggory-1", "sctp", 9003, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "sctp", 9005, false],
        ["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-1", "tcp", 80, true],
        ["hufflepuff:cedric-diggory-1", "gryffindor:harry-potter-1", "tcp", 8080, false],
        ["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-1", "udp", 5353, true],
        ["hufflepuff:cedric-diggory-1", "gryffindor:harry-potter-1", "udp", 53, false],
        ["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-1", "sctp", 9003, true],
        ["hufflepuff:cedric-diggory-1", "gryffindor:harry-potter-1", "sctp", 9005, false],
      ],
    ]),
    subtest("Should support an 'deny-gress' policy across different protocols", [
      s1,
      [
        // UPSTREAM: mutate.Spec.Egress[0]
        // UPSTREAM: mutate.Spec.Egress[1] = allowOutRule
        // UPSTREAM: mutate.Spec.Ingress[0]
        // UPSTREAM: mutate.Spec.Ingress[1] = allowInRule
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-1", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "udp", 53, false],
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-1", "sctp", 9003, false],
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-1", "tcp", 80, false],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-1", "udp", 53, false],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-1", "sctp", 9003, false],
      ],
    ]),
    subtest("Should support a 'deny-gress' policy across different protocols at the specified ports", [
      s1,
      [
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, true],
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "udp", 53, false],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "udp", 5353, true],
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "sctp", 9003, false],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "sctp", 9005, true],
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, false],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "udp", 53, false],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "udp", 5353, true],
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "sctp", 9003, false],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "sctp", 9005, true],
      ],
    ]),
    subtest("Should support an 'pass-gress' policy across different protocols", [
      s2,
      [
        // UPSTREAM: mutate.Spec.Egress[0]
        // UPSTREAM: mutate.Spec.Egress[2] = denyOutRule
        // UPSTREAM: mutate.Spec.Ingress[0]
        // UPSTREAM: mutate.Spec.Ingress[2] = denyInRule
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "tcp", 80, true],
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "udp", 5353, true],
        ["gryffindor:harry-potter-0", "ravenclaw:luna-lovegood-0", "sctp", 9003, true],
        ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-0", "tcp", 80, true],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "udp", 53, true],
        ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "sctp", 9003, true],
      ],
    ]),
    subtest("Should support a 'pass-gress' policy across different protocols at the specified ports", [
      s3,
      [
        // UPSTREAM: mutate.Spec.Egress[3]
        // UPSTREAM: mutate.Spec.Egress[4] = denyToRule
        // UPSTREAM: mutate.Spec.Ingress[3]
        // UPSTREAM: mutate.Spec.Ingress[4] = denyInRule
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 8080, true],
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "udp", 53, true],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "udp", 5353, true],
        ["gryffindor:harry-potter-0", "slytherin:draco-malfoy-0", "sctp", 9003, true],
        ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "sctp", 9005, true],
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, true],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "udp", 53, true],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "udp", 5353, true],
        ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "sctp", 9003, true],
        ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "sctp", 9005, true],
      ],
    ]),
  ];
});
