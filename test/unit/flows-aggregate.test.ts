/** Flow aggregates: keys without addresses, windows that close, late records, and the bound on keys. */
import { describe, expect, it } from "vitest";
import { endLabel, FlowAggregator } from "../../src/agent/flows/aggregate";
import type { FlowRecord } from "../../src/flows/record";
import { flowRecord } from "../support/flow-record";

const at = (time: string, over: Partial<FlowRecord> = {}) => flowRecord({ time, ...over });
const T0 = Date.parse("2026-12-06T10:00:00.000Z");

describe("FlowAggregator", () => {
  it("names ends without their addresses", () => {
    expect(endLabel({ ip: "10.0.0.5", port: 1, kind: "pod", namespace: "a", pod: "client" })).toBe("a/client");
    expect(endLabel({ ip: "203.0.113.9", port: 1, kind: "world" })).toBe("world");
    expect(endLabel({ ip: "192.168.1.2", port: 1, kind: "node", node: "node-b" })).toBe("node:node-b");
    expect(endLabel({ ip: "10.96.0.10", port: 53, kind: "service", namespace: "kube-system", service: "dns" })).toBe(
      "service:kube-system/dns",
    );
  });

  it("counts flows per key and window, and gives a window only once it has closed", () => {
    const agg = new FlowAggregator({ windowMs: 60_000 });
    agg.add(at("2026-12-06T10:00:01.000Z"));
    // Another source port and address of the same pods: the same key.
    agg.add(
      at("2026-12-06T10:00:30.000Z", {
        source: { ip: "10.0.0.6", port: 5, kind: "pod", namespace: "a", pod: "client" },
      }),
    );
    agg.add(at("2026-12-06T10:00:31.000Z", { verdict: "dropped", policy: "default deny" }));
    agg.add(at("2026-12-06T10:01:05.000Z"));
    expect(agg.flush(T0 + 59_999)).toEqual([]);
    expect(agg.flush(T0 + 60_000)).toEqual([
      {
        start: "2026-12-06T10:00:00.000Z",
        end: "2026-12-06T10:01:00.000Z",
        source: "a/client",
        destination: "b/server",
        destinationPort: 80,
        protocol: "TCP",
        verdict: "forwarded",
        policy: "b/allow-a ingress rule 0",
        flows: 2,
      },
      expect.objectContaining({ verdict: "dropped", policy: "default deny", flows: 1 }),
    ]);
    expect(agg.flush(T0 + 60_000)).toEqual([]);
    expect(agg.flush(T0 + 120_000)).toEqual([expect.objectContaining({ start: "2026-12-06T10:01:00.000Z", flows: 1 })]);
  });

  it("counts a record whose window was flushed in the first one still open", () => {
    const agg = new FlowAggregator({ windowMs: 60_000 });
    agg.flush(T0 + 90_000);
    agg.add(at("2026-12-06T10:00:10.000Z"));
    expect(agg.flush(T0 + 120_000)).toEqual([expect.objectContaining({ start: "2026-12-06T10:01:00.000Z", flows: 1 })]);
  });

  it("counts what passes a window's bound on keys under an overflow aggregate per verdict", () => {
    const agg = new FlowAggregator({ maxKeys: 2 });
    for (let port = 1; port <= 5; port++)
      agg.add(
        at("2026-12-06T10:00:01.000Z", {
          destination: { ip: "10.0.1.7", port, kind: "pod", namespace: "b", pod: "server" },
        }),
      );
    agg.add(at("2026-12-06T10:00:02.000Z", { verdict: "dropped" }));
    // A key already held still counts as itself.
    agg.add(
      at("2026-12-06T10:00:03.000Z", {
        destination: { ip: "10.0.1.7", port: 1, kind: "pod", namespace: "b", pod: "server" },
      }),
    );
    const rows = agg.flush(T0 + 60_000);
    expect(rows.map((r) => [r.destinationPort, r.verdict, r.flows, r.overflow])).toEqual([
      [0, "forwarded", 3, true],
      [1, "forwarded", 2, undefined],
      [2, "forwarded", 1, undefined],
      [0, "dropped", 1, true],
    ]);
    expect(rows[0]).toMatchObject({ source: "other", destination: "other", protocol: "other", policy: "other" });
    // Packets and bytes are not counted by the datapath: never made up.
    expect(rows.every((r) => r.packetsSent === undefined && r.bytesReceived === undefined)).toBe(true);
  });
});
