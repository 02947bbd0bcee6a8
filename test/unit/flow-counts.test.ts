/** Flow counts: what grew between two reads of the tables, which flows ended, and their records. */
import { describe, expect, it } from "vitest";
import { FlowAggregator } from "../../src/agent/flows/aggregate";
import { type CountedContext, countedRecordOf, flowIdentity } from "../../src/agent/flows/counted-record";
import { FlowEnds } from "../../src/agent/flows/flow-ends";
import type { CountedFlow } from "../../src/bpf/index";
import { AF_INET } from "../../src/cni/address";
import { flowRecord } from "../support/flow-record";

const S = 1_000_000_000n;
const POD = 7; // the subject's host ifindex

/** A TCP flow the server pod (10.0.1.7) received from the client (10.0.0.5), as its table shows it. */
function flow(over: Partial<CountedFlow> = {}): CountedFlow {
  return {
    family: AF_INET,
    proto: 6,
    a: { ip: "10.0.0.5", port: 41234 },
    b: { ip: "10.0.1.7", port: 80 },
    started: "ingress",
    fromNode: false,
    closing: false,
    seenNs: 100n * S,
    expiresNs: 100n * S + 432_000n * S,
    packets: { egress: 3n, ingress: 4n },
    bytes: { egress: 300n, ingress: 400n },
    ...over,
  };
}
const tables = (...flows: CountedFlow[]) => new Map([[POD, flows]]);

describe("FlowEnds", () => {
  it("gives each read's growth, and a flow's end once when its entry stops vouching for it", () => {
    const ends = new FlowEnds();
    let r = ends.scan(tables(flow()), 101n * S);
    expect(r.deltas.map((d) => [d.packets, d.bytes])).toEqual([
      [
        { egress: 3n, ingress: 4n },
        { egress: 300n, ingress: 400n },
      ],
    ]);
    expect(r.ended).toEqual([]);
    // Nothing new: no delta.
    expect(ends.scan(tables(flow()), 102n * S)).toEqual({ deltas: [], ended: [] });
    const closing = flow({
      closing: true,
      seenNs: 103n * S,
      expiresNs: 113n * S,
      packets: { egress: 5n, ingress: 5n },
      bytes: { egress: 500n, ingress: 460n },
    });
    r = ends.scan(tables(closing), 104n * S);
    expect(r.deltas.map((d) => [d.packets, d.bytes])).toEqual([
      [
        { egress: 2n, ingress: 1n },
        { egress: 200n, ingress: 60n },
      ],
    ]);
    expect(r.ended).toEqual([]);
    // Its closing lifetime passed: ended, with its totals, and told once.
    r = ends.scan(tables(closing), 113n * S);
    expect(r.ended).toEqual([{ ifindex: POD, flow: closing }]);
    expect(ends.scan(tables(closing), 120n * S)).toEqual({ deltas: [], ended: [] });
    // The entry goes (LRU) after it was told: nothing more.
    expect(ends.scan(tables(), 121n * S)).toEqual({ deltas: [], ended: [] });
    expect(ends.size).toBe(0);
  });

  it("ends a flow whose entry left the table, or was taken by another flow of its 5-tuple", () => {
    const ends = new FlowEnds();
    const first = flow();
    ends.scan(tables(first), 101n * S);
    // Its pod went, or the LRU made room: ended at what was last read.
    expect(ends.scan(new Map(), 102n * S).ended).toEqual([{ ifindex: POD, flow: first }]);

    const closed = flow({ closing: true, seenNs: 103n * S, expiresNs: 113n * S });
    ends.scan(tables(closed), 104n * S);
    // A SYN on the same 5-tuple before the closing one aged out: a new flow, counts from 1.
    const next = flow({ seenNs: 105n * S, packets: { egress: 0n, ingress: 1n }, bytes: { egress: 0n, ingress: 60n } });
    const r = ends.scan(tables(next), 105n * S);
    expect(r.ended).toEqual([{ ifindex: POD, flow: closed }]);
    expect(r.deltas.map((d) => d.packets)).toEqual([{ egress: 0n, ingress: 1n }]);
  });

  it("keeps two pods' flows of one 5-tuple apart", () => {
    const ends = new FlowEnds();
    const f = flow();
    const r = ends.scan(
      new Map([
        [POD, [f]],
        [POD + 1, [f]],
      ]),
      101n * S,
    );
    expect(r.deltas.map((d) => d.ifindex)).toEqual([POD, POD + 1]);
    expect(ends.scan(tables(f), 102n * S).ended).toEqual([{ ifindex: POD + 1, flow: f }]);
  });
});

describe("countedRecordOf", () => {
  const names: Record<string, { namespace: string; pod: string }> = {
    "10.0.0.5": { namespace: "a", pod: "client" },
    "10.0.1.7": { namespace: "b", pod: "server" },
  };
  const ctx = (starts: Map<string, ReturnType<CountedContext["startOf"]>> = new Map()): CountedContext => ({
    node: "node-a",
    book: {
      end: (ip, port) => {
        const pod = names[ip];
        return pod ? { ip, port, kind: "pod", ...pod } : { ip, port, kind: "world" };
      },
    },
    wallOffsetNs: BigInt(Date.parse("2026-12-06T10:00:00.000Z")) * 1_000_000n,
    endpointOf: (ip) => (ip === "10.0.1.7" ? { hostIfindex: POD, datapath: "netkit" } : undefined),
    startOf: (id) => starts.get(id),
  });

  it("tells the flow in the order it started, sent and received from its source, with its first packet's verdict", () => {
    const start = flowRecord();
    const starts = new Map([[flowIdentity(start), { ...start }]]);
    const f = flow({ seenNs: 1500n * 1_000_000n });
    expect(countedRecordOf(POD, f, f, ctx(starts))).toEqual({
      ...start,
      time: "2026-12-06T10:00:01.500Z",
      state: "ended",
      // The server's ingress is what the client sent.
      packets: { sent: 4, received: 3 },
      bytes: { sent: 400, received: 300 },
    });
  });

  it("finds a departed pod's end by its first packet's record", () => {
    const start = flowRecord();
    const starts = new Map([[flowIdentity(start), { ...start }]]);
    // The server's end is b; the table lists it first, and its endpoint is gone.
    const f = flow({ a: { ip: "10.0.1.7", port: 80 }, b: { ip: "10.0.0.5", port: 41234 } });
    const gone = { ...ctx(starts), endpointOf: () => undefined };
    expect(countedRecordOf(POD, f, f, gone)).toMatchObject({
      subject: "b/server",
      source: { pod: "client", port: 41234 },
      destination: { pod: "server", port: 80 },
      policy: start.policy,
    });
  });

  it("says so when it never saw the flow's first packet", () => {
    const f = flow({ started: "egress", a: { ip: "10.0.1.7", port: 80 }, b: { ip: "203.0.113.9", port: 443 } });
    const r = countedRecordOf(POD, f, f, ctx());
    expect(r).toMatchObject({
      subject: "b/server",
      direction: "egress",
      source: { ip: "10.0.1.7", port: 80, kind: "pod" },
      destination: { ip: "203.0.113.9", port: 443, kind: "world" },
      policy: "started before it was recorded",
      packets: { sent: 3, received: 4 },
    });
  });
});

describe("FlowAggregator counts", () => {
  it("adds what crossed to its flow's key in the window it was read in, apart from the flows started", () => {
    const agg = new FlowAggregator({ windowMs: 60_000 });
    const t0 = Date.parse("2026-12-06T10:00:00.000Z");
    agg.add(flowRecord({ time: "2026-12-06T10:00:01.000Z" }));
    const counts = { packets: { sent: 4, received: 3 }, bytes: { sent: 400, received: 300 } };
    agg.count(flowRecord({ state: "ended" }), counts, t0 + 2000);
    agg.count(flowRecord({ state: "ended" }), counts, t0 + 4000);
    agg.count(flowRecord({ state: "ended", policy: "started before it was recorded" }), counts, t0 + 61_000);
    const [first, second] = agg.flush(t0 + 120_000);
    expect(first).toMatchObject({
      flows: 1,
      packetsSent: 8,
      bytesSent: 800,
      packetsReceived: 6,
      bytesReceived: 600,
    });
    expect(second).toMatchObject({ flows: 0, packetsSent: 4, policy: "started before it was recorded" });
    // A window with flows and nothing counted has no counts at all.
    agg.add(flowRecord({ time: "2026-12-06T10:03:00.000Z" }));
    expect(agg.flush(t0 + 240_000)[0]).not.toHaveProperty("packetsSent");
  });
});
