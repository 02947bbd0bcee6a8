/**
 * Flow records as the agent makes them (src/agent/flows/): each end named from the
 * informers (a pod that left keeps its name a while, unless its address has a new
 * owner), the rule that decided named while the pod is on the slot that decided, and
 * the reader's turn: records handed on in order, the lost told when they change,
 * recording on at start and off at stop.
 */
import { describe, expect, it, vi } from "vitest";
import { AddressBook } from "../../src/agent/flows/address-book";
import {
  type FlowContext,
  FlowReader,
  flowRecordOf,
  policiesOfRule,
  type RuleNames,
} from "../../src/agent/flows/reader";
import type { PolicyEvent } from "../../src/bpf/index";
import { AF_INET } from "../../src/cni/address";
import type { FlowRecord } from "../../src/flows/record";

/** A book holding these pods, node-a at 192.168.1.10 and Service b/web at 10.96.0.10. */
function bookOf(pods: { namespace: string; name: string; ips: string[] }[], now?: () => number): AddressBook {
  const book = new AddressBook({ keepDepartedMs: 60_000, now });
  for (const p of pods) book.pod(`${p.namespace}/${p.name}`, { ...p, hostNetwork: false });
  book.node("node-a", { name: "node-a", addresses: ["192.168.1.10"] });
  book.service("b/web", { namespace: "b", name: "web", clusterIPs: ["10.96.0.10"] });
  return book;
}

describe("AddressBook", () => {
  it("names pods, nodes, ClusterIPs and the world", () => {
    const book = bookOf([{ namespace: "a", name: "client", ips: ["10.244.0.5", "fd00::5"] }]);
    expect(book.end("10.244.0.5", 40000)).toEqual({
      ip: "10.244.0.5",
      port: 40000,
      kind: "pod",
      namespace: "a",
      pod: "client",
    });
    expect(book.end("fd00::5", 1).pod).toBe("client");
    expect(book.end("192.168.1.10", 0)).toMatchObject({ kind: "node", node: "node-a" });
    expect(book.end("10.96.0.10", 80)).toMatchObject({ kind: "service", namespace: "b", service: "web" });
    expect(book.end("8.8.8.8", 53)).toEqual({ ip: "8.8.8.8", port: 53, kind: "world" });
  });

  it("follows each change: a departed pod's name is kept a while, unless its address has a new owner", () => {
    let now = 0;
    const book = bookOf(
      [
        { namespace: "a", name: "gone", ips: ["10.244.0.5"] },
        { namespace: "a", name: "reused", ips: ["10.244.0.6"] },
      ],
      () => now,
    );
    now = 1000;
    book.pod("a/gone", undefined);
    book.pod("a/reused", undefined);
    book.pod("b/next", { namespace: "b", name: "next", ips: ["10.244.0.6"], hostNetwork: false });
    expect(book.end("10.244.0.5", 0)).toMatchObject({ kind: "pod", namespace: "a", pod: "gone" });
    expect(book.end("10.244.0.6", 0)).toMatchObject({ namespace: "b", pod: "next" });
    now = 61_000;
    expect(book.end("10.244.0.5", 0).kind).toBe("world");
    // A pod that finished holds its address no more; one that moves to another keeps only the new.
    book.pod("b/next", { namespace: "b", name: "next", ips: ["10.244.0.6"], hostNetwork: false, terminal: true });
    expect(book.end("10.244.0.6", 0)).toMatchObject({ kind: "pod", pod: "next" }); // departed, still named
    book.node("node-a", { name: "node-a", addresses: ["192.168.1.11"] });
    expect(book.end("192.168.1.11", 0)).toMatchObject({ kind: "node", node: "node-a" });
    expect(book.end("192.168.1.10", 0)).toMatchObject({ kind: "node", node: "node-a" }); // departed
  });

  it("names an address two hold by the pod, then the Service, then the node, and the rest when one leaves", () => {
    const book = bookOf([]);
    book.service("c/edge", { namespace: "c", name: "edge", clusterIPs: ["192.168.1.10"] });
    expect(book.end("192.168.1.10", 0)).toMatchObject({ kind: "service", service: "edge" });
    book.pod("c/odd", { namespace: "c", name: "odd", ips: ["192.168.1.10"], hostNetwork: false });
    expect(book.end("192.168.1.10", 0)).toMatchObject({ kind: "pod", pod: "odd" });
    book.pod("c/odd", undefined);
    book.service("c/edge", undefined);
    expect(book.end("192.168.1.10", 0)).toMatchObject({ kind: "node", node: "node-a" });
    // A host-network pod holds no address of its own.
    book.pod("c/host", { namespace: "c", name: "host", ips: ["192.168.1.10"], hostNetwork: true });
    expect(book.end("192.168.1.10", 0)).toMatchObject({ kind: "node" });
  });
});

const event = (over: Partial<PolicyEvent>): PolicyEvent => ({
  timeNs: 1_000_000_000n,
  ifindex: 7,
  slot: 3,
  dir: "ingress",
  family: AF_INET,
  proto: 6,
  reason: "allowed",
  sport: 40000,
  dport: 80,
  src: "10.244.1.5",
  dst: "10.244.0.5",
  tier: "networkPolicy",
  rule: 0,
  fromNode: false,
  ...over,
});

function context(rules: Partial<RuleNames> = {}): FlowContext {
  const book = bookOf([
    { namespace: "b", name: "server", ips: ["10.244.0.5"] },
    { namespace: "a", name: "client", ips: ["10.244.1.5"] },
  ]);
  return {
    node: "node-a",
    book,
    rules: {
      ruleOf: (pod, slot, dir, bit) =>
        pod === "b/server" && slot === 3 && dir === "ingress"
          ? ["b/allow-a ingress[0]", "c1/r (Admin Deny)"][bit]
          : undefined,
      selectedBy: (pod) => (pod === "b/server" ? ["b/deny-all", "b/allow-a"] : []),
      audit: () => undefined,
      auditedBy: () => [],
      ...rules,
    },
    wallOffsetNs: 1_700_000_000_000_000_000n,
    datapathOf: (ip) => (ip === "10.244.0.5" ? "netkit" : undefined),
  };
}

describe("flowRecordOf", () => {
  it("names both ends, the subject, the rule and its policy for an allowed flow", () => {
    expect(flowRecordOf(event({}), context())).toEqual({
      time: new Date(1_700_000_001_000).toISOString(),
      node: "node-a",
      direction: "ingress",
      subject: "b/server",
      protocol: "TCP",
      source: { ip: "10.244.1.5", port: 40000, kind: "pod", namespace: "a", pod: "client" },
      destination: { ip: "10.244.0.5", port: 80, kind: "pod", namespace: "b", pod: "server" },
      verdict: "forwarded",
      reason: "allowed",
      tier: "networkPolicy",
      policy: "b/allow-a ingress[0]",
      policies: ["b/allow-a"],
      state: "new",
      datapath: "netkit",
    });
  });

  it("says default deny with the policies that isolate, a Cluster rule by its policy, a revoked flow", () => {
    const ctx = context();
    expect(flowRecordOf(event({ reason: "denied", rule: undefined }), ctx)).toMatchObject({
      verdict: "dropped",
      policy: "default deny",
      policies: ["b/deny-all", "b/allow-a"],
    });
    expect(flowRecordOf(event({ reason: "tier-denied", tier: "admin", rule: 1 }), ctx)).toMatchObject({
      verdict: "dropped",
      tier: "admin",
      policy: "c1/r (Admin Deny)",
      policies: ["c1"],
    });
    expect(flowRecordOf(event({ reason: "revoked", tier: "admin", rule: 1 }), ctx)).toMatchObject({ state: "revoked" });
    // The pod moved to another slot since: the bit is no longer its rule's name.
    expect(flowRecordOf(event({ slot: 9, rule: 1, tier: "admin" }), ctx).policy).toBe(
      "Admin rule 1 (rules changed since)",
    );
  });

  it("names the egress subject by its source, and what no policy or the node let through", () => {
    const ctx = context();
    const out = flowRecordOf(
      event({ dir: "egress", src: "10.244.1.5", dst: "8.8.8.8", dport: 53, proto: 17, tier: "none", rule: undefined }),
      ctx,
    );
    expect(out).toMatchObject({ subject: "a/client", protocol: "UDP", policy: "no policy", policies: [] });
    expect(out.tier).toBeUndefined();
    expect(out.destination).toEqual({ ip: "8.8.8.8", port: 53, kind: "world" });
    expect(
      flowRecordOf(event({ src: "192.168.1.10", fromNode: true, tier: "none", rule: undefined }), ctx),
    ).toMatchObject({
      policy: "from its node",
      source: { kind: "node", node: "node-a" },
    });
    // ICMP has no ports; an unknown subject is told by its device.
    expect(flowRecordOf(event({ proto: 1, dst: "10.244.9.9", sport: 7, dport: 7 }), ctx)).toMatchObject({
      subject: "ifindex 7",
      protocol: "ICMP",
      source: { port: 0 },
    });
  });

  it("says audit for an allowed flow an audit-mode policy would deny, judged on the remote end and the port opened", () => {
    const asked: string[] = [];
    const ctx = context({
      audit: (pod, dir, flow) => {
        asked.push(`${pod} ${dir} ${flow.remote} ${flow.protocol} ${flow.port}`);
        return flow.port === 80 ? { allowed: false, by: "default deny" } : { allowed: true, by: "b/try ingress[0]" };
      },
      auditedBy: () => ["b/try"],
    });
    expect(flowRecordOf(event({}), ctx)).toMatchObject({
      verdict: "audit",
      reason: "audit",
      policy: "default deny (audit)",
      policies: ["b/try"],
    });
    expect(flowRecordOf(event({ dport: 81 }), ctx).verdict).toBe("forwarded");
    // A Cluster rule that would deny is named, with its policy.
    const cnp = context({ audit: () => ({ allowed: false, by: "wall/no-a (Admin Deny)" }), auditedBy: () => ["wall"] });
    expect(flowRecordOf(event({}), cnp)).toMatchObject({ verdict: "audit", policies: ["wall"] });
    // Denied flows stay dropped, and the node's own flows are never audited.
    expect(flowRecordOf(event({ reason: "denied", rule: undefined }), cnp).verdict).toBe("dropped");
    expect(flowRecordOf(event({ fromNode: true, tier: "none", rule: undefined }), cnp).verdict).toBe("forwarded");
    expect(asked).toEqual(["b/server ingress 10.244.1.5 TCP 80", "b/server ingress 10.244.1.5 TCP 81"]);
  });

  it("reads the policies of merged and Cluster rules", () => {
    expect(policiesOfRule("a/p ingress[0], a/q ingress[2]")).toEqual(["a/p", "a/q"]);
    expect(policiesOfRule("tenant-wall/no-b (Baseline Deny)")).toEqual(["tenant-wall"]);
  });
});

describe("FlowReader", () => {
  it("turns recording on, hands records on in order, tells the lost when they change, and off at stop", () => {
    const on: boolean[] = [];
    let waiting = [event({ sport: 1 }), event({ sport: 2 })];
    let lost = 0n;
    const got: FlowRecord[] = [];
    const lostTold: bigint[] = [];
    const reader = new FlowReader(
      {
        record: (v) => on.push(v),
        take: (max) => waiting.splice(0, max),
        lost: () => lost,
        counted: () => new Map(),
      },
      () => context(),
      { record: (r) => got.push(r), lost: (n) => lostTold.push(n) },
      { intervalMs: 60_000, batch: 1 },
    );
    reader.start();
    expect(reader.poll()).toBe(1);
    lost = 3n;
    expect(reader.poll()).toBe(1);
    expect(reader.poll()).toBe(0);
    waiting = [];
    reader.stop();
    expect(on).toEqual([true, false]);
    expect(got.map((r) => r.source.port)).toEqual([1, 2]);
    expect(lostTold).toEqual([3n]);
  });

  it("drains: reads every record queued before the call, batch after batch, without waiting", () => {
    const waiting = Array.from({ length: 5 }, (_, i) => event({ sport: i + 1 }));
    const got: number[] = [];
    const reader = new FlowReader(
      { record: () => {}, take: (max) => waiting.splice(0, max), lost: () => 0n, counted: () => new Map() },
      () => context(),
      { record: (r) => got.push(r.source.port), lost: () => {} },
      { intervalMs: 60_000, batch: 2 },
    );
    reader.drain();
    expect(got).toEqual([1, 2, 3, 4, 5]);
    reader.drain();
    expect(got).toHaveLength(5);
  });

  it("takes the next batch at once after a whole one, and waits its interval after less", () => {
    vi.useFakeTimers();
    try {
      const waiting = Array.from({ length: 5 }, (_, i) => event({ sport: i + 1 }));
      const got: number[] = [];
      const reader = new FlowReader(
        {
          record: () => {},
          take: (max) => waiting.splice(0, max),
          lost: () => 0n,
          counted: () => new Map(),
        },
        () => context(),
        { record: (r) => got.push(r.source.port), lost: () => {} },
        { intervalMs: 100, batch: 2 },
      );
      reader.start();
      // Turns at 100 ms (2), then at once (a timer's least, 1 ms: 2, then 1, less than a
      // batch): the queue emptied within the first interval.
      vi.advanceTimersByTime(105);
      expect(got).toEqual([1, 2, 3, 4, 5]);
      // The next turn is an interval after the last, at 202 ms.
      waiting.push(event({ sport: 6 }));
      vi.advanceTimersByTime(96);
      expect(got).toHaveLength(5);
      vi.advanceTimersByTime(1);
      expect(got).toHaveLength(6);
      reader.stop();
      waiting.push(event({ sport: 7 }));
      vi.advanceTimersByTime(1000);
      expect(got).toHaveLength(6);
    } finally {
      vi.useRealTimers();
    }
  });
});
