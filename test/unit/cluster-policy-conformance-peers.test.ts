/**
 * network-policy-api's ClusterNetworkPolicy conformance scenarios (kubernetes-sigs/
 * network-policy-api, conformance/tests/*-standard-egress-inline-cidr-rules.go and *-experimental-{ingress,egress}-rules.go), ported as model-level truth tables: each
 * upstream test a describe, each subtest an it with upstream's name, each of its probes
 * (client pod, server pod, protocol, port) with upstream's expected verdict, asked in
 * both families of the oracle (test/support/cluster-policy-model.ts) and of the compiled
 * tiers as the datapath judges them. Upstream's subtests patch the policies in turn, each
 * starting from the patches before it: so do these. The base cluster and the manifests
 * are in test/support/cluster-policy-conformance.ts.
 */
import {
  adminTier_experimentalEgressSelectorRules,
  adminTier_standardEgressInlineCidrRules,
  adminTier_standardEgressTcpRules,
  adminTier_standardIngressUdpRules,
  baselineTier_experimentalEgressSelectorRules,
  baselineTier_standardEgressInlineCidrRules,
  baselineTier_standardEgressUdpRules,
  baselineTier_standardIngressTcpRules,
  conformanceCluster,
  conformanceTest,
  editRule,
  HNP,
  patch,
  podAddresses,
  subtest,
} from "../support/cluster-policy-conformance";

const hostPrefixes = (ref: string) => podAddresses(ref).map((ip) => (ip.includes(":") ? `${ip}/128` : `${ip}/32`));

/** conformance/tests/admin-network-policy-standard-egress-inline-cidr-rules.go, over conformance/base/admin_tier/standard-egress-inline-cidr-rules.yaml */
conformanceTest("CNPAdminTierEgressInlineCIDRPeers", () => {
  const s0 = adminTier_standardEgressInlineCidrRules();
  // Slytherin's namespace relabelled, then labelled back (the API server keeps kubernetes.io/metadata.name).
  const relabelled = conformanceCluster(s0, { slytherin: { "conformance-house": "denied-namespace-label" } });
  // A rule put first, accepting two pods' addresses as host prefixes: upstream writes the
  // cluster's family's (PodIP/32 or /128); both families' here, as the probes run in both.
  const s1 = patch(s0, "inline-cidr-as-peers-example", (spec) => ({
    ...spec,
    egress: [
      {
        name: "allow-egress-to-specific-podIPs",
        action: "Accept",
        to: [{ networks: ["ravenclaw:luna-lovegood-0", "hufflepuff:cedric-diggory-0"].flatMap(hostPrefixes) }],
      },
      ...(spec.egress as unknown[]),
    ],
  }));
  return [
    subtest(
      "Should support a 'deny-egress' rule policy for egress-cidr-peer",
      [
        s0,
        [
          ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "tcp", 80, false],
          ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "udp", 53, false],
          ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "sctp", 9003, false],
          ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "tcp", 80, false],
          ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "udp", 53, false],
          ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "sctp", 9003, false],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 80, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "udp", 53, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "sctp", 9003, true],
        ],
      ],
      [
        relabelled,
        [
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 80, false],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "udp", 53, false],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "sctp", 9003, false],
        ],
      ],
      [
        s0,
        [
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 80, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "udp", 53, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "sctp", 9003, true],
        ],
      ],
    ),
    subtest("Should support an 'allow-egress' rule policy for egress-cidr-peer", [
      s1,
      [
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "udp", 53, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "sctp", 9003, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "udp", 53, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "sctp", 9003, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "udp", 53, false],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "sctp", 9003, false],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "udp", 53, false],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "sctp", 9003, false],
      ],
    ]),
  ];
});
/** conformance/tests/baseline-admin-network-policy-standard-egress-inline-cidr-rules.go, over conformance/base/baseline_tier/standard-egress-inline-cidr-rules.yaml */
conformanceTest("CNPBaselineTierEgressInlineCIDRPeers", () => {
  const s0 = baselineTier_standardEgressInlineCidrRules();
  // Slytherin's namespace relabelled, then labelled back (the API server keeps kubernetes.io/metadata.name).
  const relabelled = conformanceCluster(s0, { slytherin: { "conformance-house": "denied-namespace-label" } });
  // A rule put first, accepting two pods' addresses as host prefixes: upstream writes the
  // cluster's family's (PodIP/32 or /128); both families' here, as the probes run in both.
  const s1 = patch(s0, "default", (spec) => ({
    ...spec,
    egress: [
      {
        name: "allow-egress-to-specific-podIPs",
        action: "Accept",
        to: [{ networks: ["ravenclaw:luna-lovegood-0", "hufflepuff:cedric-diggory-0"].flatMap(hostPrefixes) }],
      },
      ...(spec.egress as unknown[]),
    ],
  }));
  return [
    subtest(
      "Should support a 'deny-egress' rule policy for egress-cidr-peer",
      [
        s0,
        [
          ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "tcp", 80, false],
          ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "udp", 53, false],
          ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "sctp", 9003, false],
          ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "tcp", 80, false],
          ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "udp", 53, false],
          ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "sctp", 9003, false],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 80, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "udp", 53, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "sctp", 9003, true],
        ],
      ],
      [
        relabelled,
        [
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 80, false],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "udp", 53, false],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "sctp", 9003, false],
        ],
      ],
      [
        s0,
        [
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "tcp", 80, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "udp", 53, true],
          ["gryffindor:harry-potter-1", "slytherin:draco-malfoy-0", "sctp", 9003, true],
        ],
      ],
    ),
    subtest("Should support an 'allow-egress' rule policy for egress-cidr-peer", [
      s1,
      [
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "udp", 53, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-0", "sctp", 9003, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "udp", 53, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-0", "sctp", 9003, true],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "udp", 53, false],
        ["gryffindor:harry-potter-1", "ravenclaw:luna-lovegood-1", "sctp", 9003, false],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "tcp", 80, false],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "udp", 53, false],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "sctp", 9003, false],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-experimental-egress-rules.go, over conformance/base/admin_tier/experimental-egress-selector-rules.yaml */
conformanceTest("CNPAdminTierEgressNodePeers", () => {
  const s0 = adminTier_experimentalEgressSelectorRules();
  return [
    subtest("Should support an 'allow-egress' rule policy for egress-node-peer", [
      s0,
      [["gryffindor:harry-potter-1", "forbidden-forrest:centaur-1", "tcp", HNP[0], true]],
    ]),
    subtest("Should support a 'pass-egress' rule policy for egress-node-peer", [
      s0,
      [["gryffindor:harry-potter-1", "forbidden-forrest:centaur-1", "udp", HNP[2], true]],
    ]),
    subtest("Should support a 'deny-egress' rule policy for egress-node-peer", [
      s0,
      [
        ["gryffindor:harry-potter-1", "forbidden-forrest:centaur-1", "tcp", HNP[1], false],
        ["gryffindor:harry-potter-1", "forbidden-forrest:centaur-1", "udp", HNP[4], false],
        ["gryffindor:harry-potter-1", "forbidden-forrest:centaur-1", "sctp", HNP[6], false],
      ],
    ]),
  ];
});
/** conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go, over conformance/base/baseline_tier/experimental-egress-selector-rules.yaml */
conformanceTest("CNPBaselineTierEgressNodePeers", () => {
  const s0 = baselineTier_experimentalEgressSelectorRules();
  return [
    subtest("Should support an 'allow-egress' rule policy for egress-node-peer", [
      s0,
      [
        ["gryffindor:harry-potter-0", "forbidden-forrest:centaur-1", "tcp", HNP[0], true],
        ["gryffindor:harry-potter-1", "forbidden-forrest:centaur-1", "tcp", HNP[1], true],
      ],
    ]),
    subtest("Should support a 'deny-egress' rule policy for egress-node-peer", [
      s0,
      [
        ["gryffindor:harry-potter-1", "forbidden-forrest:centaur-1", "udp", HNP[4], false],
        ["gryffindor:harry-potter-1", "forbidden-forrest:centaur-1", "sctp", HNP[6], false],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-experimental-egress-rules.go, over conformance/base/admin_tier/standard-egress-tcp-rules.yaml */
conformanceTest("CNPAdminTierEgressNamedPort", () => {
  const s0 = adminTier_standardEgressTcpRules();
  // Rule 5 rewritten: the TCP 8080 rule to hufflepuff as `web` (80/TCP on the pods).
  const s1 = editRule(s0, "egress-tcp", "egress", 5, (rule) => ({
    ...rule,
    protocols: [{ destinationNamedPort: "web" }],
  }));
  return [
    subtest("Should support an 'allow-egress' policy for named port", [
      s1,
      [
        ["gryffindor:harry-potter-0", "hufflepuff:cedric-diggory-1", "tcp", 80, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "tcp", 8080, false],
      ],
    ]),
  ];
});
/** conformance/tests/admin-network-policy-experimental-ingress-rules.go, over conformance/base/admin_tier/standard-ingress-udp-rules.yaml */
conformanceTest("CNPAdminTierIngressNamedPort", () => {
  const s0 = adminTier_standardIngressUdpRules();
  // Rule 5 rewritten: the UDP 5353 rule from gryffindor as `dns` (53/UDP on the pods).
  const s1 = editRule(s0, "ingress-udp", "ingress", 5, (rule) => ({
    ...rule,
    protocols: [{ destinationNamedPort: "dns" }],
  }));
  return [
    subtest("Should support an 'allow-ingress' policy for named port", [
      s1,
      [
        ["gryffindor:harry-potter-0", "hufflepuff:cedric-diggory-1", "udp", 53, true],
        ["gryffindor:harry-potter-1", "hufflepuff:cedric-diggory-1", "udp", 5353, false],
      ],
    ]),
  ];
});
/** conformance/tests/baseline-admin-network-policy-experimental-egress-rules.go, over conformance/base/baseline_tier/standard-egress-udp-rules.yaml */
conformanceTest("CNPBaselineTierEgressNamedPort", () => {
  const s0 = baselineTier_standardEgressUdpRules();
  // Rule 3 rewritten: the UDP 53 rule to gryffindor as `dns` (53/UDP on the pods).
  const s1 = editRule(s0, "default", "egress", 3, (rule) => ({
    ...rule,
    protocols: [{ destinationNamedPort: "dns" }],
  }));
  return [
    subtest("Should support an 'allow-egress' policy for named port", [
      s1,
      [
        ["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-1", "udp", 53, true],
        ["hufflepuff:cedric-diggory-1", "gryffindor:harry-potter-1", "udp", 5353, false],
      ],
    ]),
  ];
});
/** conformance/tests/baseline-admin-network-policy-experimental-ingress-rules.go, over conformance/base/baseline_tier/standard-ingress-tcp-rules.yaml */
conformanceTest("CNPBaselineTierIngressNamedPort", () => {
  const s0 = baselineTier_standardIngressTcpRules();
  // Rule 3 rewritten: the TCP 80 rule from hufflepuff as `web` (80/TCP on the pods).
  const s1 = editRule(s0, "default", "ingress", 3, (rule) => ({
    ...rule,
    protocols: [{ destinationNamedPort: "web" }],
  }));
  return [
    subtest("Should support an 'allow-ingress' policy for named port", [
      s1,
      [
        ["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-1", "tcp", 80, true],
        ["hufflepuff:cedric-diggory-1", "gryffindor:harry-potter-1", "tcp", 8080, false],
      ],
    ]),
  ];
});
