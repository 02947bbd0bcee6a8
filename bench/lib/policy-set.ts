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
 */
import type { V1Namespace, V1Pod } from "@kubernetes/client-node";
import { namespace, pod, policy } from "../../test/support/policy-cluster";
import type { Cluster, RawPolicy } from "../../test/support/policy-model";

export const POLICY_COUNT = 100;
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

/** The whole cluster the agents of nodes a and b would read. */
export function policyCluster(netperfPods: readonly NetperfPod[]): Cluster {
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
  return { namespaces, pods, policies };
}

/** The pods an agent on `node` compiles ("namespace/name"): those scheduled there. */
export function localPods(cluster: Cluster, node: PolicyNode): string[] {
  return cluster.pods
    .filter((p) => p.spec?.nodeName === node)
    .map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`);
}

/** The namespaces that have a policy (nkc_pol_ns: an ADD there marks an unjudged pod pending). */
export function namespacesWithPolicies(cluster: Cluster): string[] {
  return [...new Set(cluster.policies.map((p) => p.metadata.namespace))].sort();
}
