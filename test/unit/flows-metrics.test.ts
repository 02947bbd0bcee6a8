/** netkit_cni_flows_total's bound on namespace pairs, and the records the datapath lost. */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { AgentMetrics } from "../../src/agent/metrics";
import { flowRecord } from "../support/flow-record";

const metricsWith = (pairs?: number) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkc-flow-metrics-"));
  return new AgentMetrics(dir, dir, pairs);
};

async function series(metrics: AgentMetrics, name: string): Promise<string[]> {
  const text = await metrics.registry.getSingleMetricAsString(name);
  return text.split("\n").filter((line) => line.startsWith(name));
}

describe("flow metrics", () => {
  it("count flows by the ends' namespaces, what is not a pod by its kind", async () => {
    const metrics = metricsWith();
    metrics.countFlow(flowRecord());
    metrics.countFlow(flowRecord());
    metrics.countFlow(
      flowRecord({
        verdict: "dropped",
        source: { ip: "203.0.113.9", port: 1, kind: "world" },
        destination: { ip: "10.96.0.10", port: 53, kind: "service", namespace: "kube-system", service: "dns" },
      }),
    );
    expect(await series(metrics, "netkit_cni_flows_total")).toEqual([
      'netkit_cni_flows_total{source_namespace="a",destination_namespace="b",verdict="forwarded"} 2',
      'netkit_cni_flows_total{source_namespace="world",destination_namespace="service",verdict="dropped"} 1',
    ]);
  });

  it("keep at most the bound's namespace pairs apart, the rest under other/other", async () => {
    const metrics = metricsWith(2);
    const between = (from: string, to: string) =>
      flowRecord({
        source: { ip: "10.0.0.5", port: 1, kind: "pod", namespace: from, pod: "p" },
        destination: { ip: "10.0.0.6", port: 2, kind: "pod", namespace: to, pod: "q" },
      });
    for (const [from, to] of [
      ["a", "b"],
      ["b", "a"],
      ["c", "d"],
      ["a", "b"],
      ["e", "f"],
    ] as const)
      metrics.countFlow(between(from, to));
    expect(await series(metrics, "netkit_cni_flows_total")).toEqual([
      'netkit_cni_flows_total{source_namespace="a",destination_namespace="b",verdict="forwarded"} 2',
      'netkit_cni_flows_total{source_namespace="b",destination_namespace="a",verdict="forwarded"} 1',
      'netkit_cni_flows_total{source_namespace="other",destination_namespace="other",verdict="forwarded"} 2',
    ]);
  });

  it("tell the records the datapath lost, as last set", async () => {
    const metrics = metricsWith();
    expect(await series(metrics, "netkit_cni_flow_records_lost_total")).toEqual([
      "netkit_cni_flow_records_lost_total 0",
    ]);
    metrics.setFlowRecordsLost(12);
    expect(await series(metrics, "netkit_cni_flow_records_lost_total")).toEqual([
      "netkit_cni_flow_records_lost_total 12",
    ]);
  });
});
