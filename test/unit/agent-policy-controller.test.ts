/**
 * The NetworkPolicy controller alone (src/agent/policy/controller.ts) with fake informers
 * and a recording writer: what a complete list makes of a cluster, that one change
 * writes only what it touches, and that what cannot be enforced as written (a policy it
 * cannot read, a pod past a datapath bound) is reported and counted, never stopping the
 * rest.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { serviceObject } from "../../src/agent/kube/objects";
import { WorkQueue } from "../../src/agent/kube/workqueue";
import { agentLog } from "../../src/agent/log";
import { AgentMetrics } from "../../src/agent/metrics";
import {
  type ClusterPolicySources,
  PolicyController,
  type PolicyWriter,
  podRules,
} from "../../src/agent/policy/controller";
import {
  clusterNetworkPolicyObject,
  type KeptClusterPolicy,
  type KeptPolicy,
  namespaceObject,
  networkPolicyObject,
  type PolicyNamespace,
  type PolicyNode,
  type PolicyPod,
  podObject,
} from "../../src/agent/policy/model/objects";
import type { PodEntry, SlotTiers } from "../../src/agent/policy/slots";
import type { ServiceObject } from "../../src/agent/services/plan";
import type { TableWrite } from "../../src/bpf/policy/tables";
import { FakeInformer } from "../support/fake-informer";
import { namespace, pod, policy } from "../support/policy-cluster";

class RecordingWriter implements PolicyWriter {
  readonly pods = new Map<string, { slot: number; ingress: boolean; egress: boolean }>();
  /** Each pod's entry as written: its stamp and whether it was denied whole. */
  readonly entries = new Map<string, PodEntry>();
  readonly namespaces = new Set<string>();
  readonly vips = new Set<string>();
  /** The tables' keys (hex) by slot, as the writes left them. */
  readonly tables = new Map<number, Set<string>>();
  /** Makes the next table writes fail, as a full map does. */
  failWrites: ((w: { peers: TableWrite[]; ports: TableWrite[] }) => boolean) | undefined;
  log: string[] = [];
  /** Each slot's tier masks, as written. */
  tiers = new Map<number, SlotTiers>();
  writeTiers(slot: number, tiers: SlotTiers) {
    if (tiers) this.tiers.set(slot, tiers);
    else this.tiers.delete(slot);
  }
  writeSlot(w: { peers: TableWrite[]; ports: TableWrite[] }) {
    if (this.failWrites?.(w)) throw Object.assign(new Error("no space left on device"), { code: "ENOSPC" });
    this.log.push(`slot ${w.peers.length}+${w.ports.length}`);
    for (const x of [...w.peers, ...w.ports]) {
      const slot = x.key.readUInt32LE(4);
      const keys = this.tables.get(slot) ?? new Set<string>();
      if (x.value) keys.add(x.key.toString("hex"));
      else keys.delete(x.key.toString("hex"));
      if (keys.size > 0) this.tables.set(slot, keys);
      else this.tables.delete(slot);
    }
  }
  setPod(p: string, entry: PodEntry) {
    this.pods.set(p, { slot: entry.slot, ...entry.isolated });
    this.entries.set(p, entry);
    this.log.push(`pod ${p} ${entry.slot}`);
  }
  /** Pods asked to be judged for their flow records (audit mode). */
  readonly watched = new Set<string>();
  setWatched(p: string, on: boolean) {
    if (on) this.watched.add(p);
    else this.watched.delete(p);
  }
  deletePod(p: string) {
    this.watched.delete(p);
    this.pods.delete(p);
    this.entries.delete(p);
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
  tableSlots() {
    return [...this.tables.keys()];
  }
  sweepSlots(keep: ReadonlySet<number>) {
    let slots = 0;
    let keys = 0;
    for (const [slot, set] of [...this.tables]) {
      if (keep.has(slot)) continue;
      slots += 1;
      keys += set.size;
      this.tables.delete(slot);
    }
    return { slots, keys };
  }
  reconcileNamespaces(wanted: Iterable<string>) {
    const want = new Set(wanted);
    const stale = [...this.namespaces].filter((ns) => !want.has(ns));
    for (const ns of stale) this.namespaces.delete(ns);
    return stale.length;
  }
  reconcileVips(wanted: Iterable<string>) {
    const want = new Set(wanted);
    const removed = [...this.vips].filter((ip) => !want.has(ip));
    const added = [...want].filter((ip) => !this.vips.has(ip));
    for (const ip of removed) this.vips.delete(ip);
    for (const ip of added) this.vips.add(ip);
    return { added: added.length, removed: removed.length };
  }
}

const t = <T>(x: { key: string; object: T } | undefined) => {
  if (!x) throw new Error("transform refused it");
  return x.object;
};

function setup(writer = new RecordingWriter(), failed: string[] = [], cluster?: ClusterPolicySources) {
  const queue = new WorkQueue({
    failed: (k, n, e) => (failed ? failed.push(`${k} ${n}: ${e.message}`) : console.log(k, n, e)),
  });
  const pods = new FakeInformer<PolicyPod>((p) => `${p.namespace}/${p.name}`);
  const namespaces = new FakeInformer<PolicyNamespace>((n) => n.name);
  const policies = new FakeInformer<KeptPolicy>((p) => `${p.namespace}/${p.name}`);
  const services = new FakeInformer<ServiceObject>((s) => `${s.metadata?.namespace}/${s.metadata?.name}`);
  const controller = new PolicyController(queue, pods, namespaces, policies, services, "n1", writer, {}, cluster);
  return { queue, pods, namespaces, policies, services, writer, controller, failed };
}

/** Namespace a with pods web (10.1.0.1) and db, web admitting b's pods; b with one client. */
function smallCluster(s: ReturnType<typeof setup>) {
  s.namespaces.list([t(namespaceObject(namespace("a"))), t(namespaceObject(namespace("b")))]);
  s.pods.list([
    t(podObject(pod("a/web", { labels: { app: "web" }, ips: ["10.1.0.1"] }))),
    t(podObject(pod("a/db", { labels: { app: "db" }, ips: ["10.1.0.2"] }))),
    t(podObject(pod("b/client", { labels: { app: "client" }, ips: ["10.1.0.9"] }))),
  ]);
  s.policies.list([t(networkPolicyObject(webFromB))]);
  s.services.list([t(serviceObject({ metadata: { namespace: "a", name: "s" }, spec: { clusterIP: "10.96.0.1" } }))]);
}

const webFromB = policy("a/web", {
  podSelector: { matchLabels: { app: "web" } },
  ingress: [{ from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "b" } } }] }],
});

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

  it("isolates with the policies it cannot read, allowing nothing by them; reports, counts and enforces the rest", async () => {
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

    // The readable policy applies; each unreadable one isolates what it selects, allowing
    // nothing: a/icmp a/db's ingress, b/cidr b/other's egress (its policyTypes defaulted
    // from its egress rules), b/bogus (selector unreadable: all of b) b's ingress.
    expect(controller.status.synced).toBe(true);
    expect(writer.pods.get("a/web")).toMatchObject({ ingress: true, egress: false });
    expect(writer.pods.get("a/db")).toMatchObject({ ingress: true, egress: false });
    expect(writer.pods.get("b/other")).toMatchObject({ ingress: true, egress: true });
    expect(controller.status.pods["b/other"]?.selectedBy).toEqual(["b/bogus", "b/cidr"]);
    expect([...writer.namespaces].sort()).toEqual(["a", "b"]);

    const status = controller.status;
    expect(status.problems.map((p) => [p.policy, p.kind]).sort()).toEqual([
      ["a/icmp", "protocol"],
      ["b/bogus", "selector"],
      ["b/cidr", "cidr"],
    ]);
    expect(controller.unreadableCounts()).toEqual({ protocol: 1, cidr: 1, selector: 1 });
    // Each pod names the unreadable policies that select it.
    expect(status.pods["a/db"]?.problems.map((p) => p.policy)).toEqual(["a/icmp"]);
    expect(status.pods["a/web"]?.problems).toEqual([]);
    expect(status.pods["b/other"]?.problems.map((p) => p.policy).sort()).toEqual(["b/bogus", "b/cidr"]);
    expect(warned.mock.calls.map(([m]) => m).sort()).toEqual([
      'network policy a/icmp unreadable, isolates what it selects: spec.ingress[0].ports[0].protocol: "ICMP" is not TCP, UDP or SCTP',
      expect.stringMatching(
        /^network policy b\/bogus unreadable, isolates what it selects: spec\.podSelector: .*Bogus/,
      ),
      'network policy b/cidr unreadable, isolates what it selects: spec.egress[0].to[0].ipBlock.cidr: "10.0.0.0/33" is not a CIDR',
    ]);

    const metrics = new AgentMetrics("/nonexistent", "/nonexistent");
    metrics.watchPolicy(controller);
    const skipped = await metrics.registry.getSingleMetricAsString("netkit_cni_network_policies_unreadable");
    expect(skipped).toMatch(/^netkit_cni_network_policies_unreadable\{kind="protocol"\} 1$/m);
    expect(skipped).toMatch(/^netkit_cni_network_policies_unreadable\{kind="cidr"\} 1$/m);
    expect(skipped).toMatch(/^netkit_cni_network_policies_unreadable\{kind="selector"\} 1$/m);
    expect(skipped).toMatch(/^netkit_cni_network_policies_unreadable\{kind="port"\} 0$/m);

    // A resync logs nothing again; the policy fixed, it isolates its pod and counts no more.
    warned.mockClear();
    controller.resync();
    await queue.idle();
    expect(warned).not.toHaveBeenCalled();
    policies.put(icmp("TCP"));
    await queue.idle();
    expect(writer.pods.get("a/db")).toMatchObject({ ingress: true, egress: false });
    expect(controller.status.pods["a/db"]?.problems).toEqual([]);
    expect(controller.unreadableCounts()).toEqual({ cidr: 1, selector: 1 });
    expect(await metrics.registry.getSingleMetricAsString("netkit_cni_network_policies_unreadable")).toMatch(
      /^netkit_cni_network_policies_unreadable\{kind="protocol"\} 0$/m,
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

describe("the NetworkPolicy controller on the second day", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("after a restart, places every pod on a slot of its own run and sweeps what the previous run left", async () => {
    const infos: string[] = [];
    vi.spyOn(agentLog, "info").mockImplementation((m: string) => {
      infos.push(m);
    });
    // A previous run: web on slot 1, a pod since deleted on slot 2, marks and ClusterIPs
    // of objects deleted while no agent ran.
    const before = new RecordingWriter();
    const previous = setup(before);
    smallCluster(previous);
    previous.pods.put(t(podObject(pod("a/gone", { labels: { app: "web" }, ips: ["10.1.0.5"] }))));
    previous.policies.put(
      t(networkPolicyObject(policy("a/gone-only", { podSelector: { matchLabels: { app: "none" } } }))),
    );
    await previous.queue.idle();
    const oldSlots = new Set(before.tableSlots());
    expect(oldSlots.size).toBeGreaterThan(0);
    const oldStamp = before.entries.get("a/web")?.stamp ?? 0n;
    // What the kernel keeps when that agent stops: tables, entries, marks, ClusterIPs.
    const kernel = new RecordingWriter();
    for (const [slot, keys] of before.tables) kernel.tables.set(slot, new Set(keys));
    for (const [p, e] of before.entries) kernel.setPod(p, e);
    kernel.setNamespace("a", true);
    kernel.setNamespace("deleted-meanwhile", true);
    kernel.setVips(["10.96.0.1", "10.96.9.9"], []);

    // The new run: a/gone was deleted, and so was a/gone-only, while no agent ran.
    const after = setup(kernel);
    smallCluster(after);
    await after.queue.idle();
    const web = kernel.entries.get("a/web");
    expect(web?.slot).toBeGreaterThan(Math.max(...oldSlots));
    expect(web?.stamp).toBeGreaterThan(oldStamp);
    expect(kernel.pods.has("a/gone")).toBe(false);
    // Only this run's slots are left in the tables.
    expect(new Set(kernel.tableSlots())).toEqual(new Set([web?.slot]));
    expect([...kernel.namespaces]).toEqual(["a"]);
    expect([...kernel.vips]).toEqual(["10.96.0.1"]);
    expect(infos).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^network policy: removed \d+ stale entries of \d+ slots$/),
        "network policy: removed 1 stale namespace marks",
        "network policy: removed 1 stale Service ClusterIPs",
      ]),
    );
  });

  it("gives a pod a new stamp when its slot's peers change or it moves to another slot, and keeps it otherwise", async () => {
    const s = setup();
    smallCluster(s);
    await s.queue.idle();
    const first = s.writer.entries.get("a/web")?.stamp ?? 0n;
    expect(first).toBeGreaterThan(0n);
    s.controller.resync();
    await s.queue.idle();
    expect(s.writer.entries.get("a/web")?.stamp).toBe(first);
    // A client leaves b: web's peers lose its address, in place; the verdicts it made go.
    s.pods.remove("b/client");
    await s.queue.idle();
    const second = s.writer.entries.get("a/web")?.stamp ?? 0n;
    expect(second).toBeGreaterThan(first);
    // The rules change: another slot, another stamp.
    s.policies.put(
      t(
        networkPolicyObject(
          policy("a/web", { podSelector: { matchLabels: { app: "web" } }, ingress: [{ ports: [{ port: 80 }] }] }),
        ),
      ),
    );
    await s.queue.idle();
    expect(s.writer.entries.get("a/web")?.stamp).toBeGreaterThan(second);
  });

  it("denies a pod whose policy does not fit the maps, reports and counts it, and writes it once it fits", async () => {
    const warned: string[] = [];
    vi.spyOn(agentLog, "warn").mockImplementation((m: string) => {
      warned.push(m);
    });
    vi.spyOn(agentLog, "info").mockImplementation(() => {});
    const s = setup();
    smallCluster(s);
    await s.queue.idle();
    // The port-prefix map is full: the next slot that needs a port cannot be written.
    s.writer.failWrites = (w) => w.ports.some((x) => x.value !== undefined);
    s.policies.put(
      t(
        networkPolicyObject(
          policy("a/db", { podSelector: { matchLabels: { app: "db" } }, ingress: [{ ports: [{ port: 5432 }] }] }),
        ),
      ),
    );
    await s.queue.idle();
    expect(s.writer.entries.get("a/db")).toMatchObject({
      slot: 0,
      incomplete: true,
      isolated: { ingress: true, egress: false },
    });
    const status = s.controller.status.pods["a/db"];
    expect(status?.problems).toEqual([
      expect.objectContaining({ kind: "incomplete", direction: "ingress", policy: "a/db" }),
    ]);
    expect(status?.problems[0]?.reason).toMatch(/^ingress: not written in full \(.*no space left on device\)/);
    expect(s.controller.incompleteCounts()).toEqual([{ direction: "ingress", kind: "incomplete", pods: 1 }]);
    expect(warned.some((m) => m.startsWith("network policy: pod a/db: ingress: not written in full"))).toBe(true);
    expect(s.failed.some((f) => f.includes("a/db"))).toBe(true);
    const metrics = new AgentMetrics("/nonexistent", "/nonexistent");
    metrics.watchPolicy(s.controller);
    expect(await metrics.registry.getSingleMetricAsString("netkit_cni_network_policy_pods_incomplete")).toMatch(
      /^netkit_cni_network_policy_pods_incomplete\{direction="ingress"\} 1$/m,
    );
    // Web, already written, keeps its policy.
    expect(s.writer.entries.get("a/web")?.incomplete).toBeUndefined();
    // Room again: the retry writes it whole.
    s.writer.failWrites = undefined;
    await vi.waitFor(() => expect(s.writer.entries.get("a/db")?.slot).toBeGreaterThan(0), { timeout: 5000 });
    expect(s.writer.entries.get("a/db")?.incomplete).toBeUndefined();
    expect(s.controller.status.pods["a/db"]?.problems).toEqual([]);
    expect(s.controller.incompleteCounts()).toEqual([]);
  });

  it("denies every pod of a shared slot whose peers cannot be rewritten, and retries each", async () => {
    vi.spyOn(agentLog, "warn").mockImplementation(() => {});
    vi.spyOn(agentLog, "info").mockImplementation(() => {});
    const s = setup();
    smallCluster(s);
    s.pods.put(t(podObject(pod("a/web-2", { labels: { app: "web" }, ips: ["10.1.0.3"] }))));
    await s.queue.idle();
    const shared = s.writer.entries.get("a/web")?.slot;
    expect(s.writer.entries.get("a/web-2")?.slot).toBe(shared);
    // A new client in b needs a new peer, and the peers map is full.
    s.writer.failWrites = (w) => w.peers.some((x) => x.value !== undefined);
    s.pods.put(t(podObject(pod("b/client-2", { labels: { app: "client" }, ips: ["10.1.0.10"] }))));
    await s.queue.idle();
    for (const p of ["a/web", "a/web-2"]) {
      expect(s.writer.entries.get(p)).toMatchObject({ slot: 0, incomplete: true });
      expect(s.controller.status.pods[p]?.problems.map((x) => x.kind)).toEqual(["incomplete"]);
    }
    expect(s.writer.tables.has(shared ?? -1)).toBe(false);
    s.writer.failWrites = undefined;
    await vi.waitFor(
      () => {
        for (const p of ["a/web", "a/web-2"]) expect(s.writer.entries.get(p)?.incomplete).toBeUndefined();
      },
      { timeout: 5000 },
    );
    expect(s.writer.entries.get("a/web")?.slot).toBe(s.writer.entries.get("a/web-2")?.slot);
    expect(s.writer.entries.get("a/web")?.slot).not.toBe(shared);
  });
});

describe("podRules: a compiled policy's bits as the programs read them", () => {
  const rule = (origin: string, port: number) => ({
    origin,
    peers: [{ cidr: "10.0.0.0/8", except: [] }],
    ports: [{ protocol: "TCP" as const, from: port, to: port }],
  });
  const tier = (origin: string, port: number, action: "Accept" | "Deny" | "Pass") => ({
    ...rule(origin, port),
    action,
    policy: origin,
    rule: origin,
  });

  it("Admin rules first in precedence order, NetworkPolicy's next, Baseline's last; masks say which is which", () => {
    const out = podRules({
      ingress: {
        admin: [tier("a0", 1, "Deny"), tier("a1", 2, "Pass")],
        rules: [rule("n0", 3)],
        baseline: [tier("b0", 4, "Accept"), tier("b1", 5, "Deny")],
      },
    });
    expect(out.origins.ingress).toEqual([
      "a0/a0 (Admin Deny)",
      "a1/a1 (Admin Pass)",
      "n0",
      "b0/b0 (Baseline Accept)",
      "b1/b1 (Baseline Deny)",
    ]);
    expect(out.ingress?.map((r) => (r.ports === "any" ? 0 : r.ports[0]?.from))).toEqual([1, 2, 3, 4, 5]);
    expect(out.tiers).toEqual({
      ingress: { admin: 0b11n, baseline: 0b11000n, deny: 0b10001n, pass: 0b10n, networkPolicy: true },
      egress: undefined,
    });
  });

  it("a direction no NetworkPolicy isolates says so; NetworkPolicy alone has no masks", () => {
    const out = podRules({
      egress: { rules: [], unisolated: true, baseline: [tier("b0", 4, "Deny")] },
      ingress: { rules: [rule("n0", 3)] },
    });
    expect(out.tiers?.egress).toEqual({ admin: 0n, baseline: 1n, deny: 1n, pass: 0n, networkPolicy: false });
    expect(out.tiers?.ingress).toBeUndefined();
    expect(podRules({ ingress: { rules: [rule("n0", 3)] } }).tiers).toBeUndefined();
  });
});

describe("the policy controller with ClusterNetworkPolicy", () => {
  const cnp = (name: string, spec: Record<string, unknown>) =>
    t(clusterNetworkPolicyObject({ metadata: { name, generation: 2 }, spec }));

  function clusterSetup() {
    const clusterPolicies = new FakeInformer<KeptClusterPolicy>((p) => p.name);
    const nodes = new FakeInformer<PolicyNode>((n) => n.name);
    const reports: { name: string; generation?: number; problems: unknown[] }[][] = [];
    const s = setup(new RecordingWriter(), [], {
      policies: clusterPolicies,
      nodes,
      version: () => (clusterPolicies.size > 0 ? "v1alpha2" : undefined),
      report: (r) => reports.push(r),
    });
    return { ...s, clusterPolicies, nodes, reports };
  }

  it("waits for the ClusterNetworkPolicies' list, then writes a subject's tiers and marks the namespaces it covers", async () => {
    const s = clusterSetup();
    s.namespaces.list([
      t(namespaceObject(namespace("a", { tenant: "a" }))),
      t(namespaceObject(namespace("b", { tenant: "b" }))),
      t(namespaceObject(namespace("c", { tenant: "c" }))),
    ]);
    s.pods.list([
      t(podObject(pod("a/web", { labels: { app: "web" }, ips: ["10.1.0.1"] }))),
      t(podObject(pod("b/client", { labels: { app: "client" }, ips: ["10.1.0.9"] }))),
      t(podObject(pod("c/other", { labels: { app: "other" }, ips: ["10.1.0.7"] }))),
    ]);
    s.policies.list([]);
    s.services.list([]);
    s.nodes.list([]);
    await s.queue.idle();
    expect(s.controller.status.synced).toBe(false); // the ClusterNetworkPolicies are not known yet
    s.clusterPolicies.list([
      cnp("no-b-into-a", {
        tier: "Admin",
        priority: 5,
        subject: { namespaces: { matchLabels: { tenant: "a" } } },
        ingress: [{ name: "deny-b", action: "Deny", from: [{ namespaces: { matchLabels: { tenant: "b" } } }] }],
      }),
    ]);
    await s.queue.idle();
    expect(s.controller.status.synced).toBe(true);
    const web = s.writer.pods.get("a/web");
    expect(web).toMatchObject({ ingress: true, egress: false });
    expect(s.writer.tiers.get(web?.slot ?? -1)).toEqual({
      ingress: { admin: 1n, baseline: 0n, deny: 1n, pass: 0n, networkPolicy: false },
      egress: undefined,
    });
    expect(s.writer.pods.has("b/client")).toBe(false); // no subject selects it, b has no policy
    expect(s.writer.pods.has("c/other")).toBe(false);
    expect([...s.writer.namespaces]).toEqual(["a"]); // ADD of a pod of a waits for its verdict
    const status = s.controller.status;
    expect(status.pods["a/web"]?.clusterSelectedBy).toEqual(["no-b-into-a"]);
    expect(status.pods["a/web"]?.rules?.ingress).toEqual(["no-b-into-a/deny-b (Admin Deny)"]);
    expect(status.clusterNetworkPolicy).toEqual({
      version: "v1alpha2",
      policies: [{ name: "no-b-into-a", tier: "Admin", priority: 5, localPods: 1, problems: [] }],
    });
    expect(s.reports.at(-1)).toEqual([{ name: "no-b-into-a", generation: 2, problems: [] }]);

    // Namespace c comes under the subject by a label: marked, and its pod judged like a's.
    s.namespaces.put(t(namespaceObject(namespace("c", { tenant: "a" }))));
    await s.queue.idle();
    expect([...s.writer.namespaces].sort()).toEqual(["a", "c"]);
    expect(s.writer.pods.get("c/other")).toMatchObject({ ingress: true, slot: web?.slot });

    // The policy goes: nothing judged, nothing marked, its slot's tiers gone.
    s.clusterPolicies.remove("no-b-into-a");
    await s.queue.idle();
    expect(s.writer.pods.has("a/web")).toBe(false);
    expect(s.writer.pods.has("c/other")).toBe(false);
    expect(s.writer.namespaces.size).toBe(0);
    expect(s.writer.tiers.size).toBe(0);
    expect(s.reports.at(-1)).toEqual([]);
    expect(s.controller.clusterCounts().byTier).toEqual({ Admin: 0, Baseline: 0 });
  });

  it("reports what it could not read, and counts it", async () => {
    vi.spyOn(agentLog, "warn").mockImplementation(() => {});
    const s = clusterSetup();
    s.namespaces.list([t(namespaceObject(namespace("a")))]);
    s.pods.list([t(podObject(pod("a/web", { labels: { app: "web" }, ips: ["10.1.0.1"] })))]);
    for (const i of [s.policies, s.services, s.nodes]) i.list([]);
    s.clusterPolicies.list([
      cnp("dns-only", {
        tier: "Baseline",
        priority: 1,
        subject: { namespaces: {} },
        egress: [{ action: "Accept", to: [{ domainNames: ["example.com"] }] }],
      }),
    ]);
    await s.queue.idle();
    const [summary] = s.controller.status.clusterNetworkPolicy?.policies ?? [];
    expect(summary?.problems.map((p) => p.kind)).toEqual(["domain-names"]);
    expect(s.controller.clusterCounts()).toEqual({
      byTier: { Admin: 0, Baseline: 1 },
      unreadable: { "domain-names": 1 },
    });
    expect(s.reports.at(-1)?.[0]?.problems).toHaveLength(1);
  });
});
