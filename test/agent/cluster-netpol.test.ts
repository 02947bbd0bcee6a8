/**
 * ClusterNetworkPolicy (policy.networking.k8s.io) as a cluster meets it, judged as whole
 * truth tables like the NetworkPolicy suite (netpol.test.ts): three namespaces of three
 * pods on two nodes, each agent in its DaemonSet container against the stand-in API,
 * which starts without the CRD. The scenarios are those network-policy-api's
 * conformance profile checks, with NetworkPolicies beside them: Admin Deny over a
 * namespace's Allow, Admin Pass handing over to NetworkPolicy, Baseline Deny overridden
 * by a NetworkPolicy Allow, priorities across policies and rule order within one,
 * `networks` matching pod traffic, `nodes` peers, named ports and ranges, live changes,
 * the first packet after ADD; the model is test/support/cluster-policy-model.ts (read
 * from the API's Go types' comments, sharing nothing with the agent). The scenarios one
 * by one, against upstream's own expectations, are test/unit/cluster-policy-conformance*.
 */
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ceiling } from "../support/ceiling";
import { allowedWithTiers } from "../support/cluster-policy-model";
import { BINARY, inNs, runPlugin } from "../support/harness";
import type { Cluster, RawClusterPolicy, RawPolicy } from "../support/policy-model";
import { eventually, scrape } from "./agent-harness";
import { hammer, type PodHere, PolicyCluster, type PolicyNode, PROBE, podObject, policy } from "./netpol-cluster";
import { casesOf, PolicyMatrix } from "./netpol-matrix";

const NAMESPACES = ["x", "y", "z"] as const;
const PODS = ["a", "b", "c"] as const;
const GROUP = "policy.networking.k8s.io";

let cluster: PolicyCluster;
let matrix: PolicyMatrix;
const pods = () => cluster.pods;
const pod = (key: string) => pods().get(key) as PodHere;

type Spec = Record<string, unknown>;
const cnp = (name: string, tier: "Admin" | "Baseline", priority: number, spec: Spec): RawClusterPolicy => ({
  metadata: { name },
  spec: { tier, priority, ...spec },
});
const inNamespace = (ns: string) => ({ namespaces: { matchLabels: { ns } } });
const tcp = (port: number) => ({ tcp: { destinationPort: { number: port } } });

/** The nodes as the model knows them: their addresses and labels (for `nodes` peers). */
const modelNodes = () =>
  cluster.nodes.map((n) => ({
    name: n.name,
    ips: [`10.30.0.${n.n}`, `fd30::${n.n}`],
    labels: { "kubernetes.io/hostname": n.name },
  }));

/** Admin: no pod of y into x: the scenario several tests start from. */
const noYIntoX = () =>
  cnp("no-y-into-x", "Admin", 10, {
    subject: inNamespace("x"),
    ingress: [{ name: "deny-y", action: "Deny", from: [inNamespace("y")] }],
  });

let appliedCnps: RawClusterPolicy[] = [];
let appliedNps: RawPolicy[] = [];

/** Makes the API hold exactly these ClusterNetworkPolicies and NetworkPolicies. */
function apply(cnps: RawClusterPolicy[], nps: RawPolicy[]): void {
  for (const p of appliedCnps) {
    if (!cnps.some((q) => q.metadata.name === p.metadata.name))
      cluster.api.remove("clusternetworkpolicies", "", p.metadata.name);
  }
  for (const p of appliedNps) {
    if (!nps.some((q) => q.metadata.name === p.metadata.name && q.metadata.namespace === p.metadata.namespace))
      cluster.api.remove("networkpolicies", p.metadata.namespace, p.metadata.name);
  }
  for (const p of cnps) cluster.api.put("clusternetworkpolicies", p as unknown as Record<string, unknown>);
  for (const p of nps) cluster.api.put("networkpolicies", p as unknown as Record<string, unknown>);
  appliedCnps = cnps;
  appliedNps = nps;
}

const modelOf = (cnps: RawClusterPolicy[], nps: RawPolicy[]): Cluster => ({
  namespaces: cluster.namespaces,
  pods: cluster.podObjects(),
  policies: nps,
  clusterPolicies: cnps,
  nodes: modelNodes(),
});

const CASES = casesOf(["TCP", "UDP"]);

/**
 * Applies the policies and waits until every pod's probes of every pod (and, `withNodes`,
 * of every node's addresses) answer as the model does.
 */
async function expectTable(
  cnps: RawClusterPolicy[],
  nps: RawPolicy[] = [],
  within = ceiling(20_000),
  withNodes = false,
): Promise<void> {
  // Served from the first test on; a test run alone installs the CRD itself.
  if (cnps.length > 0 && cluster.api.clusterNetworkPolicyVersions.length === 0)
    cluster.api.installClusterNetworkPolicy(["v1alpha2"]);
  apply(cnps, nps);
  const views = withNodes ? [matrix.podView(CASES), matrix.nodeView(CASES)] : [matrix.podView(CASES)];
  for (const view of views) {
    let last = await matrix.settle(view, () => modelOf(cnps, nps), within);
    if (last !== "") last += cluster.diagnostics("policies");
    expect(last).toBe("");
  }
}

const agentStatus = (n: PolicyNode) => JSON.parse(scrape(n.agentNode, "/status")[1] || "{}").networkPolicy;

describe("ClusterNetworkPolicy truth tables, two nodes, agents in their DaemonSet containers", () => {
  beforeAll(async () => {
    cluster = new PolicyCluster();
    matrix = new PolicyMatrix(cluster, allowedWithTiers);
    appliedCnps = [];
    appliedNps = [];
    await cluster.start(2, NAMESPACES);
    let i = 0;
    for (const ns of NAMESPACES)
      for (const p of PODS) await cluster.addPod(`${ns}/${p}`, cluster.nodes[i++ % 2] as PolicyNode);
    // Each node serves the probe ports at its own addresses (for `nodes` peers).
    for (const n of cluster.nodes) {
      const server = spawn("nsenter", [`--net=/run/netns/${n.netns}`, "python3", PROBE, "serve", "80", "81"], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      cluster.fx.processes.push({ kill: () => server.kill("SIGKILL") });
      await new Promise<void>((resolve) => server.stdout?.once("data", () => resolve()));
    }
  }, ceiling(180_000));

  afterAll(async () => {
    await cluster?.stop();
  });

  it(
    "enforces NetworkPolicy alone while the CRD is not installed, and picks ClusterNetworkPolicy up once it is",
    async () => {
      for (const n of cluster.nodes)
        expect(agentStatus(n).clusterNetworkPolicy).toEqual({ version: null, policies: [] });
      cluster.api.installClusterNetworkPolicy(["v1alpha2"]);
      await expectTable([noYIntoX()]);
      for (const n of cluster.nodes) expect(agentStatus(n).clusterNetworkPolicy.version).toBe("v1alpha2");
    },
    ceiling(120_000),
  );

  it(
    "lets an Admin Deny win over a namespace's NetworkPolicy Allow",
    async () => {
      await expectTable(
        [
          cnp("no-y-into-x-80", "Admin", 10, {
            subject: inNamespace("x"),
            ingress: [{ name: "deny-y-80", action: "Deny", from: [inNamespace("y")], protocols: [tcp(80)] }],
          }),
        ],
        [
          policy("x", "allow-y", {
            podSelector: {},
            ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: "y" } } }] }],
          }),
        ],
      );
    },
    ceiling(120_000),
  );

  it(
    "hands over to NetworkPolicy on an Admin Pass, skipping the Admin rules after it",
    async () => {
      await expectTable(
        [
          cnp("pass-y", "Admin", 1, {
            subject: inNamespace("x"),
            ingress: [{ name: "pass-y", action: "Pass", from: [inNamespace("y")] }],
          }),
          cnp("deny-y", "Admin", 2, {
            subject: inNamespace("x"),
            ingress: [{ name: "deny-y", action: "Deny", from: [inNamespace("y")] }],
          }),
        ],
        [
          policy("x", "y-on-81", {
            podSelector: { matchLabels: { pod: "a" } },
            ingress: [
              { from: [{ namespaceSelector: { matchLabels: { ns: "y" } } }], ports: [{ port: 81, protocol: "TCP" }] },
            ],
          }),
        ],
      );
    },
    ceiling(120_000),
  );

  it(
    "lets a NetworkPolicy Allow override a Baseline Deny, which still denies where no NetworkPolicy decides",
    async () => {
      await expectTable(
        [
          cnp("baseline-deny-all", "Baseline", 5, {
            subject: { namespaces: {} },
            ingress: [{ name: "deny-everyone", action: "Deny", from: [{ namespaces: {} }] }],
          }),
        ],
        [
          policy("y", "from-x", {
            podSelector: {},
            ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: "x" } } }] }],
          }),
        ],
      );
    },
    ceiling(120_000),
  );

  it(
    "orders policies by priority and a policy's rules as written; egress Accept still meets the destination's ingress",
    async () => {
      await expectTable([
        // Priority 5 before 10: y's pods may not reach z's on TCP 80, though priority 10 accepts them.
        cnp("accept-y-into-z", "Admin", 10, {
          subject: inNamespace("z"),
          ingress: [{ name: "accept-y", action: "Accept", from: [inNamespace("y")] }],
        }),
        cnp("deny-y-into-z-80", "Admin", 5, {
          subject: inNamespace("z"),
          ingress: [{ name: "deny-y-80", action: "Deny", from: [inNamespace("y")], protocols: [tcp(80)] }],
        }),
        // Within one policy: x/a accepts from z on TCP 81, then denies z everything else.
        cnp("xa-from-z", "Admin", 20, {
          subject: {
            pods: { namespaceSelector: { matchLabels: { ns: "x" } }, podSelector: { matchLabels: { pod: "a" } } },
          },
          ingress: [
            { name: "accept-z-81", action: "Accept", from: [inNamespace("z")], protocols: [tcp(81)] },
            { name: "deny-z", action: "Deny", from: [inNamespace("z")] },
          ],
        }),
        // y's egress accepted to x: x/a's ingress still judges it.
        cnp("y-out", "Admin", 30, {
          subject: inNamespace("y"),
          egress: [{ name: "accept-x", action: "Accept", to: [inNamespace("x")] }],
        }),
        cnp("xa-no-y", "Admin", 40, {
          subject: {
            pods: { namespaceSelector: { matchLabels: { ns: "x" } }, podSelector: { matchLabels: { pod: "a" } } },
          },
          ingress: [{ name: "deny-y", action: "Deny", from: [inNamespace("y")] }],
        }),
      ]);
    },
    ceiling(120_000),
  );

  it(
    "matches pod traffic by `networks`, both families, and Node addresses by `nodes`",
    async () => {
      const za = pod("z/a");
      await expectTable(
        [
          cnp("x-not-to-za", "Admin", 10, {
            subject: inNamespace("x"),
            egress: [
              { name: "deny-za", action: "Deny", to: [{ networks: [`${za.v4}/32`, `${za.v6}/128`] }] },
              { name: "deny-nodes", action: "Deny", to: [{ nodes: {} }], protocols: [tcp(80)] },
            ],
          }),
        ],
        [],
        ceiling(20_000),
        true,
      );
    },
    ceiling(120_000),
  );

  it(
    "resolves a named port on the receiving pod and takes port ranges",
    async () => {
      await expectTable([
        cnp("z-named-and-ranges", "Admin", 10, {
          subject: inNamespace("z"),
          ingress: [
            {
              name: "udp-81-by-name",
              action: "Accept",
              from: [{ namespaces: {} }],
              protocols: [{ destinationNamedPort: "serve-81-udp" }],
            },
            {
              name: "tcp-79-to-80",
              action: "Accept",
              from: [{ namespaces: {} }],
              protocols: [{ tcp: { destinationPort: { range: { start: 79, end: 80 } } } }],
            },
            { name: "nothing-else", action: "Deny", from: [{ namespaces: {} }] },
          ],
        }),
      ]);
    },
    ceiling(120_000),
  );

  it(
    "follows live changes: a priority swapped, a namespace relabelled, a policy deleted",
    async () => {
      const accept = (priority: number) =>
        cnp("accept-y", "Admin", priority, {
          subject: inNamespace("x"),
          ingress: [{ name: "accept-y", action: "Accept", from: [inNamespace("y")] }],
        });
      const deny = cnp("deny-y", "Admin", 20, {
        subject: inNamespace("x"),
        ingress: [{ name: "deny-y", action: "Deny", from: [inNamespace("y")] }],
      });
      await expectTable([accept(10), deny], [], ceiling(10_000));
      await expectTable([accept(30), deny], [], ceiling(10_000));
      // z takes y's label: its pods are denied too; then it gives it back.
      const z = cluster.namespaces.find((n) => n.metadata?.name === "z");
      if (!z?.metadata) throw new Error("no namespace z");
      z.metadata.labels = { ...z.metadata.labels, ns: "y" };
      cluster.api.put("namespaces", z as unknown as Record<string, unknown>);
      await expectTable([accept(30), deny], [], ceiling(10_000));
      z.metadata.labels = { ...z.metadata.labels, ns: "z" };
      cluster.api.put("namespaces", z as unknown as Record<string, unknown>);
      await expectTable([accept(30), deny], [], ceiling(10_000));
      await expectTable([], [], ceiling(10_000));
    },
    ceiling(180_000),
  );

  it(
    "lets nothing an Admin Deny refuses through to a new pod, from the first packet after ADD",
    async () => {
      const cnps = [noYIntoX()];
      await expectTable(cnps);
      const node = cluster.nodes[0] as PolicyNode;
      // ADD before the API has the pod: its namespace falls under a subject, so it is
      // pending until its agent judges it; y/a hammers it from the moment ADD returns.
      const netns = cluster.fx.makeNetns("nkpn");
      inNs(netns, "ip", ["link", "set", "lo", "up"]);
      const r = runPlugin(
        node.netns,
        "ADD",
        { containerId: "x-late", netns: `/run/netns/${netns}`, ifname: "eth0" },
        cluster.confOf(node),
        { CNI_ARGS: "K8S_POD_NAMESPACE=x;K8S_POD_NAME=late" },
      );
      expect(r.status, r.stdout).toBe(0);
      const ip = ((r.json?.ips ?? []) as { address: string }[])[0]?.address.split("/")[0] as string;
      const hammering = hammer(pod("y/a").netns, ip, 6);
      const server = spawn("nsenter", [`--net=/run/netns/${netns}`, "python3", PROBE, "serve", "80"], {
        stdio: "ignore",
      });
      cluster.fx.processes.push({ kill: () => server.kill("SIGKILL") });
      await new Promise((resolve) => setTimeout(resolve, 2500));
      cluster.putPod(podObject("x/late", node.name, { pod: "late" }, [ip]));
      expect(await hammering).toEqual({ through: 0, tries: expect.any(Number) });
      // The control: z's pods, which no rule denies, get through once it is judged.
      const control = await hammer(pod("z/a").netns, ip, 3);
      expect(control.through).toBeGreaterThan(0);
      server.kill("SIGKILL");
    },
    ceiling(120_000),
  );

  it(
    "tells why: monitor names the tier, policy and rule, status and metrics count, the policy's condition says it is enforced",
    async () => {
      await expectTable([noYIntoX()]);
      const target = pod("x/a");
      const node = target.node;
      const root = cluster.bpffsRootOf(node.n);
      const events = await cluster.monitorWhile(target, () =>
        cluster.probeFrom(pod("y/b").netns, [`${target.v4} 80 tcp`]),
      );
      expect(events).toContainEqual(
        expect.objectContaining({
          pod: "x/a",
          direction: "ingress",
          reason: "tier-denied",
          tier: "admin",
          why: "denied by ClusterNetworkPolicy rule no-y-into-x/deny-y (Admin Deny) (ingress)",
        }),
      );
      const status = JSON.parse(
        inNs(node.netns, BINARY, ["status", "--json", "--bpffs-root", root, "--state-dir", node.agentNode.stateDir]),
      );
      expect(status.networkPolicy.selectedBy["x/a"]).toEqual([]);
      expect(status.networkPolicy.clusterSelectedBy["x/a"]).toEqual(["no-y-into-x"]);
      expect(status.networkPolicy.clusterNetworkPolicy).toMatchObject({
        version: "v1alpha2",
        policies: [{ name: "no-y-into-x", tier: "Admin", priority: 10, problems: [] }],
      });
      expect(status.networkPolicy.maps).toContainEqual(
        expect.objectContaining({ name: "nkc_pol_tiers", entries: expect.any(Number) }),
      );
      const agent = agentStatus(node);
      expect(agent.pods["x/a"].clusterSelectedBy).toEqual(["no-y-into-x"]);
      expect(agent.clusterNetworkPolicy.policies).toEqual([
        { name: "no-y-into-x", tier: "Admin", priority: 10, localPods: expect.any(Number), problems: [] },
      ]);
      const metrics = scrape(node.agentNode, "/metrics")[1];
      expect(metrics).toMatch(
        /^netkit_cni_network_policy_verdicts_total\{direction="ingress",tier="admin",verdict="denied"\} [1-9]\d*$/m,
      );
      expect(metrics).toMatch(/^netkit_cni_cluster_network_policies\{tier="Admin"\} 1$/m);
      // One agent (node-1's, first by name) writes the condition, by server-side apply.
      await eventually(
        "condition written",
        () =>
          cluster.api.statusApplies.some(
            (a) =>
              a.name === "no-y-into-x" &&
              JSON.stringify(a.body).includes('"type":"netkit-cni.io/Enforced","status":"True"'),
          ),
        ceiling(10_000),
      );
      expect(new Set(cluster.api.statusApplies.map((a) => a.fieldManager))).toEqual(new Set(["netkit-cni"]));
    },
    ceiling(120_000),
  );

  it(
    "fails closed on a rule it cannot read: a Deny with an unknown peer denies everything, and says so",
    async () => {
      const unreadable = cnp("future-peer", "Admin", 10, {
        subject: inNamespace("x"),
        ingress: [{ name: "deny-future", action: "Deny", from: [{ serviceAccounts: { name: "intruder" } }] }],
      });
      await expectTable([unreadable]);
      const [summary] = agentStatus(cluster.nodes[0] as PolicyNode).clusterNetworkPolicy.policies;
      expect(summary.problems.map((p: { kind: string }) => p.kind)).toContain("unknown-field");
      await eventually(
        "condition False",
        () =>
          cluster.api.statusApplies.some(
            (a) => a.name === "future-peer" && JSON.stringify(a.body).includes('"status":"False"'),
          ),
        ceiling(10_000),
      );
    },
    ceiling(120_000),
  );

  it(
    "moves to v1beta1 when the CRD serves it, and lets go when the CRD is removed",
    async () => {
      const cnps = [noYIntoX()];
      await expectTable(cnps);
      cluster.api.installClusterNetworkPolicy(["v1beta1", "v1alpha2"]);
      for (const n of cluster.nodes) {
        await eventually(
          "v1beta1",
          () => agentStatus(n).clusterNetworkPolicy.version === "v1beta1",
          ceiling(15_000),
          () => n.agent.log,
        );
      }
      expect(cluster.api.requests.some((r) => r.path === `/apis/${GROUP}/v1beta1/clusternetworkpolicies`)).toBe(true);
      await expectTable(cnps, [], ceiling(10_000));
      // The CRD goes (and its objects with it, as the API server deletes them): nothing denies.
      cluster.api.installClusterNetworkPolicy([]);
      apply([], []);
      await expectTable([], [], ceiling(15_000));
      for (const n of cluster.nodes) expect(agentStatus(n).clusterNetworkPolicy.version).toBeNull();
    },
    ceiling(120_000),
  );
});
