/**
 * The NetworkPolicy controller alone (src/agent/controllers/policy.ts) with fake informers
 * and a recording writer: what a complete list makes of a cluster, that one change
 * writes only what it touches, and that what cannot be enforced as written (a policy it
 * cannot read, a pod past a datapath bound) is reported and counted, never stopping the
 * rest.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { PolicyController, type PolicyWriter } from "../../src/agent/controllers/policy";
import { agentLog } from "../../src/agent/log";
import { AgentMetrics } from "../../src/agent/metrics";
import { serviceObject } from "../../src/agent/objects";
import {
  type KeptPolicy,
  namespaceObject,
  networkPolicyObject,
  type PolicyNamespace,
  type PolicyPod,
  podObject,
} from "../../src/agent/policy/objects";
import type { ServiceObject } from "../../src/agent/service-plan";
import { WorkQueue } from "../../src/agent/workqueue";
import { FakeInformer } from "../support/fake-informer";
import { namespace, pod, policy } from "../support/policy-cluster";

class RecordingWriter implements PolicyWriter {
  readonly pods = new Map<string, { slot: number; ingress: boolean; egress: boolean }>();
  readonly namespaces = new Set<string>();
  readonly vips = new Set<string>();
  log: string[] = [];
  writeSlot(w: { peers: unknown[]; ports: unknown[] }) {
    this.log.push(`slot ${w.peers.length}+${w.ports.length}`);
  }
  setPod(p: string, slot: number, iso: { ingress: boolean; egress: boolean }) {
    this.pods.set(p, { slot, ...iso });
    this.log.push(`pod ${p} ${slot}`);
  }
  deletePod(p: string) {
    this.pods.delete(p);
    this.log.push(`del ${p}`);
  }
  podEntries() {
    return [...this.pods.keys()].map((p) => ({ pod: p, key: 0n, pending: false }));
  }
  deletePodKey() {}
  setNamespace(ns: string, has: boolean) {
    if (has) this.namespaces.add(ns);
    else this.namespaces.delete(ns);
  }
  setVips(add: string[], remove: string[]) {
    for (const ip of add) this.vips.add(ip);
    for (const ip of remove) this.vips.delete(ip);
  }
}

const t = <T>(x: { key: string; object: T } | undefined) => {
  if (!x) throw new Error("transform refused it");
  return x.object;
};

function setup() {
  const queue = new WorkQueue({ failed: (k, n, e) => console.log(k, n, e) });
  const pods = new FakeInformer<PolicyPod>((p) => `${p.namespace}/${p.name}`);
  const namespaces = new FakeInformer<PolicyNamespace>((n) => n.name);
  const policies = new FakeInformer<KeptPolicy>((p) => `${p.namespace}/${p.name}`);
  const services = new FakeInformer<ServiceObject>((s) => `${s.metadata?.namespace}/${s.metadata?.name}`);
  const writer = new RecordingWriter();
  const controller = new PolicyController(queue, pods, namespaces, policies, services, "n1", writer);
  return { queue, pods, namespaces, policies, services, writer, controller };
}

describe("the NetworkPolicy controller", () => {
  it("isolates the selected local pods on a shared slot, leaves the rest and other nodes' pods alone", async () => {
    const { queue, pods, namespaces, policies, services, writer, controller } = setup();
    namespaces.list([t(namespaceObject(namespace("a"))), t(namespaceObject(namespace("b")))]);
    pods.list([
      t(podObject(pod("a/web-1", { labels: { app: "web" }, ips: ["10.1.0.1"] }))),
      t(podObject(pod("a/web-2", { labels: { app: "web" }, ips: ["10.1.0.2"] }))),
      t(podObject(pod("a/db", { labels: { app: "db" }, ips: ["10.1.0.3"] }))),
      t(podObject(pod("a/web-3", { labels: { app: "web" }, ips: ["10.1.1.1"], node: "n2" }))),
      t(podObject(pod("b/client", { labels: { app: "client" }, ips: ["10.1.0.9"] }))),
    ]);
    policies.list([
      t(
        networkPolicyObject(
          policy("a/web", {
            podSelector: { matchLabels: { app: "web" } },
            ingress: [{ from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "b" } } }] }],
          }),
        ),
      ),
    ]);
    services.list([t(serviceObject({ metadata: { namespace: "a", name: "s" }, spec: { clusterIP: "10.96.0.1" } }))]);
    await queue.idle();
    expect(controller.status.synced).toBe(true);
    const web1 = writer.pods.get("a/web-1");
    expect(web1).toMatchObject({ ingress: true, egress: false });
    expect(writer.pods.get("a/web-2")?.slot).toBe(web1?.slot);
    expect(writer.pods.get("a/db")).toEqual({ slot: 0, ingress: false, egress: false }); // judged, not isolated
    expect(writer.pods.has("a/web-3")).toBe(false); // another node's
    expect(writer.pods.has("b/client")).toBe(false); // a namespace without policies
    expect([...writer.namespaces]).toEqual(["a"]);
    expect([...writer.vips]).toEqual(["10.96.0.1"]);
    expect(controller.status.pods["a/web-1"]?.selectedBy).toEqual(["a/web"]);

    // A new client in b: only the web slot's peers change, in place; no pod moves.
    writer.log = [];
    pods.put(t(podObject(pod("b/client-2", { labels: { app: "client" }, ips: ["10.1.0.10"] }))));
    await queue.idle();
    expect(writer.log.filter((l) => l.startsWith("slot"))).toEqual(["slot 1+0"]);
    expect(writer.pods.get("a/web-1")?.slot).toBe(web1?.slot);

    // The policy goes: the web pods are no longer isolated, the namespace has none.
    policies.remove("a/web");
    await queue.idle();
    expect(writer.pods.has("a/web-1")).toBe(false);
    expect(writer.namespaces.size).toBe(0);
    expect(controller.status.slots).toBe(0);
  });

  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("skips the policies it cannot read, reports and counts them, and enforces the rest", async () => {
    const warned = vi.spyOn(agentLog, "warn").mockImplementation(() => {});
    vi.spyOn(agentLog, "info").mockImplementation(() => {});
    const { queue, pods, namespaces, policies, services, writer, controller } = setup();
    namespaces.list([t(namespaceObject(namespace("a"))), t(namespaceObject(namespace("b")))]);
    pods.list([
      t(podObject(pod("a/web", { labels: { app: "web" }, ips: ["10.1.0.1"] }))),
      t(podObject(pod("a/db", { labels: { app: "db" }, ips: ["10.1.0.2"] }))),
      t(podObject(pod("b/other", { labels: { app: "other" }, ips: ["10.1.0.3"] }))),
    ]);
    const icmp = (protocol: string) =>
      t(
        networkPolicyObject(
          policy("a/icmp", { podSelector: { matchLabels: { app: "db" } }, ingress: [{ ports: [{ protocol }] }] }),
        ),
      );
    policies.list([
      t(
        networkPolicyObject(
          policy("a/web", {
            podSelector: { matchLabels: { app: "web" } },
            ingress: [{ from: [{ podSelector: { matchLabels: { app: "db" } } }] }],
          }),
        ),
      ),
      icmp("ICMP"),
      t(
        networkPolicyObject(
          policy("b/cidr", { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/33" } }] }] }),
        ),
      ),
      t(
        networkPolicyObject(
          policy("b/bogus", {
            podSelector: { matchExpressions: [{ key: "app", operator: "Bogus", values: ["x"] }] },
            ingress: [{}],
          }),
        ),
      ),
    ]);
    services.list([]);
    await queue.idle();

    // The readable policy applies; the unreadable ones isolate nothing.
    expect(controller.status.synced).toBe(true);
    expect(writer.pods.get("a/web")).toMatchObject({ ingress: true, egress: false });
    expect(writer.pods.get("a/db")).toEqual({ slot: 0, ingress: false, egress: false });
    expect(writer.pods.get("b/other")).toEqual({ slot: 0, ingress: false, egress: false });
    expect([...writer.namespaces].sort()).toEqual(["a", "b"]);

    const status = controller.status;
    expect(status.problems.map((p) => [p.policy, p.kind]).sort()).toEqual([
      ["a/icmp", "protocol"],
      ["b/bogus", "selector"],
      ["b/cidr", "cidr"],
    ]);
    expect(controller.skippedCounts()).toEqual({ protocol: 1, cidr: 1, selector: 1 });
    // Each pod names the skipped policies that might have selected it.
    expect(status.pods["a/db"]?.problems.map((p) => p.policy)).toEqual(["a/icmp"]);
    expect(status.pods["a/web"]?.problems).toEqual([]);
    expect(status.pods["b/other"]?.problems.map((p) => p.policy).sort()).toEqual(["b/bogus", "b/cidr"]);
    expect(warned.mock.calls.map(([m]) => m).sort()).toEqual([
      'network policy a/icmp skipped: spec.ingress[0].ports[0].protocol: "ICMP" is not TCP, UDP or SCTP',
      expect.stringMatching(/^network policy b\/bogus skipped: spec\.podSelector: .*Bogus/),
      'network policy b/cidr skipped: spec.egress[0].to[0].ipBlock.cidr: "10.0.0.0/33" is not a CIDR',
    ]);

    const metrics = new AgentMetrics("/nonexistent", "/nonexistent");
    metrics.watchPolicy(controller);
    const skipped = await metrics.registry.getSingleMetricAsString("netkit_cni_network_policies_skipped");
    expect(skipped).toMatch(/^netkit_cni_network_policies_skipped\{kind="protocol"\} 1$/m);
    expect(skipped).toMatch(/^netkit_cni_network_policies_skipped\{kind="cidr"\} 1$/m);
    expect(skipped).toMatch(/^netkit_cni_network_policies_skipped\{kind="selector"\} 1$/m);
    expect(skipped).toMatch(/^netkit_cni_network_policies_skipped\{kind="port"\} 0$/m);

    // A resync logs nothing again; the policy fixed, it isolates its pod and counts no more.
    warned.mockClear();
    controller.resync();
    await queue.idle();
    expect(warned).not.toHaveBeenCalled();
    policies.put(icmp("TCP"));
    await queue.idle();
    expect(writer.pods.get("a/db")).toMatchObject({ ingress: true, egress: false });
    expect(controller.status.pods["a/db"]?.problems).toEqual([]);
    expect(controller.skippedCounts()).toEqual({ cidr: 1, selector: 1 });
    expect(await metrics.registry.getSingleMetricAsString("netkit_cni_network_policies_skipped")).toMatch(
      /^netkit_cni_network_policies_skipped\{kind="protocol"\} 0$/m,
    );
  });

  it("denies a direction past the datapath's rule bound, fail closed, and reports it with the pod", async () => {
    const warned = vi.spyOn(agentLog, "warn").mockImplementation(() => {});
    vi.spyOn(agentLog, "info").mockImplementation(() => {});
    const { queue, pods, namespaces, policies, services, writer, controller } = setup();
    namespaces.list([t(namespaceObject(namespace("a")))]);
    pods.list([
      t(podObject(pod("a/many", { labels: { app: "many" }, ips: ["10.1.0.1"] }))),
      t(podObject(pod("a/closed", { labels: { app: "closed" }, ips: ["10.1.0.2"] }))),
      t(podObject(pod("a/fine", { labels: { app: "fine" }, ips: ["10.1.0.3"] }))),
    ]);
    // 65 rules of distinct ports merge into 65: one past the bound of 64.
    const rules = (n: number) => Array.from({ length: n }, (_, i) => ({ ports: [{ port: 1000 + 2 * i }] }));
    policies.list([
      t(
        networkPolicyObject(
          policy("a/many", {
            podSelector: { matchLabels: { app: "many" } },
            policyTypes: ["Egress"],
            egress: rules(65),
          }),
        ),
      ),
      t(
        networkPolicyObject(
          policy("a/closed", { podSelector: { matchLabels: { app: "closed" } }, policyTypes: ["Egress"] }),
        ),
      ),
      t(
        networkPolicyObject(
          policy("a/fine", {
            podSelector: { matchLabels: { app: "fine" } },
            policyTypes: ["Egress"],
            egress: rules(64),
          }),
        ),
      ),
    ]);
    services.list([]);
    await queue.idle();

    // Isolated for egress with no rules: the slot of a policy denying all egress.
    const many = writer.pods.get("a/many");
    expect(many).toMatchObject({ ingress: false, egress: true });
    expect(many?.slot).toBe(writer.pods.get("a/closed")?.slot);
    expect(writer.pods.get("a/fine")?.slot).not.toBe(many?.slot);
    const status = controller.status;
    expect(status.pods["a/many"]?.problems).toEqual([
      {
        policy: "a/many",
        kind: "rules-bound",
        reason: "egress: 65 rules after merging, the datapath holds 64; all egress denied",
        direction: "egress",
      },
    ]);
    expect(status.pods["a/fine"]?.problems).toEqual([]);
    expect(status.problems).toEqual([]); // every policy was read
    expect(controller.overBoundCounts()).toEqual([{ direction: "egress", kind: "rules-bound", pods: 1 }]);
    expect(warned.mock.calls.map(([m]) => m)).toEqual([
      "network policy: pod a/many: egress: 65 rules after merging, the datapath holds 64; all egress denied (a/many)",
    ]);

    const metrics = new AgentMetrics("/nonexistent", "/nonexistent");
    metrics.watchPolicy(controller);
    const over = await metrics.registry.getSingleMetricAsString("netkit_cni_network_policy_pods_over_bound");
    expect(over).toMatch(/^netkit_cni_network_policy_pods_over_bound\{direction="egress",kind="rules-bound"\} 1$/m);
    expect(over).toMatch(/^netkit_cni_network_policy_pods_over_bound\{direction="ingress",kind="rules-bound"\} 0$/m);

    // Logged once, not at every resync; back within the bound, counted no more.
    warned.mockClear();
    controller.resync();
    await queue.idle();
    expect(warned).not.toHaveBeenCalled();
    policies.put(
      t(
        networkPolicyObject(
          policy("a/many", {
            podSelector: { matchLabels: { app: "many" } },
            policyTypes: ["Egress"],
            egress: rules(2),
          }),
        ),
      ),
    );
    await queue.idle();
    expect(writer.pods.get("a/many")?.slot).not.toBe(writer.pods.get("a/closed")?.slot);
    expect(controller.status.pods["a/many"]?.problems).toEqual([]);
    expect(controller.overBoundCounts()).toEqual([]);
    expect(await metrics.registry.getSingleMetricAsString("netkit_cni_network_policy_pods_over_bound")).toMatch(
      /^netkit_cni_network_policy_pods_over_bound\{direction="egress",kind="rules-bound"\} 0$/m,
    );
  });
});
