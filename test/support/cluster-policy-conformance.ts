/**
 * network-policy-api's ClusterNetworkPolicy conformance profile at the model level: its
 * base cluster (conformance/base/manifests.yaml), its scenarios' manifests
 * (conformance/base/{admin_tier,baseline_tier,api_integration}/*.yaml, written here as
 * the API serves them) and a way to ask each of upstream's probes of both the oracle
 * (cluster-policy-model.ts) and the compiled tiers as the datapath judges them
 * (policy-cluster.ts). The scenarios themselves, with upstream's names, subtests and
 * expected verdicts, are in test/unit/cluster-policy-conformance*.test.ts.
 *
 * Upstream (kubernetes-sigs/network-policy-api, main) writes these scenarios for
 * ClusterNetworkPolicy v1alpha2 directly, so nothing is translated from
 * AdminNetworkPolicy here: tiers, priorities, actions and peers are upstream's.
 *
 * Where this implementation's documented choices meet upstream's probes:
 * - a pod's own node always reaches it (policy-model.ts): no upstream probe comes from a
 *   node, so no verdict depends on it;
 * - hostNetwork pods are their node: the centaurs are reached as node peers, as upstream
 *   means them to be, including from a client on the same node;
 * - a pod reaches itself by its own address: upstream's API overview says the same for
 *   the Pod IP (main, 2089511). Hairpin through a Service IP, which upstream says CNP
 *   does govern (the open CNPAdminTierHairpin scenario), needs Services, which this
 *   model has not: it is the datapath's to show, not ported here.
 */
import { describe, expect, it } from "vitest";
import type { CompiledPolicy } from "../../src/agent/policy/model/compile";
import { allowedWithTiers } from "./cluster-policy-model";
import { clusterPolicy, compileCluster, compiledAllows, type DirectionJudge, namespace, pod } from "./policy-cluster";
import type { Cluster, Probe, RawClusterPolicy, RawPolicy } from "./policy-model";

export { clusterPolicy };

/** A scenario's objects: its ClusterNetworkPolicies and (api_integration) NetworkPolicies. */
export type Manifest = RawClusterPolicy | RawPolicy;

const PREFIX = "network-policy-conformance-";
export const NS = (house: string) => `${PREFIX}${house}`;

/** The four houses' StatefulSets (two replicas each) and the hostNetwork one. */
const STATEFULSETS: [house: string, name: string][] = [
  ["gryffindor", "harry-potter"],
  ["slytherin", "draco-malfoy"],
  ["hufflepuff", "cedric-diggory"],
  ["ravenclaw", "luna-lovegood"],
];
const HOST_NETWORK: [house: string, name: string] = ["forbidden-forrest", "centaur"];
/**
 * The sixth namespace and StatefulSet that upstream's open port-range pull request
 * (f2d6941, "Add conformance tests for PortRange and NamespaceSelector omission") adds
 * to the base: its pods declare web 80, web-8080 8080 (TCP), dns 53, dns-sd 5353 (UDP).
 * Only that pull request's scenarios have it (conformanceCluster's `durmstrang`).
 */
const DURMSTRANG: [house: string, name: string] = ["durmstrang", "viktor-krum"];

/**
 * The suite's host-network ports (suite.go's default range: 34345 and the seven after);
 * the centaurs serve TCP on the first two, UDP on [2] and [4], SCTP on [6] and [7].
 */
export const HNP = [34345, 34346, 34347, 34348, 34349, 34350, 34351, 34352] as const;

/**
 * Two nodes, labelled as kubelet labels them (the node peers select kubernetes.io/os).
 * Each StatefulSet's replica i runs on node i: upstream leaves placement to the
 * scheduler, and this puts a client on the same node as centaur-1 (harry-potter-1,
 * the node peers' client), the harder case for an implementation.
 */
const NODES = [0, 1].map((i) => ({
  name: `node-${i}`,
  ips: [`172.18.0.${i + 2}`, `fc00:f853:ccd:e793::${i + 2}`],
  labels: { "kubernetes.io/os": "linux", "kubernetes.io/hostname": `node-${i}`, "kubernetes.io/arch": "amd64" },
}));

/**
 * conformance/base/manifests.yaml: the five namespaces labelled `conformance-house`
 * (the API server adds kubernetes.io/metadata.name), each house's two pods with the
 * labels their StatefulSet gives them, dual-stack so that every probe runs in both
 * families as upstream's suite does on either kind of cluster. Their declared container
 * ports are upstream's: `web` 80/TCP and `dns` 53/UDP; they also serve 8080/TCP,
 * 5353/UDP, 9003/SCTP and 9005/SCTP without declaring them (only named ports read the
 * declarations). The centaurs are hostNetwork: their addresses are their nodes', and
 * they declare web-HNP[0], web-HNP[1] (TCP), dns-HNP[2], dns-HNP[4] (UDP).
 */
export function conformanceCluster(
  manifests: Manifest[],
  relabel: Record<string, Record<string, string>> = {},
  durmstrang = false,
): Cluster {
  const houses = [...STATEFULSETS.map(([house]) => house), HOST_NETWORK[0], ...(durmstrang ? [DURMSTRANG[0]] : [])];
  const statefulPod = (house: string, name: string, i: number, facts: Parameters<typeof pod>[1]) =>
    pod(`${NS(house)}/${name}-${i}`, {
      ...facts,
      labels: {
        "conformance-house": house,
        "statefulset.kubernetes.io/pod-name": `${name}-${i}`,
        "apps.kubernetes.io/pod-index": String(i),
      },
      node: NODES[i]?.name,
    });
  return {
    namespaces: houses.map((house) => namespace(NS(house), relabel[house] ?? { "conformance-house": house })),
    pods: [
      ...STATEFULSETS.flatMap(([house, name], h) =>
        [0, 1].map((i) =>
          statefulPod(house, name, i, {
            ips: [`10.244.${h}.${i + 10}`, `fd00:10:244:${h}::${i + 10}`],
            ports: [
              { name: "web", port: 80 },
              { name: "dns", port: 53, protocol: "UDP" },
            ],
          }),
        ),
      ),
      ...[0, 1].map((i) =>
        statefulPod(HOST_NETWORK[0], HOST_NETWORK[1], i, {
          hostNetwork: true,
          ips: NODES[i]?.ips ?? [],
          ports: [
            { name: `web-${HNP[0]}`, port: HNP[0] },
            { name: `web-${HNP[1]}`, port: HNP[1] },
            { name: `dns-${HNP[2]}`, port: HNP[2], protocol: "UDP" },
            { name: `dns-${HNP[4]}`, port: HNP[4], protocol: "UDP" },
          ],
        }),
      ),
      ...(durmstrang
        ? [0, 1].map((i) =>
            statefulPod(DURMSTRANG[0], DURMSTRANG[1], i, {
              ips: [`10.244.9.${i + 10}`, `fd00:10:244:9::${i + 10}`],
              ports: [
                { name: "web", port: 80 },
                { name: "web-8080", port: 8080 },
                { name: "dns", port: 53, protocol: "UDP" },
                { name: "dns-sd", port: 5353, protocol: "UDP" },
              ],
            }),
          )
        : []),
    ],
    nodes: NODES,
    policies: manifests.filter((m): m is RawPolicy => "namespace" in m.metadata),
    clusterPolicies: manifests.filter((m): m is RawClusterPolicy => !("namespace" in m.metadata)),
  };
}

// ---- the manifests' selectors --------------------------------------------------------

/** namespaces by their kubernetes.io/metadata.name label. */
export const named = (house: string) => ({ matchLabels: { "kubernetes.io/metadata.name": NS(house) } });
/** namespaces (or pods) by their conformance-house label. */
export const house = (name: string) => ({ matchLabels: { "conformance-house": name } });
/** A `pods` peer or subject: the house's pods in the house's namespaces. */
export const housePods = (name: string) => ({ namespaceSelector: house(name), podSelector: house(name) });

/** A NetworkPolicy "namespace/name". */
export const policy = (key: string, spec: Record<string, unknown>): RawPolicy => {
  const [ns = "", name = ""] = key.split("/");
  return { metadata: { namespace: ns, name }, spec };
};

// ---- upstream's patches ----------------------------------------------------------------

type Spec = Record<string, unknown>;
type Rule = Record<string, unknown>;

/** The manifests with one ClusterNetworkPolicy's spec changed (a copy: states are shared). */
export function patch(manifests: Manifest[], name: string, change: (spec: Spec) => Spec): Manifest[] {
  let found = false;
  const out = manifests.map((m) => {
    if ("namespace" in m.metadata || m.metadata.name !== name) return m;
    found = true;
    return { ...m, spec: change(structuredClone(m.spec)) };
  });
  if (!found) throw new Error(`no ClusterNetworkPolicy ${name}`);
  return out;
}

const rulesOf = (spec: Spec, direction: "ingress" | "egress") => spec[direction] as Rule[];

/** Two rules of a direction exchanged, as upstream's subtests reorder them. */
export const swapRules = (m: Manifest[], name: string, direction: "ingress" | "egress", a: number, b: number) =>
  patch(m, name, (spec) => {
    const rules = rulesOf(spec, direction);
    [rules[a], rules[b]] = [rules[b] as Rule, rules[a] as Rule];
    return spec;
  });

/** One rule of a direction changed. */
export const editRule = (
  m: Manifest[],
  name: string,
  direction: "ingress" | "egress",
  index: number,
  change: (rule: Rule) => Rule,
) =>
  patch(m, name, (spec) => {
    const rules = rulesOf(spec, direction);
    rules[index] = change(rules[index] as Rule);
    return spec;
  });

/** A NetworkPolicy "namespace/name" deleted. */
export function withoutPolicy(manifests: Manifest[], key: string): Manifest[] {
  const out = manifests.filter(
    (m) => !("namespace" in m.metadata) || `${m.metadata.namespace}/${m.metadata.name}` !== key,
  );
  if (out.length === manifests.length) throw new Error(`no NetworkPolicy ${key}`);
  return out;
}

// ---- probes ------------------------------------------------------------------------------

/**
 * A probe as upstream's PokeServer makes it: client "house:pod", server "house:pod",
 * protocol, port, whether it must connect.
 */
export type Poke = [client: string, server: string, protocol: "tcp" | "udp" | "sctp", port: number, allowed: boolean];

/** A cluster state (the manifests in the base cluster, or a cluster patched further) and its probes. */
export type Check = [world: Manifest[] | Cluster, pokes: Poke[]];

export interface Subtest {
  name: string;
  checks: Check[];
}

export interface Scenario {
  name: string;
  subtests: Subtest[];
}

export const subtest = (name: string, ...checks: Check[]): Subtest => ({ name, checks });

const podKey = (ref: string) => {
  const [h = "", name = ""] = ref.split(":");
  return `${NS(h)}/${name}`;
};

const clusterOf = (world: Manifest[] | Cluster): Cluster => (Array.isArray(world) ? conformanceCluster(world) : world);

export interface Mismatch {
  what: string;
  by: "oracle" | "compiled";
  expected: boolean;
}

/**
 * Each poke, in both families, against the oracle and the compiled tiers (judged by
 * `judge`, the datapath's unless a mutant is given): the ones whose verdict is not
 * upstream's.
 */
export function mismatches(world: Manifest[] | Cluster, pokes: Poke[], judge?: DirectionJudge): Mismatch[] {
  const cluster = clusterOf(world);
  const compiled: Map<string, CompiledPolicy> = compileCluster(cluster);
  const out: Mismatch[] = [];
  for (const [client, server, protocol, port, expected] of pokes) {
    for (const family of [4, 6] as const) {
      const probe: Probe = {
        from: { pod: podKey(client) },
        to: { pod: podKey(server) },
        protocol: protocol.toUpperCase() as Probe["protocol"],
        port,
        family,
      };
      const what = `${client} -> ${server} ${protocol}/${port} (IPv${family})`;
      if (judge === undefined && allowedWithTiers(cluster, probe) !== expected) {
        out.push({ what, by: "oracle", expected });
      }
      if (compiledAllows(cluster, compiled, probe, judge) !== expected) out.push({ what, by: "compiled", expected });
    }
  }
  return out;
}

/** Upstream's test as a describe, each subtest an it; the scenario's data for the mutation check. */
export function conformanceTest(name: string, build: () => Subtest[]): Scenario {
  const subtests = build();
  describe(name, () => {
    for (const s of subtests) {
      it(s.name, () => {
        const found = s.checks.flatMap(([world, pokes]) => mismatches(world, pokes));
        expect(found).toEqual([]);
      });
    }
  });
  return { name, subtests };
}

// ---- the scenarios' manifests, as upstream writes them ------------------------------------

/** conformance/base/admin_tier/experimental-egress-selector-rules.yaml */
export const adminTier_experimentalEgressSelectorRules = (): Manifest[] => [
  clusterPolicy("node-and-cidr-as-peers-example", {
    tier: "Admin",
    priority: 75,
    subject: { pods: housePods("gryffindor") },
    egress: [
      {
        name: `allow-egress-to-${HNP[0]}-on-nodes`,
        action: "Accept",
        to: [{ nodes: { matchLabels: { "kubernetes.io/os": "linux" } } }],
        protocols: [{ tcp: { destinationPort: { number: HNP[0] } } }],
      },
      {
        name: `pass-egress-to-${HNP[2]}-on-nodes`,
        action: "Pass",
        to: [{ nodes: { matchLabels: { "kubernetes.io/os": "linux" } } }],
        protocols: [{ udp: { destinationPort: { number: HNP[2] } } }],
      },
      {
        name: "deny-egress-to-slytherin-and-nodes-and-internet",
        action: "Deny",
        to: [
          { pods: housePods("slytherin") },
          { nodes: { matchLabels: { "kubernetes.io/os": "linux" } } },
          { networks: ["0.0.0.0/0", "::/0"] },
        ],
      },
    ],
  }),
];

/** conformance/base/admin_tier/standard-egress-inline-cidr-rules.yaml */
export const adminTier_standardEgressInlineCidrRules = (): Manifest[] => [
  clusterPolicy("inline-cidr-as-peers-example", {
    tier: "Admin",
    priority: 85,
    subject: { pods: housePods("gryffindor") },
    egress: [
      { name: "allow-egress-to-slytherin", action: "Accept", to: [{ pods: housePods("slytherin") }] },
      { name: "deny-egress-to-internet", action: "Deny", to: [{ networks: ["0.0.0.0/0", "::/0"] }] },
    ],
  }),
];

/** conformance/base/admin_tier/standard-egress-sctp-rules.yaml */
export const adminTier_standardEgressSctpRules = (): Manifest[] => [
  clusterPolicy("egress-sctp", {
    tier: "Admin",
    priority: 8,
    subject: { namespaces: named("ravenclaw") },
    egress: [
      { name: "allow-to-gryffindor-everything", action: "Accept", to: [{ namespaces: named("gryffindor") }] },
      { name: "deny-to-gryffindor-everything", action: "Deny", to: [{ namespaces: named("gryffindor") }] },
      { name: "pass-to-gryffindor-everything", action: "Pass", to: [{ namespaces: named("gryffindor") }] },
      {
        name: "deny-to-slytherin-at-port-9003",
        action: "Deny",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      {
        name: "pass-to-slytherin-at-port-9003",
        action: "Pass",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      {
        name: "allow-to-hufflepuff-at-port-9003",
        action: "Accept",
        to: [{ namespaces: named("hufflepuff") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      { name: "deny-to-hufflepuff-everything-else", action: "Deny", to: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/admin_tier/standard-egress-tcp-rules.yaml */
export const adminTier_standardEgressTcpRules = (): Manifest[] => [
  clusterPolicy("egress-tcp", {
    tier: "Admin",
    priority: 6,
    subject: { namespaces: named("gryffindor") },
    egress: [
      { name: "allow-to-ravenclaw-everything", action: "Accept", to: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-to-ravenclaw-everything", action: "Deny", to: [{ namespaces: named("ravenclaw") }] },
      { name: "pass-to-ravenclaw-everything", action: "Pass", to: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-to-slytherin-at-port-80",
        action: "Deny",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ tcp: { destinationPort: { number: 80 } } }],
      },
      {
        name: "pass-to-slytherin-at-port-80",
        action: "Pass",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ tcp: { destinationPort: { number: 80 } } }],
      },
      {
        name: "allow-to-hufflepuff-at-port-8080",
        action: "Accept",
        to: [{ namespaces: named("hufflepuff") }],
        protocols: [{ tcp: { destinationPort: { number: 8080 } } }],
      },
      { name: "deny-to-hufflepuff-everything-else", action: "Deny", to: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/admin_tier/standard-egress-udp-rules.yaml */
export const adminTier_standardEgressUdpRules = (): Manifest[] => [
  clusterPolicy("egress-udp", {
    tier: "Admin",
    priority: 7,
    subject: { namespaces: named("hufflepuff") },
    egress: [
      { name: "allow-to-ravenclaw-everything", action: "Accept", to: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-to-ravenclaw-everything", action: "Deny", to: [{ namespaces: named("ravenclaw") }] },
      { name: "pass-to-ravenclaw-everything", action: "Pass", to: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-to-slytherin-at-port-5353",
        action: "Deny",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ udp: { destinationPort: { number: 5353 } } }],
      },
      {
        name: "pass-to-slytherin-at-port-5353",
        action: "Pass",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ udp: { destinationPort: { number: 5353 } } }],
      },
      {
        name: "allow-to-gryffindor-at-port-53",
        action: "Accept",
        to: [{ namespaces: named("gryffindor") }],
        protocols: [{ udp: { destinationPort: { number: 53 } } }],
      },
      { name: "deny-to-gryffindor-everything-else", action: "Deny", to: [{ namespaces: named("gryffindor") }] },
    ],
  }),
];

/** conformance/base/admin_tier/standard-gress-rules-combined.yaml */
export const adminTier_standardGressRulesCombined = (): Manifest[] => [
  clusterPolicy("gress-rules", {
    tier: "Admin",
    priority: 15,
    subject: { namespaces: named("gryffindor") },
    egress: [
      { name: "allow-to-ravenclaw-everything", action: "Accept", to: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-to-ravenclaw-everything", action: "Deny", to: [{ namespaces: named("ravenclaw") }] },
      { name: "pass-to-ravenclaw-everything", action: "Pass", to: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-to-slytherin-at-ports-80-53-9003",
        action: "Deny",
        to: [{ namespaces: named("slytherin") }],
        protocols: [
          { tcp: { destinationPort: { number: 80 } } },
          { udp: { destinationPort: { number: 53 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      {
        name: "pass-to-slytherin-at-port-80-53-9003",
        action: "Pass",
        to: [{ namespaces: named("slytherin") }],
        protocols: [
          { tcp: { destinationPort: { number: 80 } } },
          { udp: { destinationPort: { number: 53 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      {
        name: "allow-to-hufflepuff-at-ports-8080-5353-9003",
        action: "Accept",
        to: [{ namespaces: named("hufflepuff") }],
        protocols: [
          { tcp: { destinationPort: { number: 8080 } } },
          { udp: { destinationPort: { number: 5353 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      { name: "deny-to-hufflepuff-everything-else", action: "Deny", to: [{ namespaces: named("hufflepuff") }] },
    ],
    ingress: [
      { name: "allow-from-ravenclaw-everything", action: "Accept", from: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-from-ravenclaw-everything", action: "Deny", from: [{ namespaces: named("ravenclaw") }] },
      { name: "pass-from-ravenclaw-everything", action: "Pass", from: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-from-slytherin-at-port-80-53-9003",
        action: "Deny",
        from: [{ namespaces: named("slytherin") }],
        protocols: [
          { tcp: { destinationPort: { number: 80 } } },
          { udp: { destinationPort: { number: 53 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      {
        name: "pass-from-slytherin-at-port-80-53-9003",
        action: "Pass",
        from: [{ namespaces: named("slytherin") }],
        protocols: [
          { tcp: { destinationPort: { number: 80 } } },
          { udp: { destinationPort: { number: 53 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      {
        name: "allow-from-hufflepuff-at-port-80-5353-9003",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [
          { tcp: { destinationPort: { number: 80 } } },
          { udp: { destinationPort: { number: 5353 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/admin_tier/standard-ingress-sctp-rules.yaml */
export const adminTier_standardIngressSctpRules = (): Manifest[] => [
  clusterPolicy("ingress-sctp", {
    tier: "Admin",
    priority: 5,
    subject: { namespaces: named("ravenclaw") },
    ingress: [
      { name: "allow-from-gryffindor-everything", action: "Accept", from: [{ namespaces: named("gryffindor") }] },
      { name: "deny-from-gryffindor-everything", action: "Deny", from: [{ namespaces: named("gryffindor") }] },
      { name: "pass-from-gryffindor-everything", action: "Pass", from: [{ namespaces: named("gryffindor") }] },
      {
        name: "deny-from-slytherin-at-port-9003",
        action: "Deny",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      {
        name: "pass-from-slytherin-at-port-9003",
        action: "Pass",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      {
        name: "allow-from-hufflepuff-at-port-9003",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/admin_tier/standard-ingress-tcp-rules.yaml */
export const adminTier_standardIngressTcpRules = (): Manifest[] => [
  clusterPolicy("ingress-tcp", {
    tier: "Admin",
    priority: 3,
    subject: { namespaces: named("gryffindor") },
    ingress: [
      { name: "allow-from-ravenclaw-everything", action: "Accept", from: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-from-ravenclaw-everything", action: "Deny", from: [{ namespaces: named("ravenclaw") }] },
      { name: "pass-from-ravenclaw-everything", action: "Pass", from: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-from-slytherin-at-port-80",
        action: "Deny",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ tcp: { destinationPort: { number: 80 } } }],
      },
      {
        name: "pass-from-slytherin-at-port-80",
        action: "Pass",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ tcp: { destinationPort: { number: 80 } } }],
      },
      {
        name: "allow-from-hufflepuff-at-port-80",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [{ tcp: { destinationPort: { number: 80 } } }],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/admin_tier/standard-ingress-udp-rules.yaml */
export const adminTier_standardIngressUdpRules = (): Manifest[] => [
  clusterPolicy("ingress-udp", {
    tier: "Admin",
    priority: 4,
    subject: { namespaces: named("hufflepuff") },
    ingress: [
      { name: "allow-from-ravenclaw-everything", action: "Accept", from: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-from-ravenclaw-everything", action: "Deny", from: [{ namespaces: named("ravenclaw") }] },
      { name: "pass-from-ravenclaw-everything", action: "Pass", from: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-from-slytherin-at-port-5353",
        action: "Deny",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ udp: { destinationPort: { number: 5353 } } }],
      },
      {
        name: "pass-from-slytherin-at-port-5353",
        action: "Pass",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ udp: { destinationPort: { number: 5353 } } }],
      },
      {
        name: "allow-from-gryffindor-at-port-53",
        action: "Accept",
        from: [{ namespaces: named("gryffindor") }],
        protocols: [{ udp: { destinationPort: { number: 53 } } }],
      },
      { name: "deny-from-gryffindor-everything-else", action: "Deny", from: [{ namespaces: named("gryffindor") }] },
    ],
  }),
];

/** conformance/base/admin_tier/standard-priority-field.yaml */
export const adminTier_standardPriorityField = (): Manifest[] => [
  clusterPolicy("priority-50-example", {
    tier: "Admin",
    priority: 50,
    subject: { pods: housePods("gryffindor") },
    ingress: [{ name: "deny-all-ingress-from-slytherin", action: "Deny", from: [{ pods: housePods("slytherin") }] }],
    egress: [{ name: "deny-all-egress-to-slytherin", action: "Deny", to: [{ pods: housePods("slytherin") }] }],
  }),
  clusterPolicy("old-priority-60-new-priority-40-example", {
    tier: "Admin",
    priority: 60,
    subject: { pods: housePods("gryffindor") },
    ingress: [{ name: "pass-all-ingress-from-slytherin", action: "Pass", from: [{ pods: housePods("slytherin") }] }],
    egress: [{ name: "pass-all-egress-to-slytherin", action: "Pass", to: [{ pods: housePods("slytherin") }] }],
  }),
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { pods: housePods("gryffindor") },
    ingress: [{ name: "allow-all-ingress-from-slytherin", action: "Accept", from: [{ pods: housePods("slytherin") }] }],
    egress: [{ name: "allow-all-egress-to-slytherin", action: "Accept", to: [{ pods: housePods("slytherin") }] }],
  }),
];

/** conformance/base/api_integration/standard-anp-np-banp.yaml */
export const apiIntegration_standardAnpNpBanp = (): Manifest[] => [
  clusterPolicy("pass-example", {
    tier: "Admin",
    priority: 10,
    subject: { namespaces: house("gryffindor") },
    ingress: [{ name: "deny-all-ingress-from-slytherin", action: "Deny", from: [{ namespaces: house("slytherin") }] }],
    egress: [{ name: "deny-all-egress-to-slytherin", action: "Deny", to: [{ namespaces: house("slytherin") }] }],
  }),
  policy("network-policy-conformance-gryffindor/allow-gress-from-to-slytherin-to-gryffindor", {
    podSelector: {},
    policyTypes: ["Ingress", "Egress"],
    ingress: [{ from: [{ namespaceSelector: house("slytherin") }] }],
    egress: [{ to: [{ namespaceSelector: house("slytherin") }] }],
  }),
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: house("gryffindor") },
    ingress: [{ name: "deny-all-ingress-from-slytherin", action: "Deny", from: [{ namespaces: house("slytherin") }] }],
    egress: [{ name: "deny-all-egress-to-slytherin", action: "Deny", to: [{ namespaces: house("slytherin") }] }],
  }),
];

/** conformance/base/baseline_tier/experimental-egress-selector-rules.yaml */
export const baselineTier_experimentalEgressSelectorRules = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("gryffindor") },
    egress: [
      {
        name: `allow-egress-to-${HNP[0]}-on-nodes`,
        action: "Accept",
        to: [{ nodes: { matchLabels: { "kubernetes.io/os": "linux" } } }],
        protocols: [{ tcp: { destinationPort: { range: { start: HNP[0], end: HNP[1] } } } }],
      },
      {
        name: "deny-egress-to-nodes-and-internet",
        action: "Deny",
        to: [{ nodes: { matchLabels: { "kubernetes.io/os": "linux" } } }, { networks: ["0.0.0.0/0", "::/0"] }],
      },
    ],
  }),
];

/** conformance/base/baseline_tier/standard-egress-inline-cidr-rules.yaml */
export const baselineTier_standardEgressInlineCidrRules = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("gryffindor") },
    egress: [
      { name: "allow-egress-to-slytherin", action: "Accept", to: [{ pods: housePods("slytherin") }] },
      { name: "deny-egress-to-internet", action: "Deny", to: [{ networks: ["0.0.0.0/0", "::/0"] }] },
    ],
  }),
];

/** conformance/base/baseline_tier/standard-egress-sctp-rules.yaml */
export const baselineTier_standardEgressSctpRules = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("ravenclaw") },
    egress: [
      { name: "allow-to-gryffindor-everything", action: "Accept", to: [{ namespaces: named("gryffindor") }] },
      { name: "deny-to-gryffindor-everything", action: "Deny", to: [{ namespaces: named("gryffindor") }] },
      {
        name: "deny-to-slytherin-at-port-9003",
        action: "Deny",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      {
        name: "allow-to-hufflepuff-at-port-9003",
        action: "Accept",
        to: [{ namespaces: named("hufflepuff") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      { name: "deny-to-hufflepuff-everything-else", action: "Deny", to: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/baseline_tier/standard-egress-tcp-rules.yaml */
export const baselineTier_standardEgressTcpRules = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("gryffindor") },
    egress: [
      { name: "allow-to-ravenclaw-everything", action: "Accept", to: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-to-ravenclaw-everything", action: "Deny", to: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-to-slytherin-at-port-80",
        action: "Deny",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ tcp: { destinationPort: { number: 80 } } }],
      },
      {
        name: "allow-to-hufflepuff-at-port-8080",
        action: "Accept",
        to: [{ namespaces: named("hufflepuff") }],
        protocols: [{ tcp: { destinationPort: { number: 8080 } } }],
      },
      { name: "deny-to-hufflepuff-everything-else", action: "Deny", to: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/baseline_tier/standard-egress-udp-rules.yaml */
export const baselineTier_standardEgressUdpRules = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("hufflepuff") },
    egress: [
      { name: "allow-to-ravenclaw-everything", action: "Accept", to: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-to-ravenclaw-everything", action: "Deny", to: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-to-slytherin-at-port-5353",
        action: "Deny",
        to: [{ namespaces: named("slytherin") }],
        protocols: [{ udp: { destinationPort: { number: 5353 } } }],
      },
      {
        name: "allow-to-gryffindor-at-port-53",
        action: "Accept",
        to: [{ namespaces: named("gryffindor") }],
        protocols: [{ udp: { destinationPort: { number: 53 } } }],
      },
      { name: "deny-to-gryffindor-everything-else", action: "Deny", to: [{ namespaces: named("gryffindor") }] },
    ],
  }),
];

/** conformance/base/baseline_tier/standard-gress-rules-combined.yaml */
export const baselineTier_standardGressRulesCombined = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("gryffindor") },
    egress: [
      { name: "allow-to-ravenclaw-everything", action: "Accept", to: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-to-ravenclaw-everything", action: "Deny", to: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-to-slytherin-at-ports-80-53-9003",
        action: "Deny",
        to: [{ namespaces: named("slytherin") }],
        protocols: [
          { tcp: { destinationPort: { number: 80 } } },
          { udp: { destinationPort: { number: 53 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      {
        name: "allow-to-hufflepuff-at-ports-8080-5353",
        action: "Accept",
        to: [{ namespaces: named("hufflepuff") }],
        protocols: [
          { tcp: { destinationPort: { number: 8080 } } },
          { udp: { destinationPort: { number: 5353 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      { name: "deny-to-hufflepuff-everything-else", action: "Deny", to: [{ namespaces: named("hufflepuff") }] },
    ],
    ingress: [
      { name: "allow-from-ravenclaw-everything", action: "Accept", from: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-from-ravenclaw-everything", action: "Deny", from: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-from-slytherin-at-port-80-53-9003",
        action: "Deny",
        from: [{ namespaces: named("slytherin") }],
        protocols: [
          { tcp: { destinationPort: { number: 80 } } },
          { udp: { destinationPort: { number: 53 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      {
        name: "allow-from-hufflepuff-at-port-80-5353-9003",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [
          { tcp: { destinationPort: { number: 80 } } },
          { udp: { destinationPort: { number: 5353 } } },
          { sctp: { destinationPort: { number: 9003 } } },
        ],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/baseline_tier/standard-ingress-sctp-rules.yaml */
export const baselineTier_standardIngressSctpRules = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("ravenclaw") },
    ingress: [
      { name: "allow-from-gryffindor-everything", action: "Accept", from: [{ namespaces: named("gryffindor") }] },
      { name: "deny-from-gryffindor-everything", action: "Deny", from: [{ namespaces: named("gryffindor") }] },
      {
        name: "deny-from-slytherin-at-port-9003",
        action: "Deny",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      {
        name: "allow-from-hufflepuff-at-port-9003",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [{ sctp: { destinationPort: { number: 9003 } } }],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/baseline_tier/standard-ingress-tcp-rules.yaml */
export const baselineTier_standardIngressTcpRules = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("gryffindor") },
    ingress: [
      { name: "allow-from-ravenclaw-everything", action: "Accept", from: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-from-ravenclaw-everything", action: "Deny", from: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-from-slytherin-at-port-80",
        action: "Deny",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ tcp: { destinationPort: { number: 80 } } }],
      },
      {
        name: "allow-from-hufflepuff-at-port-80",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [{ tcp: { destinationPort: { number: 80 } } }],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base/baseline_tier/standard-ingress-udp-rules.yaml */
export const baselineTier_standardIngressUdpRules = (): Manifest[] => [
  clusterPolicy("default", {
    tier: "Baseline",
    priority: 10,
    subject: { namespaces: named("hufflepuff") },
    ingress: [
      { name: "allow-from-ravenclaw-everything", action: "Accept", from: [{ namespaces: named("ravenclaw") }] },
      { name: "deny-from-ravenclaw-everything", action: "Deny", from: [{ namespaces: named("ravenclaw") }] },
      {
        name: "deny-from-slytherin-at-port-5353",
        action: "Deny",
        from: [{ namespaces: named("slytherin") }],
        protocols: [{ udp: { destinationPort: { number: 5353 } } }],
      },
      {
        name: "allow-from-gryffindor-at-port-53",
        action: "Accept",
        from: [{ namespaces: named("gryffindor") }],
        protocols: [{ udp: { destinationPort: { number: 53 } } }],
      },
      { name: "deny-from-gryffindor-everything-else", action: "Deny", from: [{ namespaces: named("gryffindor") }] },
    ],
  }),
];

/** A base pod's addresses ("house:pod"), both families: for the rules upstream writes from a pod's IP. */
export function podAddresses(ref: string): string[] {
  const [h = "", name = ""] = ref.split(":");
  const found = conformanceCluster([]).pods.find((p) => p.metadata?.namespace === NS(h) && p.metadata?.name === name);
  if (!found) throw new Error(`no pod ${ref}`);
  return (found.status?.podIPs ?? []).map((a) => a.ip);
}

// ---- upstream's open pull request f2d6941 (port ranges, namespaceSelector omitted) ----------

/** conformance/base (pull request f2d6941)/admin_tier/standard-egress-sctp-port-range-rules.yaml */
export const adminTier_standardEgressSctpPortRangeRules = (): Manifest[] => [
  clusterPolicy("egress-sctp-port-range", {
    tier: "Admin",
    priority: 8,
    subject: { namespaces: named("durmstrang") },
    egress: [
      {
        name: "allow-to-hufflepuff-at-port-range-9003-9005",
        action: "Accept",
        to: [{ namespaces: named("hufflepuff") }],
        protocols: [{ sctp: { destinationPort: { range: { start: 9003, end: 9005 } } } }],
      },
      { name: "deny-to-hufflepuff-everything-else", action: "Deny", to: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base (pull request f2d6941)/admin_tier/standard-egress-tcp-port-range-rules.yaml */
export const adminTier_standardEgressTcpPortRangeRules = (): Manifest[] => [
  clusterPolicy("egress-tcp-port-range", {
    tier: "Admin",
    priority: 3,
    subject: { namespaces: named("durmstrang") },
    egress: [
      {
        name: "allow-to-hufflepuff-at-port-range-80-8080",
        action: "Accept",
        to: [{ namespaces: named("hufflepuff") }],
        protocols: [{ tcp: { destinationPort: { range: { start: 80, end: 8080 } } } }],
      },
      { name: "deny-to-hufflepuff-everything-else", action: "Deny", to: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base (pull request f2d6941)/admin_tier/standard-egress-udp-port-range-rules.yaml */
export const adminTier_standardEgressUdpPortRangeRules = (): Manifest[] => [
  clusterPolicy("egress-udp-port-range", {
    tier: "Admin",
    priority: 7,
    subject: { namespaces: named("durmstrang") },
    egress: [
      {
        name: "allow-to-gryffindor-at-port-range-53-5353",
        action: "Accept",
        to: [{ namespaces: named("gryffindor") }],
        protocols: [{ udp: { destinationPort: { range: { start: 53, end: 5353 } } } }],
      },
      { name: "deny-to-gryffindor-everything-else", action: "Deny", to: [{ namespaces: named("gryffindor") }] },
    ],
  }),
];

/** conformance/base (pull request f2d6941)/admin_tier/standard-gress-omitted-namespaceselector.yaml */
export const adminTier_standardGressOmittedNamespaceselector = (): Manifest[] => [
  clusterPolicy("gress-omitted-namespaceselector", {
    tier: "Admin",
    priority: 3,
    subject: { namespaces: named("durmstrang") },
    ingress: [
      {
        name: "deny-from-all-conformance-pods",
        action: "Deny",
        from: [{ pods: { podSelector: { matchExpressions: [{ key: "conformance-house", operator: "Exists" }] } } }],
      },
    ],
  }),
];

/** conformance/base (pull request f2d6941)/admin_tier/standard-ingress-sctp-port-range-rules.yaml */
export const adminTier_standardIngressSctpPortRangeRules = (): Manifest[] => [
  clusterPolicy("ingress-sctp-port-range", {
    tier: "Admin",
    priority: 8,
    subject: { namespaces: named("durmstrang") },
    ingress: [
      {
        name: "allow-from-hufflepuff-at-port-range-9003-9005",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [{ sctp: { destinationPort: { range: { start: 9003, end: 9005 } } } }],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base (pull request f2d6941)/admin_tier/standard-ingress-tcp-port-range-rules.yaml */
export const adminTier_standardIngressTcpPortRangeRules = (): Manifest[] => [
  clusterPolicy("ingress-tcp-port-range", {
    tier: "Admin",
    priority: 3,
    subject: { namespaces: named("durmstrang") },
    ingress: [
      {
        name: "allow-from-hufflepuff-at-port-range-80-8080",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [{ tcp: { destinationPort: { range: { start: 80, end: 8080 } } } }],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];

/** conformance/base (pull request f2d6941)/admin_tier/standard-ingress-udp-port-range-rules.yaml */
export const adminTier_standardIngressUdpPortRangeRules = (): Manifest[] => [
  clusterPolicy("ingress-udp-port-range", {
    tier: "Admin",
    priority: 7,
    subject: { namespaces: named("durmstrang") },
    ingress: [
      {
        name: "allow-from-hufflepuff-at-port-range-53-5353",
        action: "Accept",
        from: [{ namespaces: named("hufflepuff") }],
        protocols: [{ udp: { destinationPort: { range: { start: 53, end: 5353 } } } }],
      },
      { name: "deny-from-hufflepuff-everything-else", action: "Deny", from: [{ namespaces: named("hufflepuff") }] },
    ],
  }),
];
