/**
 * The NetworkPolicy controller alone (src/agent/controllers/policy.ts) with fake informers
 * and a recording writer: what a complete list makes of a cluster, and that one change
 * writes only what it touches.
 */
import { describe, expect, it } from "vitest";
import { PolicyController, type PolicyWriter } from "../../src/agent/controllers/policy";
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
});
