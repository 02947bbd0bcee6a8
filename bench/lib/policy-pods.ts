/**
 * The NetworkPolicy section's netperf pods (bench/lib/policy.ts): per mode a client on
 * node a and a server on each node, added as a runtime adds them, named by CNI_ARGS.
 */
import { addPod, type ClusterNode, type Pod } from "../../test/support/topology";
import type { newFixture } from "./cleanup";
import type { Placement } from "./paths";
import type { PolicyNode } from "./policy-set";

export interface ModePods {
  client: Pod;
  servers: Record<Placement, Pod>;
}

/** A runtime's CNI_ARGS: the pod's namespace and name, by which its policy knows it. */
const podArgs = (namespace: string, name: string) => ({
  CNI_ARGS: `K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name}`,
});

/** The client on node a, a server on node b (across) and one on node a (same). */
export function addPods(
  fx: ReturnType<typeof newFixture>,
  [a, b]: [ClusterNode, ClusterNode],
  namespace: string,
  prefix: string,
): ModePods {
  const add = (node: ClusterNode, name: string) =>
    addPod(fx, node, `${prefix}-${name}`, node.conf, podArgs(namespace, name));
  return { client: add(a, "client"), servers: { across: add(b, "server-b"), same: add(a, "server-a") } };
}

/** A mode's pods by the names their policies know them by. */
export const namedPods = (set: ModePods): [string, Pod][] => [
  ["client", set.client],
  ["server-b", set.servers.across],
  ["server-a", set.servers.same],
];

export const nodeOf = (pod: Pod): PolicyNode => pod.node.name;
