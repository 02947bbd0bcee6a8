/**
 * The subtests that upstream's open pull request f2d6941 ("Add conformance tests for
 * PortRange and NamespaceSelector omission", kubernetes-sigs/network-policy-api, not yet
 * on main) adds to CNPAdminTier{Ingress,Egress}{TCP,UDP,SCTP} and CNPAdminTierGress:
 * port ranges, and a `pods` peer without a namespaceSelector (every namespace). Each
 * describe keeps the upstream test's name and holds only the pull request's subtests,
 * in a base cluster with the durmstrang namespace and pods the pull request adds; the
 * scenario's main-line manifests are applied too, as upstream applies both files. When
 * the pull request lands, these join their scenarios in cluster-policy-conformance.test.ts.
 * As there, each probe runs in both families against the oracle and the compiled tiers.
 */
import {
  adminTier_standardEgressSctpPortRangeRules,
  adminTier_standardEgressSctpRules,
  adminTier_standardEgressTcpPortRangeRules,
  adminTier_standardEgressTcpRules,
  adminTier_standardEgressUdpPortRangeRules,
  adminTier_standardEgressUdpRules,
  adminTier_standardGressOmittedNamespaceselector,
  adminTier_standardGressRulesCombined,
  adminTier_standardIngressSctpPortRangeRules,
  adminTier_standardIngressSctpRules,
  adminTier_standardIngressTcpPortRangeRules,
  adminTier_standardIngressTcpRules,
  adminTier_standardIngressUdpPortRangeRules,
  adminTier_standardIngressUdpRules,
  conformanceCluster,
  conformanceTest,
  type Manifest,
  subtest,
} from "../support/cluster-policy-conformance";

const withDurmstrang = (...manifests: Manifest[][]) => conformanceCluster(manifests.flat(), {}, true);

conformanceTest("CNPAdminTierIngressTCP", () => [
  subtest("Should support an 'allow-ingress' policy for TCP protocol at the specified port range", [
    withDurmstrang(adminTier_standardIngressTcpRules(), adminTier_standardIngressTcpPortRangeRules()),
    [
      ["hufflepuff:cedric-diggory-0", "durmstrang:viktor-krum-0", "tcp", 80, true],
      ["hufflepuff:cedric-diggory-0", "durmstrang:viktor-krum-0", "tcp", 8080, true],
      ["hufflepuff:cedric-diggory-1", "durmstrang:viktor-krum-0", "tcp", 8081, false],
    ],
  ]),
]);

conformanceTest("CNPAdminTierIngressUDP", () => [
  subtest("Should support an 'allow-ingress' policy for UDP protocol at the specified port range", [
    withDurmstrang(adminTier_standardIngressUdpRules(), adminTier_standardIngressUdpPortRangeRules()),
    [
      ["hufflepuff:cedric-diggory-0", "durmstrang:viktor-krum-0", "udp", 53, true],
      ["hufflepuff:cedric-diggory-0", "durmstrang:viktor-krum-0", "udp", 5353, true],
      ["hufflepuff:cedric-diggory-1", "durmstrang:viktor-krum-0", "udp", 5354, false],
    ],
  ]),
]);

conformanceTest("CNPAdminTierIngressSCTP", () => [
  subtest("Should support an 'allow-ingress' policy for SCTP protocol at the specified port range", [
    withDurmstrang(adminTier_standardIngressSctpRules(), adminTier_standardIngressSctpPortRangeRules()),
    [
      ["hufflepuff:cedric-diggory-0", "durmstrang:viktor-krum-0", "sctp", 9003, true],
      ["hufflepuff:cedric-diggory-0", "durmstrang:viktor-krum-0", "sctp", 9005, true],
      ["hufflepuff:cedric-diggory-1", "durmstrang:viktor-krum-0", "sctp", 9006, false],
    ],
  ]),
]);

conformanceTest("CNPAdminTierEgressTCP", () => [
  subtest("Should support an 'allow-egress' policy for TCP protocol at the specified port range", [
    withDurmstrang(adminTier_standardEgressTcpRules(), adminTier_standardEgressTcpPortRangeRules()),
    [
      ["durmstrang:viktor-krum-0", "hufflepuff:cedric-diggory-1", "tcp", 8080, true],
      ["durmstrang:viktor-krum-0", "hufflepuff:cedric-diggory-1", "tcp", 80, true],
      ["durmstrang:viktor-krum-1", "hufflepuff:cedric-diggory-1", "tcp", 8081, false],
    ],
  ]),
]);

conformanceTest("CNPAdminTierEgressUDP", () => [
  subtest("Should support an 'allow-egress' policy for UDP protocol at the specified port range", [
    withDurmstrang(adminTier_standardEgressUdpRules(), adminTier_standardEgressUdpPortRangeRules()),
    [
      ["durmstrang:viktor-krum-0", "gryffindor:harry-potter-1", "udp", 53, true],
      ["durmstrang:viktor-krum-0", "gryffindor:harry-potter-1", "udp", 5353, true],
      ["durmstrang:viktor-krum-1", "gryffindor:harry-potter-1", "udp", 5354, false],
    ],
  ]),
]);

conformanceTest("CNPAdminTierEgressSCTP", () => [
  subtest("Should support an 'allow-egress' policy for SCTP protocol at the specified port range", [
    withDurmstrang(adminTier_standardEgressSctpRules(), adminTier_standardEgressSctpPortRangeRules()),
    [
      ["durmstrang:viktor-krum-0", "hufflepuff:cedric-diggory-1", "sctp", 9003, true],
      ["durmstrang:viktor-krum-0", "hufflepuff:cedric-diggory-1", "sctp", 9005, true],
      ["durmstrang:viktor-krum-1", "hufflepuff:cedric-diggory-1", "sctp", 9006, false],
    ],
  ]),
]);

// Upstream runs this last, after its other subtests' patches to gress-rules, which
// select gryffindor only and so cannot change what reaches durmstrang.
conformanceTest("CNPAdminTierGress", () => [
  subtest("Should support matching pods across namespaces when namespaceSelector is omitted", [
    withDurmstrang(adminTier_standardGressRulesCombined(), adminTier_standardGressOmittedNamespaceselector()),
    [
      ["ravenclaw:luna-lovegood-0", "durmstrang:viktor-krum-0", "tcp", 80, false],
      ["hufflepuff:cedric-diggory-0", "durmstrang:viktor-krum-0", "tcp", 80, false],
    ],
  ]),
]);
