/**
 * network-policy-api's conformance scenarios for ClusterNetworkPolicy
 * (conformance/tests/*.go with their conformance/base/**.yaml), as model-level truth
 * tables: each probe upstream makes, with the verdict it expects, asked of the oracle
 * (test/support/cluster-policy-model.ts) and of the compiled tiers as the datapath judges
 * them. Scenarios keep upstream's names. Ported so far: CNPAdminTierIngressTCP.
 */
import { describe, expect, it } from "vitest";
import { allowedWithTiers } from "../support/cluster-policy-model";
import { clusterPolicy, compileCluster, compiledAllows, namespace, pod } from "../support/policy-cluster";
import type { Cluster, Probe, RawClusterPolicy } from "../support/policy-model";

const NS = (house: string) => `network-policy-conformance-${house}`;
const HOUSES: Record<string, string> = {
  gryffindor: "harry-potter",
  slytherin: "draco-malfoy",
  hufflepuff: "cedric-diggory",
  ravenclaw: "luna-lovegood",
};

/** conformance/base/manifests.yaml, as far as the probes read it: two replicas per house. */
function cluster(clusterPolicies: RawClusterPolicy[]): Cluster {
  const houses = Object.entries(HOUSES);
  return {
    namespaces: houses.map(([house]) => namespace(NS(house), { "conformance-house": house })),
    pods: houses.flatMap(([house, name], h) =>
      [0, 1].map((i) =>
        pod(`${NS(house)}/${name}-${i}`, {
          labels: { "conformance-house": house },
          ips: [`10.1.${h}.${i + 1}`],
          node: i === 0 ? "n1" : "n2",
          ports: [
            { name: "web", port: 80 },
            { name: "dns", port: 53, protocol: "UDP" },
          ],
        }),
      ),
    ),
    policies: [],
    clusterPolicies,
  };
}

const namespacesPeer = (house: string) => [
  { namespaces: { matchLabels: { "kubernetes.io/metadata.name": NS(house) } } },
];
const tcp80 = [{ tcp: { destinationPort: { number: 80 } } }];

/** conformance/base/admin_tier/standard-ingress-tcp-rules.yaml */
function ingressTcp(): RawClusterPolicy {
  return clusterPolicy("ingress-tcp", {
    tier: "Admin",
    priority: 3,
    subject: { namespaces: { matchLabels: { "kubernetes.io/metadata.name": NS("gryffindor") } } },
    ingress: [
      { name: "allow-from-ravenclaw-everything", action: "Accept", from: namespacesPeer("ravenclaw") },
      { name: "deny-from-ravenclaw-everything", action: "Deny", from: namespacesPeer("ravenclaw") },
      { name: "pass-from-ravenclaw-everything", action: "Pass", from: namespacesPeer("ravenclaw") },
      { name: "deny-from-slytherin-at-port-80", action: "Deny", from: namespacesPeer("slytherin"), protocols: tcp80 },
      { name: "pass-from-slytherin-at-port-80", action: "Pass", from: namespacesPeer("slytherin"), protocols: tcp80 },
      {
        name: "allow-from-hufflepuff-at-port-80",
        action: "Accept",
        from: namespacesPeer("hufflepuff"),
        protocols: tcp80,
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: namespacesPeer("hufflepuff") },
    ],
  });
}

function swap(policy: RawClusterPolicy, direction: "ingress" | "egress", a: number, b: number): RawClusterPolicy {
  const rules = [...(policy.spec[direction] as unknown[])];
  [rules[a], rules[b]] = [rules[b], rules[a]];
  return { ...policy, spec: { ...policy.spec, [direction]: rules } };
}

/** A probe as upstream's PokeServer makes it: client pod, server pod, protocol, port, expected. */
type Poke = [client: string, server: string, protocol: "tcp" | "udp" | "sctp", port: number, allowed: boolean];

function expectPokes(c: Cluster, pokes: Poke[]): void {
  const compiled = compileCluster(c);
  const podKey = (ref: string) => {
    const [house = "", rest = ""] = ref.split(":");
    return `${NS(house)}/${rest}`;
  };
  for (const [client, server, protocol, port, allowed] of pokes) {
    const probe: Probe = {
      from: { pod: podKey(client) },
      to: { pod: podKey(server) },
      protocol: protocol.toUpperCase() as Probe["protocol"],
      port,
    };
    const what = `${client} -> ${server} ${protocol}/${port}`;
    expect(allowedWithTiers(c, probe), `oracle: ${what}`).toBe(allowed);
    expect(compiledAllows(c, compiled, probe), `compiled: ${what}`).toBe(allowed);
  }
}

describe("CNPAdminTierIngressTCP", () => {
  const base = ingressTcp();

  it("Should support an 'allow-ingress' policy for TCP protocol; ensure rule ordering is respected", () => {
    expectPokes(cluster([base]), [
      ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-0", "tcp", 80, true],
      ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
    ]);
  });

  it("Should support an 'allow-ingress' policy for TCP protocol at the specified port", () => {
    expectPokes(cluster([base]), [
      ["hufflepuff:cedric-diggory-0", "gryffindor:harry-potter-1", "tcp", 80, true],
      ["hufflepuff:cedric-diggory-1", "gryffindor:harry-potter-1", "tcp", 8080, false],
    ]);
  });

  // Upstream's subtests patch the policy in turn; each starts from the patches before it.
  const denyFirst = swap(base, "ingress", 0, 1);

  it("Should support an 'deny-ingress' policy for TCP protocol; ensure rule ordering is respected", () => {
    expectPokes(cluster([denyFirst]), [
      ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-1", "tcp", 80, false],
      ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-1", "tcp", 8080, false],
    ]);
  });

  it("Should support a 'deny-ingress' policy for TCP protocol at the specified port", () => {
    expectPokes(cluster([denyFirst]), [
      ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, false],
      ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
    ]);
  });

  const passFirst = swap(denyFirst, "ingress", 0, 2);

  it("Should support an 'pass-ingress' policy for TCP protocol; ensure rule ordering is respected", () => {
    expectPokes(cluster([passFirst]), [
      ["ravenclaw:luna-lovegood-0", "gryffindor:harry-potter-0", "tcp", 80, true],
      ["ravenclaw:luna-lovegood-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
    ]);
  });

  it("Should support a 'pass-ingress' policy for TCP protocol at the specified port", () => {
    expectPokes(cluster([swap(passFirst, "ingress", 3, 4)]), [
      ["slytherin:draco-malfoy-0", "gryffindor:harry-potter-0", "tcp", 80, true],
      ["slytherin:draco-malfoy-1", "gryffindor:harry-potter-0", "tcp", 8080, true],
    ]);
  });
});
