/**
 * The NetworkPolicy section's cluster (bench/lib/policy.ts) as the API would serve it:
 * its namespaces, pods and policies, for the agent's compiler (src/agent/policy/model) to
 * read through the informers' own transforms (test/support/policy-cluster.ts). Pure.
 *
 * 100 policies. In the netperf pods' namespace, 3 select the servers (ingress: the client
 * on netperf's ports, other tenants' pods on another port, an address block on a third)
 * and 3 the client (egress: the servers on netperf's ports, DNS, a database tier). The
 * other 94 select pods that exist only in the maps: one policy per app in three other
 * namespaces, each app with a pod on every node, each policy isolating its app both ways
 * with rules naming other apps' pods by label, address blocks with excepts, a port range,
 * so each node's tables hold a slot per app and thousands of prefixes, as a node's would.
 *
 * With the cluster admin's tiers (the "tiers" mode), 50 ClusterNetworkPolicies beside the
 * same 100. Five have subjects among the netperf pods: an Admin Accept of the client on
 * the servers' ingress (netperf's ports) and an Admin Pass of the servers on the client's
 * egress (handing the flow to its NetworkPolicies); two Admin Denies netperf's flows never
 * meet (the client's egress to the servers' ssh port, one tenant's ingress to the
 * servers); and the namespace's Baseline on ingress (its own namespace accepted, others
 * denied), whose Accept matches netperf's flows too, though their NetworkPolicies decide
 * before it. None judges the servers' egress: that stays as the selected mode has it
 * (the replies pass unjudged), since a reply judged anew, when the pod's flow table
 * (2048 flows, LRU) has let its flow go under TCP_CRR's churn, would meet a Deny there.
 * The other 45 mix the tiers, priorities, actions, peers and ports over the apps and
 * namespaces that exist only in the maps.
 */
import type { V1Namespace, V1Pod } from "@kubernetes/client-node";
import { parseClusterPolicy } from "../../src/agent/policy/model/cluster-parse";
import { clusterNetworkPolicyObject } from "../../src/agent/policy/model/objects";
import { selectorMatches } from "../../src/agent/policy/model/selectors";
import { clusterPolicy, namespace, pod, policy } from "../../test/support/policy-cluster";
import type { Cluster, RawClusterPolicy, RawPolicy } from "../../test/support/policy-model";

export const POLICY_COUNT = 100;
/** The ClusterNetworkPolicies beside them in the "tiers" mode. */
export const CLUSTER_POLICY_COUNT = 50;
/** The netperf pods' namespace when their policies select them. */
export const SELECTED_NS = "bench-selected";
/** The netperf pods' namespace in a network enforcing policy, where no policy is. */
export const UNJUDGED_NS = "bench-none";
/** netserver's control port and the data port netperf is given (-P). */
export const NETPERF_PORTS = [12865, 12866] as const;
/** The other policies' namespaces, by the team label the netperf pods' rules select. */
const OTHER_NAMESPACES = [
  { name: "tenant-a", team: "frontend" },
  { name: "tenant-b", team: "data" },
  { name: "tenant-c", team: "batch" },
] as const;
const TIERS = 8;

export type PolicyNode = "a" | "b";

/** A netperf pod of the selected namespace: its name, role, node and addresses. */
export interface NetperfPod {
  name: string;
  role: "client" | "server";
  node: PolicyNode;
  ips: string[];
}

const tcp = (...ports: number[]) => ports.map((port) => ({ protocol: "TCP", port }));

/** The 3 policies selecting the servers and the 3 selecting the client. */
function netperfPolicies(): RawPolicy[] {
  const servers = { podSelector: { matchLabels: { role: "server" } }, policyTypes: ["Ingress"] };
  const client = { podSelector: { matchLabels: { role: "client" } }, policyTypes: ["Egress"] };
  const tenant = (team: string, tier: string) => ({
    namespaceSelector: { matchLabels: { team } },
    podSelector: { matchLabels: { tier } },
  });
  const key = (name: string) => `${SELECTED_NS}/${name}`;
  return [
    policy(key("server-from-client"), {
      ...servers,
      ingress: [{ from: [{ podSelector: { matchLabels: { role: "client" } } }], ports: tcp(...NETPERF_PORTS) }],
    }),
    policy(key("server-from-frontends"), {
      ...servers,
      ingress: [{ from: [tenant("frontend", "t0")], ports: tcp(8080) }],
    }),
    policy(key("server-from-monitoring"), {
      ...servers,
      ingress: [{ from: [{ ipBlock: { cidr: "192.168.0.0/16", except: ["192.168.1.0/24"] } }], ports: tcp(9100) }],
    }),
    policy(key("client-to-server"), {
      ...client,
      egress: [{ to: [{ podSelector: { matchLabels: { role: "server" } } }], ports: tcp(...NETPERF_PORTS) }],
    }),
    policy(key("client-to-dns"), {
      ...client,
      egress: [{ to: [{ ipBlock: { cidr: "10.96.0.10/32" } }], ports: [{ protocol: "UDP", port: 53 }, ...tcp(53)] }],
    }),
    policy(key("client-to-databases"), {
      ...client,
      egress: [{ to: [tenant("data", "t1")], ports: tcp(5432) }],
    }),
  ];
}

const otherNamespace = (i: number) =>
  OTHER_NAMESPACES[i % OTHER_NAMESPACES.length] as (typeof OTHER_NAMESPACES)[number];
const tier = (i: number) => `t${i % TIERS}`;

/** The i-th of the other policies: app-i's pods isolated both ways. */
function otherPolicy(i: number): RawPolicy {
  return policy(`${otherNamespace(i).name}/app-${i}`, {
    podSelector: { matchLabels: { app: `app-${i}` } },
    policyTypes: ["Ingress", "Egress"],
    ingress: [
      { from: [{ podSelector: { matchLabels: { tier: tier(i) } } }], ports: tcp(8000 + i) },
      {
        from: [{ ipBlock: { cidr: "10.0.0.0/8", except: [`10.${i}.0.0/16`, `10.${i + 100}.0.0/16`] } }],
        ports: [{ protocol: "TCP", port: 9000, endPort: 9100 }],
      },
    ],
    egress: [
      {
        to: [
          { podSelector: { matchLabels: { tier: tier(i + 1) } } },
          { namespaceSelector: { matchLabels: { team: "data" } }, podSelector: { matchLabels: { tier: "t1" } } },
        ],
        ports: tcp(5432),
      },
      { to: [{ ipBlock: { cidr: "10.96.0.10/32" } }], ports: [{ protocol: "UDP", port: 53 }, ...tcp(53)] },
    ],
  });
}

const OTHERS = POLICY_COUNT - netperfPolicies().length;

/** app-i's pod on `node`: addresses no device has, only the maps. */
function otherPod(i: number, node: PolicyNode): V1Pod {
  const n = node === "a" ? 0 : 1;
  return pod(`${otherNamespace(i).name}/app-${i}-${node}`, {
    labels: { app: `app-${i}`, tier: tier(i) },
    ips: [`10.221.${64 + n}.${i + 1}`, `fd21:${64 + n}::${(i + 1).toString(16)}`],
    node,
  });
}

const byName = (name: string) => ({ matchLabels: { "kubernetes.io/metadata.name": name } });
const netperfRole = (role: NetperfPod["role"]) => ({
  pods: { namespaceSelector: byName(SELECTED_NS), podSelector: { matchLabels: { role } } },
});
const netperfPorts = [{ tcp: { destinationPort: { range: { start: NETPERF_PORTS[0], end: NETPERF_PORTS[1] } } } }];
const tcpPort = (number: number) => ({ tcp: { destinationPort: { number } } });
const dns = [{ udp: { destinationPort: { number: 53 } } }, tcpPort(53)];

/** The ssh port: the client's Admin Deny names it on the servers, where nothing listens. */
export const DENIED_PORT = 22;

/** The 5 ClusterNetworkPolicies whose subjects are netperf pods. */
function netperfClusterPolicies(): RawClusterPolicy[] {
  return [
    clusterPolicy("bench-netperf-accept", {
      tier: "Admin",
      priority: 10,
      subject: netperfRole("server"),
      ingress: [
        { name: "netperf-from-client", action: "Accept", from: [netperfRole("client")], protocols: netperfPorts },
      ],
    }),
    clusterPolicy("bench-netperf-pass", {
      tier: "Admin",
      priority: 20,
      subject: netperfRole("client"),
      egress: [{ name: "netperf-to-servers", action: "Pass", to: [netperfRole("server")], protocols: netperfPorts }],
    }),
    clusterPolicy("bench-client-no-ssh", {
      tier: "Admin",
      priority: 5,
      subject: netperfRole("client"),
      egress: [{ name: "no-ssh", action: "Deny", to: [netperfRole("server")], protocols: [tcpPort(DENIED_PORT)] }],
    }),
    clusterPolicy("bench-servers-no-batch", {
      tier: "Admin",
      priority: 5,
      subject: netperfRole("server"),
      ingress: [{ name: "from-batch", action: "Deny", from: [{ namespaces: { matchLabels: { team: "batch" } } }] }],
    }),
    clusterPolicy("bench-namespace-baseline", {
      tier: "Baseline",
      priority: 10,
      subject: { namespaces: byName(SELECTED_NS) },
      ingress: [
        { name: "same-namespace", action: "Accept", from: [{ namespaces: byName(SELECTED_NS) }] },
        { name: "other-namespaces", action: "Deny", from: [{ namespaces: {} }] },
      ],
    }),
  ];
}

/** app-j's pods as a subject or peer, in its own namespace. */
const appPods = (j: number) => ({
  namespaceSelector: { matchLabels: { team: otherNamespace(j).team } },
  podSelector: { matchLabels: { app: `app-${j}` } },
});

/**
 * The i-th of the other ClusterNetworkPolicies, by i mod 4: an Admin Deny of another
 * team's namespace and an address block, an Admin Accept of frontends on the app's port
 * with a Pass of egress to the Service range, a Baseline Deny of two teams on a port
 * range (each for one app), or a Baseline for a whole namespace.
 */
function otherClusterPolicy(i: number): RawClusterPolicy {
  const j = (i * 2) % OTHERS;
  const team = otherNamespace(i).team;
  switch (i % 4) {
    case 0:
      return clusterPolicy(`admin-deny-app-${j}`, {
        tier: "Admin",
        priority: 100 + i,
        subject: { pods: appPods(j) },
        ingress: [{ name: "no-batch", action: "Deny", from: [{ namespaces: { matchLabels: { team: "batch" } } }] }],
        egress: [{ name: "no-block", action: "Deny", to: [{ networks: [`10.${j}.0.0/16`, `fd10:${j}::/32`] }] }],
      });
    case 1:
      return clusterPolicy(`admin-accept-app-${j}`, {
        tier: "Admin",
        priority: 200 + i,
        subject: { pods: appPods(j) },
        ingress: [
          {
            name: "frontends",
            action: "Accept",
            from: [
              {
                pods: {
                  namespaceSelector: { matchLabels: { team: "frontend" } },
                  podSelector: { matchLabels: { tier: tier(j) } },
                },
              },
            ],
            protocols: [tcpPort(8000 + j)],
          },
        ],
        egress: [{ name: "services", action: "Pass", to: [{ networks: ["10.96.0.0/12"] }], protocols: [tcpPort(443)] }],
      });
    case 2:
      return clusterPolicy(`baseline-deny-app-${j}`, {
        tier: "Baseline",
        priority: 10 + i,
        subject: { pods: appPods(j) },
        ingress: [
          {
            name: "no-data-or-batch",
            action: "Deny",
            from: [{ namespaces: { matchExpressions: [{ key: "team", operator: "In", values: ["data", "batch"] }] } }],
            protocols: [{ tcp: { destinationPort: { range: { start: 9000, end: 9100 } } } }],
          },
        ],
      });
    default:
      return clusterPolicy(`baseline-${team}-${i}`, {
        tier: "Baseline",
        priority: 500 + i,
        subject: { namespaces: { matchLabels: { team } } },
        ingress: [{ name: "own-team", action: "Accept", from: [{ namespaces: { matchLabels: { team } } }] }],
        egress: [{ name: "dns", action: "Accept", to: [{ networks: ["10.96.0.10/32"] }], protocols: dns }],
      });
  }
}

/** The 50 ClusterNetworkPolicies: the netperf pods' 4, then the others. */
export function clusterPolicies(): RawClusterPolicy[] {
  const netperf = netperfClusterPolicies();
  const others = Array.from({ length: CLUSTER_POLICY_COUNT - netperf.length }, (_, i) => otherClusterPolicy(i));
  return [...netperf, ...others];
}

/**
 * The whole cluster the agents of nodes a and b would read; with `tiers`, the
 * ClusterNetworkPolicies too.
 */
export function policyCluster(netperfPods: readonly NetperfPod[], tiers = false): Cluster {
  const namespaces: V1Namespace[] = [
    namespace(SELECTED_NS),
    namespace(UNJUDGED_NS),
    ...OTHER_NAMESPACES.map((ns) => namespace(ns.name, { team: ns.team })),
  ];
  const pods = [
    ...netperfPods.map((p) => pod(`${SELECTED_NS}/${p.name}`, { labels: { role: p.role }, ips: p.ips, node: p.node })),
    ...Array.from({ length: OTHERS }, (_, i) => [otherPod(i, "a"), otherPod(i, "b")]).flat(),
  ];
  const policies = [...netperfPolicies(), ...Array.from({ length: OTHERS }, (_, i) => otherPolicy(i))];
  return tiers ? { namespaces, pods, policies, clusterPolicies: clusterPolicies() } : { namespaces, pods, policies };
}

/** The pods an agent on `node` compiles ("namespace/name"): those scheduled there. */
export function localPods(cluster: Cluster, node: PolicyNode): string[] {
  return cluster.pods
    .filter((p) => p.spec?.nodeName === node)
    .map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`);
}

/**
 * The namespaces that have a policy (nkc_pol_ns: an ADD there marks an unjudged pod
 * pending): a NetworkPolicy's, and, as the agent marks them, those whose labels some
 * ClusterNetworkPolicy's subject selects.
 */
export function namespacesWithPolicies(cluster: Cluster): string[] {
  const subjects = (cluster.clusterPolicies ?? []).flatMap((c) => {
    const kept = clusterNetworkPolicyObject(c)?.object;
    return kept ? [parseClusterPolicy(kept).subject.namespaces] : [];
  });
  const covered = cluster.namespaces.filter((n) => subjects.some((s) => selectorMatches(s, n.metadata?.labels ?? {})));
  const names = [...cluster.policies.map((p) => p.metadata.namespace), ...covered.map((n) => n.metadata?.name ?? "")];
  return [...new Set(names)].sort();
}
