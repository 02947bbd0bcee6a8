/**
 * The agent's plan of the Service tables (src/agent/services/plan.ts): kube-proxy's rules
 * for which ClusterIP ports are served and by which endpoints, read from plain objects.
 */
import type { V1EndpointSlice, V1Service } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { planServices } from "../../src/agent/services/plan";

const svc = (name: string, spec: Record<string, unknown>, namespace = "ns"): V1Service =>
  ({ metadata: { name, namespace }, spec }) as V1Service;
const slice = (svcName: string, body: Record<string, unknown>, namespace = "ns"): V1EndpointSlice =>
  ({
    metadata: { name: `${svcName}-x`, namespace, labels: { "kubernetes.io/service-name": svcName } },
    ...body,
  }) as unknown as V1EndpointSlice;
const text = (plan: ReturnType<typeof planServices>) =>
  plan.entries.map(
    (e) =>
      `${e.frontend.ip}:${e.frontend.port}/${e.frontend.protocol} -> ${e.backends.map((b) => `${b.ip}:${b.port}`).join(",")}${e.affinitySeconds ? ` ~${e.affinitySeconds}` : ""}`,
  );

describe("planServices", () => {
  it("serves every ClusterIP of a dual-stack Service from the slices of its family, by port name", () => {
    const plan = planServices(
      [
        svc("web", {
          clusterIPs: ["10.96.0.1", "fd00::1"],
          ports: [
            { name: "http", port: 80, protocol: "TCP", targetPort: "web" },
            { name: "dns", port: 53, protocol: "UDP" },
          ],
        }),
      ],
      [
        slice("web", {
          addressType: "IPv4",
          ports: [
            { name: "http", port: 8080, protocol: "TCP" },
            { name: "dns", port: 5353, protocol: "UDP" },
          ],
          endpoints: [
            { addresses: ["10.1.0.1", "10.1.0.99"] },
            { addresses: ["10.1.0.2"], conditions: { ready: true } },
          ],
        }),
        slice("web", {
          addressType: "IPv6",
          ports: [{ name: "http", port: 8081, protocol: "TCP" }],
          endpoints: [{ addresses: ["fd01::1"] }],
        }),
        // Another namespace's slice of a Service of the same name: not ours.
        slice(
          "web",
          {
            addressType: "IPv4",
            ports: [{ name: "http", port: 1, protocol: "TCP" }],
            endpoints: [{ addresses: ["10.9.9.9"] }],
          },
          "other",
        ),
      ],
      "n1",
    );
    expect(text(plan)).toEqual([
      "10.96.0.1:80/TCP -> 10.1.0.1:8080,10.1.0.2:8080",
      "10.96.0.1:53/UDP -> 10.1.0.1:5353,10.1.0.2:5353",
      "fd00::1:80/TCP -> fd01::1:8081",
      "fd00::1:53/UDP -> ",
    ]);
  });

  it("falls back to serving, terminating endpoints only when none is ready", () => {
    const ports = [{ port: 80, protocol: "TCP" }];
    const eps = (ready: boolean) => [
      { addresses: ["10.1.0.1"], conditions: { ready: false, serving: true, terminating: true } },
      { addresses: ["10.1.0.2"], conditions: { ready, serving: ready, terminating: false } },
      { addresses: ["10.1.0.3"], conditions: { ready: false, serving: false, terminating: true } },
    ];
    const s = svc("a", { clusterIP: "10.96.0.2", ports: [{ port: 80 }] });
    expect(text(planServices([s], [slice("a", { addressType: "IPv4", ports, endpoints: eps(true) })], "n"))).toEqual([
      "10.96.0.2:80/TCP -> 10.1.0.2:80",
    ]);
    expect(text(planServices([s], [slice("a", { addressType: "IPv4", ports, endpoints: eps(false) })], "n"))).toEqual([
      "10.96.0.2:80/TCP -> 10.1.0.1:80",
    ]);
  });

  it("keeps only this node's endpoints for internalTrafficPolicy Local, and ClientIP affinity's timeout", () => {
    const plan = planServices(
      [
        svc("l", {
          clusterIP: "10.96.0.3",
          ports: [{ port: 80 }],
          internalTrafficPolicy: "Local",
          sessionAffinity: "ClientIP",
        }),
        svc("t", {
          clusterIP: "10.96.0.4",
          ports: [{ port: 80 }],
          sessionAffinity: "ClientIP",
          sessionAffinityConfig: { clientIP: { timeoutSeconds: 99999999 } },
        }),
      ],
      [
        slice("l", {
          addressType: "IPv4",
          ports: [{ port: 80, protocol: "TCP" }],
          endpoints: [
            { addresses: ["10.1.0.1"], nodeName: "n1" },
            { addresses: ["10.1.0.2"], nodeName: "n2" },
          ],
        }),
      ],
      "n1",
    );
    expect(text(plan)).toEqual(["10.96.0.3:80/TCP -> 10.1.0.1:80 ~10800", "10.96.0.4:80/TCP ->  ~10800"]);
    expect(plan.skipped.affinity).toBe(1);
  });

  it("skips and counts what it cannot read, and serves nothing for ExternalName and headless Services", () => {
    const plan = planServices(
      [
        svc("ext", { type: "ExternalName", externalName: "x.example", ports: [{ port: 80 }] }),
        svc("headless", { clusterIP: "None", ports: [{ port: 80 }] }),
        svc("bad", {
          clusterIPs: ["10.96.0.5", "not-an-ip"],
          ports: [{ port: 9, protocol: "SCTP" }, { protocol: "TCP" }, { port: 70000 }, { port: 81 }],
        }),
        { metadata: { name: "nospec" } } as V1Service,
      ],
      [
        slice("bad", {
          addressType: "IPv4",
          ports: [{ port: 81, protocol: "TCP" }],
          endpoints: [{ addresses: ["fd00::1"] }, { addresses: [] }, { addresses: ["10.1.0.8"] }],
        }),
      ],
      "n",
    );
    expect(text(plan)).toEqual(["10.96.0.5:81/TCP -> 10.1.0.8:81"]);
    expect(plan.skipped).toEqual({ protocol: 1, port: 2, address: 3, affinity: 0 });
  });
});
