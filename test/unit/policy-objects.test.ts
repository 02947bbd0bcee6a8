/**
 * What the policy index keeps of Pods, Namespaces and NetworkPolicies
 * (src/agent/policy/model/objects.ts): the fields the compiler reads, well-formed,
 * canonical.
 */
import { describe, expect, it } from "vitest";
import { namespaceObject, networkPolicyObject, podObject } from "../../src/agent/policy/model/objects";

describe("a Pod as the policy index keeps it", () => {
  it("keeps labels, canonical addresses, node, hostNetwork and every container's named ports", () => {
    const kept = podObject({
      metadata: { namespace: "x", name: "a", labels: { pod: "a", n: 1 }, annotations: { big: "..." } },
      spec: {
        nodeName: "n1",
        containers: [
          {
            name: "web",
            ports: [
              { name: "http", containerPort: 80 },
              { containerPort: 81 },
              { name: "dns", containerPort: 53, protocol: "UDP" },
            ],
          },
          {
            name: "side",
            ports: [
              { name: "metrics", containerPort: 9090, protocol: "TCP" },
              { name: "bad", containerPort: 0 },
            ],
          },
        ],
        initContainers: [
          { name: "proxy", restartPolicy: "Always", ports: [{ name: "proxy", containerPort: 15001 }] },
          { name: "setup", ports: [{ name: "setup", containerPort: 7000 }] },
        ],
      },
      status: {
        phase: "Running",
        podIP: "10.0.0.1",
        podIPs: [{ ip: "10.0.0.1" }, { ip: "FD00:0:0::0001" }, { ip: "10.0.0.1" }, { ip: "nonsense" }],
        conditions: [{ type: "Ready" }],
      },
    });
    expect(kept).toEqual({
      key: "x/a",
      object: {
        namespace: "x",
        name: "a",
        labels: { pod: "a" },
        ips: ["10.0.0.1", "fd00::1"],
        nodeName: "n1",
        hostNetwork: false,
        ports: [
          { name: "dns", port: 53, protocol: "UDP" },
          { name: "http", port: 80, protocol: "TCP" },
          { name: "metrics", port: 9090, protocol: "TCP" },
          { name: "proxy", port: 15001, protocol: "TCP" },
        ],
      },
    });
  });

  it("marks finished pods, reads the older single podIP, and skips objects without a name", () => {
    const done = podObject({
      metadata: { namespace: "x", name: "j" },
      spec: { hostNetwork: true },
      status: { phase: "Failed", podIP: "10.0.0.9" },
    });
    expect(done?.object).toEqual({
      namespace: "x",
      name: "j",
      labels: {},
      ips: ["10.0.0.9"],
      hostNetwork: true,
      ports: [],
      terminal: true,
    });
    expect(
      podObject({ metadata: { namespace: "x", name: "p" }, status: { phase: "Succeeded" } })?.object.terminal,
    ).toBe(true);
    expect(
      podObject({ metadata: { namespace: "x", name: "p" }, status: { phase: "Pending" } })?.object,
    ).not.toHaveProperty("terminal");
    expect(podObject({ metadata: { name: "no-namespace" } })).toBeUndefined();
    expect(podObject(null)).toBeUndefined();
  });

  it("shares one copy of label sets that repeat", () => {
    const replica = (name: string) =>
      podObject({ metadata: { namespace: "x", name, labels: { app: "web", tier: "f" } } });
    expect(replica("r1")?.object.labels).toBe(replica("r2")?.object.labels);
  });
});

describe("a Namespace and a NetworkPolicy as the policy index keeps them", () => {
  it("keeps a namespace's name and labels", () => {
    expect(namespaceObject({ metadata: { name: "x", labels: { "kubernetes.io/metadata.name": "x" } } })).toEqual({
      key: "x",
      object: { name: "x", labels: { "kubernetes.io/metadata.name": "x" } },
    });
    expect(namespaceObject({ metadata: {} })).toBeUndefined();
  });

  it("keeps a policy's spec as written, for the compiler to check, and nothing else", () => {
    const spec = { podSelector: {}, policyTypes: ["Ingress"], ingress: [{ from: [{ future: true }] }], status: "x" };
    expect(
      networkPolicyObject({ metadata: { namespace: "x", name: "p", managedFields: [{}] }, spec, status: {} }),
    ).toEqual({
      key: "x/p",
      object: {
        namespace: "x",
        name: "p",
        spec: { podSelector: {}, policyTypes: ["Ingress"], ingress: [{ from: [{ future: true }] }] },
      },
    });
    expect(networkPolicyObject({ metadata: { name: "cluster-scoped?" } })).toBeUndefined();
  });
});
